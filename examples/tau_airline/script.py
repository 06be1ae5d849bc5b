"""Recorded conversations as scripts for the SDK's ``ScriptedModel``.

A recorded transcript (``traj``) alternates user messages and assistant turns; an assistant turn
either calls one tool (the recordings have one call per turn, sometimes with text) or answers in
text, which ends the model's turn. A :class:`Script` keeps exactly that:

* each user message opens a :class:`Turn`, replayed as one run of the saga;
* each recorded assistant turn becomes one model step: its text (if any) and its tool calls, with
  the original call id and the original argument string;
* the recorded tool outputs are dropped: our tools produce them (the cross-check compares them).

Two treatments are deterministic and counted on the script:

* **reused call ids**: 37 conversations reuse a call id for a different call (13 of them within
  one user turn, which the SDK refuses; across turns the SDK would silently replace the earlier
  call and its output in the history). The first call keeps its id; the n-th call with the same
  id gets ``<id>-r<n>`` (e.g. ``call_abc-r2``), the function call and its output alike (the SDK
  derives the output's id from the call's);
* **conversations ending on a tool output** (38; the user simulator stopped or a transfer ended
  the chat): a final assistant message (:data:`APPENDED_FINAL`) is appended, so the last run has
  a final output. A trailing user message with no assistant reply (the ``###STOP###``/"thanks"
  message that ends 112 conversations) opens no run: nothing follows it to replay.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agents.testing import ScriptedModel, assistant_message, function_call

from .recordings import Conversation, load_conversations, load_transcripts

__all__ = ["APPENDED_FINAL", "Script", "ScriptedCall", "Turn", "load_scripts"]

APPENDED_FINAL = "[replay] The recorded conversation ends here, on a tool output."
"""Text of the final assistant message appended where a conversation ends on a tool output."""


@dataclass(frozen=True)
class ScriptedCall:
    """One tool call of the script.

    Attributes:
        position: Index of the call in the conversation (as in :class:`.RecordedCall`).
        call_id: The id the replay uses (the recorded id, rewritten if it was reused).
        recorded_id: The id as recorded.
        name: Tool name.
        arguments: The recorded argument string, unchanged.
    """

    position: int
    call_id: str
    recorded_id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class Step:
    """One recorded assistant turn: optional text, then its tool calls."""

    text: str | None
    calls: tuple[ScriptedCall, ...]


@dataclass(frozen=True)
class Turn:
    """A user message and the assistant steps that answer it (one saga run)."""

    user: str
    steps: tuple[Step, ...]


@dataclass(frozen=True)
class Script:
    """A recorded conversation, ready to drive a ``ScriptedModel``.

    Attributes:
        index: Position of the conversation in the recordings file (0-149).
        conversation: The recorded conversation (its calls, with recorded outputs).
        turns: The runs to make, in order.
        rewritten_ids: How many calls got a rewritten id.
        appended_final: Whether a final assistant message was appended.
        dropped_user_messages: Trailing user messages that open no run (0 or 1).
    """

    index: int
    conversation: Conversation
    turns: tuple[Turn, ...]
    rewritten_ids: int
    appended_final: bool
    dropped_user_messages: int

    @property
    def label(self) -> str:
        """``"task 34 trial 0"``."""
        return self.conversation.label

    @property
    def key(self) -> str:
        """``"34.0"``: task and trial, as accepted by ``--conversations``."""
        return f"{self.conversation.task_id}.{self.conversation.trial}"

    @property
    def calls(self) -> tuple[ScriptedCall, ...]:
        """Every scripted call, in order."""
        return tuple(call for turn in self.turns for step in turn.steps for call in step.calls)

    def model(self) -> ScriptedModel:
        """A fresh ``ScriptedModel`` holding every step of every turn, in order.

        One model serves all the runs of a replay: each run consumes the steps of its turn.
        """
        model = ScriptedModel()
        for turn in self.turns:
            for step in turn.steps:
                items: list[Any] = [assistant_message(step.text)] if step.text else []
                items += [function_call(c.name, c.arguments, call_id=c.call_id) for c in step.calls]
                model.enqueue(items)
        return model


def _unique_ids(recorded: Iterable[str]) -> list[str]:
    """Rewrite reused ids: the n-th occurrence (n >= 2) of an id becomes ``<id>-r<n>``."""
    seen: Counter[str] = Counter()
    ids = []
    for call_id in recorded:
        seen[call_id] += 1
        ids.append(call_id if seen[call_id] == 1 else f"{call_id}-r{seen[call_id]}")
    if len(set(ids)) != len(ids):  # a rewritten id clashing with a recorded one: never seen
        raise ValueError(f"id rewriting is not collision-free: {ids}")
    return ids


def build_script(index: int, run: dict[str, Any], conversation: Conversation) -> Script:
    """Turn one recorded run into a :class:`Script`.

    Args:
        index: The run's position in the recordings file.
        run: The recorded run (``traj`` is read).
        conversation: The same run as loaded by :func:`.load_conversations` (calls by position).

    Returns:
        The script.
    """
    messages = [m for m in run["traj"] if m["role"] in ("user", "assistant")]
    recorded_ids = [c["id"] for m in messages if m["role"] == "assistant"
                    for c in m.get("tool_calls") or ()]
    ids = iter(_unique_ids(recorded_ids))
    recorded_calls = iter(conversation.calls)
    turns: list[tuple[str, list[Step]]] = []
    for message in messages:
        if message["role"] == "user":
            turns.append((message["content"], []))
            continue
        calls = []
        for tool_call in message.get("tool_calls") or ():
            recorded = next(recorded_calls)
            function = tool_call["function"]
            assert (recorded.call_id, recorded.name) == (tool_call["id"], function["name"])
            calls.append(ScriptedCall(recorded.position, next(ids), tool_call["id"],
                                      recorded.name, function["arguments"]))
        turns[-1][1].append(Step(message.get("content") or None, tuple(calls)))
    dropped = 0
    if turns and not turns[-1][1]:
        turns.pop()
        dropped = 1
    appended = bool(turns) and bool(turns[-1][1][-1].calls)
    if appended:
        turns[-1][1].append(Step(APPENDED_FINAL, ()))
    script_turns = tuple(Turn(user, tuple(steps)) for user, steps in turns)
    rewritten = sum(1 for turn in script_turns for step in turn.steps for c in step.calls
                    if c.call_id != c.recorded_id)
    return Script(index, conversation, script_turns, rewritten, appended, dropped)


def load_scripts(data_dir: str | Path | None = None) -> tuple[Script, ...]:
    """Scripts of the 150 recorded conversations, in file order.

    Raises:
        DataNotFoundError: If the data folder is missing.
    """
    runs = load_transcripts(data_dir)
    conversations = load_conversations(data_dir)
    return tuple(
        build_script(index, run, conversation)
        for index, (run, conversation) in enumerate(zip(runs, conversations, strict=True))
    )
