"""The application every worker runs: an order agent whose stock reservations are compensable and
whose payouts are irreversible (they wait for a human).

`agent()` is what `sagacity saga resume --app examples.multi_worker.app:agent` loads in whichever
process resumes. The offline model is rule-based, so a fresh process continues correctly: it asks
for the tool the task names until a tool output is in its input, then answers.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from agents import Agent, function_tool, set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message, function_call

from sagacity_agents import compensable, irreversible

if not os.environ.get("OPENAI_API_KEY"):
    set_tracing_disabled(True)  # offline example: no trace export to attempt

PAYOUTS = Path(os.environ.get("MULTI_WORKER_PAYOUTS", "multi-worker-payouts.txt"))
"""Payouts actually sent, one line each (the irreversible effect, outside the journal)."""


def payouts() -> list[str]:
    """Every payout sent so far."""
    return PAYOUTS.read_text("utf-8").splitlines() if PAYOUTS.exists() else []


@function_tool
@compensable(undo=lambda ctx: None)  # releasing a reservation: nothing to do in this example
def reserve(order: str, qty: int) -> str:
    """Reserve stock for an order.

    Args:
        order: The order id.
        qty: Units to reserve.
    """
    return f"reserved {qty} for {order}"


@function_tool(needs_approval=True)
@irreversible
def pay_out(amount_eur: int, to: str) -> str:
    """Pay money out to a supplier. It cannot be called back.

    Args:
        amount_eur: Whole euros.
        to: The supplier.
    """
    with PAYOUTS.open("a", encoding="utf-8") as fh:
        fh.write(f"{amount_eur} EUR -> {to} (pid {os.getpid()})\n")
    return f"paid {amount_eur} EUR to {to}"


class OrderModel(ScriptedModel):
    """Offline stand-in for a real model: one tool call chosen from the task, then a summary."""

    async def get_response(self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any) -> Any:
        items = input if isinstance(input, list) else [{"role": "user", "content": str(input)}]
        outputs = [i.get("output") for i in items if isinstance(i, dict) and i.get("type") == "function_call_output"]
        task = next((str(i.get("content")) for i in items if isinstance(i, dict) and i.get("role") == "user"), "")
        if outputs:
            self.enqueue([assistant_message(f"done: {outputs[-1]}")])
        elif task.startswith("payout"):
            self.enqueue([function_call("pay_out", {"amount_eur": 900, "to": "acme"}, call_id="call_pay")])
        else:
            self.enqueue([function_call("reserve", {"order": task, "qty": 2}, call_id="call_reserve")])
        return await super().get_response(system_instructions, input, *args, **kwargs)


def agent() -> Agent[Any]:
    """A fresh order agent (the `--app` entry point)."""
    return Agent(name="orders", instructions="Handle orders.", model=OrderModel(),
                 tools=[reserve, pay_out])
