"""A small app with an irreversible card charge whose card number is in the user's prompt and
in the tool's arguments (as in the demo), for the approval tests of sensitive values."""

from __future__ import annotations

import json
import os
from pathlib import Path

from agents import Agent, function_tool
from agents.testing import ScriptedModel, assistant_message, function_call

from sagacity_agents import irreversible

LEDGER = Path(os.environ.get("CARD_LEDGER", "card-ledger.txt"))

CARD = "4000 0000 0000 0002"
"""The demo's card number (Luhn-valid)."""
OTHER_CARD = "4242 4242 4242 4242"
PROMPT = f"charge 5 EUR to my card {CARD}"


@function_tool(needs_approval=True)
@irreversible
def charge(card_number: str, amount: int) -> str:
    """Charge a card (the test's ledger records which number the tool received)."""
    return _record(f"{amount} on {card_number}", "charged")


def _record(line: str, answer: str) -> str:
    with LEDGER.open("a") as fh:
        fh.write(line + "\n")
    return answer


def paused_agent(card: str = CARD) -> Agent:
    """An agent whose first turn charges ``card`` (the pause), then answers."""
    model = ScriptedModel()
    model.enqueue([function_call("charge", json.dumps({"card_number": card, "amount": 5}),
                                 call_id="c1")])
    model.enqueue([assistant_message("done")])
    return Agent(name="shop", model=model, tools=[charge])


def resumed_agent() -> Agent:
    """The same agent for a resume: its model only has the final answer left."""
    model = ScriptedModel()
    model.enqueue([assistant_message("done")])
    return Agent(name="shop", model=model, tools=[charge])


def executions() -> list[str]:
    return LEDGER.read_text().splitlines() if LEDGER.exists() else []


@function_tool(needs_approval=True)
def pay(card_number: str, amount: int) -> str:
    """A tool nobody declared: journaled from outside its body (its raw arguments)."""
    return _record(f"{amount} paid on {card_number}", "paid")


def undeclared_agent(first_turn: bool = True) -> Agent:
    """An agent paying with ``pay`` (undeclared) on its first turn, or only answering."""
    model = ScriptedModel()
    if first_turn:
        model.enqueue([function_call("pay", json.dumps({"card_number": CARD, "amount": 5}),
                                     call_id="p1")])
    model.enqueue([assistant_message("done")])
    return Agent(name="shop", model=model, tools=[pay])
