"""A small app with an irreversible wire transfer, importable from subprocesses in tests."""

from __future__ import annotations

import os
from pathlib import Path

from agents import Agent, function_tool
from agents.testing import ScriptedModel, assistant_message, function_call

from sagacity_agents import compensable, irreversible

LEDGER = Path(os.environ.get("WIRE_LEDGER", "wire-ledger.txt"))


@function_tool(needs_approval=True)
@irreversible
def transfer(amount: int, to: str, currency: str = "USD") -> str:
    """Send money out."""
    with LEDGER.open("a") as fh:
        fh.write(f"{amount} {currency} -> {to}\n")
    return f"sent {amount} {currency} to {to}"


@function_tool
@compensable(undo=lambda ctx: None)
def note(text: str) -> str:
    """Write a note."""
    return "noted"


def paused_agent(*calls: tuple[str, str, str]) -> Agent:
    """An agent whose first turn makes the given (tool, raw args, call id) calls."""
    model = ScriptedModel()
    model.enqueue([function_call(name, args, call_id=cid) for name, args, cid in calls])
    model.enqueue([assistant_message("done")])
    return Agent(name="wire", model=model, tools=[transfer, note])


def resumed_agent() -> Agent:
    """The same agent for a resume: its model only has the final answer left."""
    model = ScriptedModel()
    model.enqueue([assistant_message("done")])
    return Agent(name="wire", model=model, tools=[transfer, note])


def executions() -> list[str]:
    return LEDGER.read_text().splitlines() if LEDGER.exists() else []


def misbehaving_agent() -> Agent:
    """The same agent for a resume whose model misbehaves: the SDK raises ModelBehaviorError."""
    from agents.exceptions import ModelBehaviorError

    model = ScriptedModel()
    model.enqueue(ModelBehaviorError("the model called a tool that does not exist"))
    return Agent(name="wire", model=model, tools=[transfer, note])
