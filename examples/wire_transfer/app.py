"""The application: a payments agent whose `send_wire` is irreversible.

`agent()` is what `sagacity saga resume --app examples.wire_transfer.app:agent` loads: a fresh
agent built in whichever process resumes. The offline model below is rule-based rather than a
fixed script, so a fresh process resumes it correctly: it asks for the wire until a tool output
is in its input, then answers.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any

from agents import Agent, function_tool, set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message, function_call

from sagacity_agents import irreversible

if not os.environ.get("OPENAI_API_KEY"):
    set_tracing_disabled(True)  # offline example: no trace export to attempt

BANK_DB = Path(os.environ.get("WIRE_BANK_DB", "wire-bank.db"))
"""The "bank": a SQLite file of executed wires (separate from the journal)."""


def _bank() -> sqlite3.Connection:
    conn = sqlite3.connect(BANK_DB)
    conn.execute("CREATE TABLE IF NOT EXISTS wires (id INTEGER PRIMARY KEY, amount INTEGER, iban TEXT)")
    return conn


def executed_wires() -> list[tuple[int, str]]:
    """Every wire the bank executed, oldest first."""
    with _bank() as conn:
        return [tuple(r) for r in conn.execute("SELECT amount, iban FROM wires ORDER BY id")]  # type: ignore[misc]


@function_tool(needs_approval=True)
@irreversible
def send_wire(amount_eur: int, iban: str, memo: str = "") -> str:
    """Send a wire transfer. Money that left cannot be called back.

    Args:
        amount_eur: Whole euros to send.
        iban: The beneficiary's IBAN.
        memo: Text shown to the beneficiary.
    """
    with _bank() as conn:
        cursor = conn.execute("INSERT INTO wires (amount, iban) VALUES (?, ?)", (amount_eur, iban))
    return f"wire #{cursor.lastrowid}: {amount_eur} EUR to {iban} sent"


class PaymentsModel(ScriptedModel):
    """Offline stand-in for a real model: asks for one wire, then reports the tool's output."""

    async def get_response(self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any) -> Any:
        items = input if isinstance(input, list) else []
        outputs = [i.get("output") for i in items if isinstance(i, dict) and i.get("type") == "function_call_output"]
        if outputs:
            self.enqueue([assistant_message(f"Done: {outputs[-1]}")])
        else:
            self.enqueue([function_call(
                "send_wire", {"amount_eur": "2500", "iban": "DE89370400440532013000", "memo": "invoice 42"},
                call_id="call_wire_1",
            )])
        return await super().get_response(system_instructions, input, *args, **kwargs)


def agent() -> Agent[Any]:
    """A fresh payments agent (the `--app` entry point)."""
    return Agent(name="payments", instructions="Pay invoices.", model=PaymentsModel(), tools=[send_wire])
