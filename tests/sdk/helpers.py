"""Helpers for driving agents with the SDK's scripted model."""

from __future__ import annotations

from typing import Any

from agents import Agent
from agents.testing import ScriptedModel, assistant_message, function_call

from sagacity_agents.backends import JournalEntry, Phase


def scripted(*turns: list[tuple[str, Any, str]] | str) -> ScriptedModel:
    """Build a ScriptedModel: each turn is a list of (tool, args, call_id) or a final text."""
    model = ScriptedModel()
    for turn in turns:
        if isinstance(turn, str):
            model.enqueue([assistant_message(turn)])
        else:
            model.enqueue([function_call(name, args, call_id=cid) for name, args, cid in turn])
    return model


def agent(model: ScriptedModel, *tools: Any, name: str = "agent") -> Agent[Any]:
    return Agent(name=name, model=model, tools=list(tools))


def phases(entries: list[JournalEntry], *, tool: str | None = None) -> list[str]:
    """Tool-entry phases in order (optionally for one tool)."""
    return [
        e.phase.value
        for e in entries
        if e.tool is not None and (tool is None or e.tool == tool)
        and e.phase in (Phase.INTENT, Phase.EXECUTED, Phase.REFUSED, Phase.FAILED)
    ]


def tool_outputs(model: ScriptedModel) -> list[str]:
    """Every function_call_output the model was sent in its last call."""
    items = model.calls[-1].input if model.calls else []
    return [i["output"] for i in items if isinstance(i, dict) and i.get("type") == "function_call_output"]
