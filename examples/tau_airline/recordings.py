"""Reading the recorded GPT-4o conversations (``trajectories-gpt-4o.json``).

Each conversation's ``traj`` is a chat transcript.  An assistant message with
``tool_calls`` is followed by one ``tool`` message per call holding the output
the original implementation returned.  Call ids are reused within some
conversations, so calls and outputs are paired by position, not by id.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from .store import resolve_data_dir

__all__ = ["Conversation", "RecordedCall", "load_conversations", "load_transcripts"]

TRAJECTORIES_FILE = "trajectories-gpt-4o.json"


@dataclass(frozen=True)
class RecordedCall:
    """One tool call of a recorded conversation.

    Attributes:
        position: 0-based index of the call within its conversation.
        call_id: The id the model gave the call (not unique).
        name: Tool name.
        arguments: Parsed arguments (``{}`` if the JSON could not be parsed).
        raw_arguments: The arguments JSON string as recorded.
        output: The recorded tool output, or ``None`` if the transcript has
            no ``tool`` message for it.
    """

    position: int
    call_id: str
    name: str
    arguments: dict[str, Any]
    raw_arguments: str
    output: str | None


@dataclass(frozen=True)
class Conversation:
    """One recorded run of a task.

    Attributes:
        task_id: τ-bench task index (0-49).
        trial: Trial number (0-2).
        reward: 1.0 if the run solved the task.
        calls: The tool calls in order.
    """

    task_id: int
    trial: int
    reward: float
    calls: tuple[RecordedCall, ...] = field(repr=False)

    @property
    def label(self) -> str:
        """Short name, e.g. ``"task 34 trial 0"``."""
        return f"task {self.task_id} trial {self.trial}"


def _parse_arguments(raw: str) -> dict[str, Any]:
    """Parse a call's JSON arguments, tolerating malformed text."""
    try:
        parsed = json.loads(raw or "{}")
    except json.JSONDecodeError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def _extract_calls(messages: list[dict[str, Any]]) -> tuple[RecordedCall, ...]:
    """Pair each assistant tool call with the ``tool`` message that answers it.

    Args:
        messages: A conversation's ``traj``.

    Returns:
        The calls in order.  After an assistant message with *n* calls, the
        next *n* ``tool`` messages (in order) are its outputs.
    """
    calls: list[RecordedCall] = []
    for index, message in enumerate(messages):
        if message.get("role") != "assistant" or not message.get("tool_calls"):
            continue
        following = messages[index + 1 :]
        outputs = []
        for reply in following:
            if reply.get("role") != "tool":
                break
            outputs.append(reply.get("content"))
        for offset, tool_call in enumerate(message["tool_calls"]):
            function = tool_call["function"]
            calls.append(
                RecordedCall(
                    position=len(calls),
                    call_id=tool_call.get("id", ""),
                    name=function["name"],
                    arguments=_parse_arguments(function.get("arguments", "")),
                    raw_arguments=function.get("arguments", ""),
                    output=outputs[offset] if offset < len(outputs) else None,
                )
            )
    return tuple(calls)


@lru_cache(maxsize=4)
def _read(path: Path) -> tuple[dict[str, Any], ...]:
    with open(path, encoding="utf-8") as fh:
        return tuple(json.load(fh))


@lru_cache(maxsize=4)
def _load(path: Path) -> tuple[Conversation, ...]:
    runs = _read(path)
    return tuple(
        Conversation(
            task_id=run["task_id"],
            trial=run["trial"],
            reward=run.get("reward", 0.0),
            calls=_extract_calls(run["traj"]),
        )
        for run in runs
    )


def load_conversations(data_dir: str | Path | None = None) -> tuple[Conversation, ...]:
    """Load the 150 recorded conversations (cached per file).

    Args:
        data_dir: The ``tau-airline`` folder (see
            :func:`~.store.resolve_data_dir`); ``None`` for the default.

    Returns:
        The conversations in file order.

    Raises:
        DataNotFoundError: If the data folder is missing.
        FileNotFoundError: If the trajectories file is missing.
    """
    return _load(resolve_data_dir(data_dir) / TRAJECTORIES_FILE)


def load_transcripts(data_dir: str | Path | None = None) -> tuple[dict[str, Any], ...]:
    """Load the 150 recorded runs as stored (``task_id``, ``trial``, ``traj``...; cached).

    The harness needs the whole transcript (user messages, assistant texts),
    not only the calls of :func:`load_conversations`; both come in file order.
    The returned dicts are shared by every caller: do not modify them.

    Args:
        data_dir: The ``tau-airline`` folder; ``None`` for the default.

    Returns:
        The recorded runs in file order.

    Raises:
        DataNotFoundError: If the data folder is missing.
        FileNotFoundError: If the trajectories file is missing.
    """
    return _read(resolve_data_dir(data_dir) / TRAJECTORIES_FILE)
