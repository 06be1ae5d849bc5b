"""Run one saga whose second step fails: the charge is refunded through the MCP server.

    PAYMENTS_DB=/tmp/payments.db python -m examples.mcp_payments --db /tmp/shop.db [--real-model]

With ``--server-dies`` the server exits right after it writes the charge, before it answers: the
call is left in doubt (nobody knows whether it charged). A recovery then runs the policy's
far-side check (``find_charge`` by the call's idempotency key), which finds the charge, journals
CHECKED "ran" and refunds it in the same recovery, with no human asked.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sqlite3

from agents import set_tracing_disabled

from sagacity_agents import Sagacity

from .app import agent


async def server_dies(db: str) -> None:
    """The charge's server dies mid-call; a recovery checks the far side and refunds."""
    os.environ["PAYMENTS_CHARGE_DIES"] = "1"  # the server process is started with this env
    shop = agent()
    async with shop.mcp_servers[0]:
        sagacity = Sagacity(db)
        result = await sagacity.run(shop, "Charge ann 49.00 EUR and ship order o-17.")
    del os.environ["PAYMENTS_CHARGE_DIES"]
    print(f"saga {result.saga_id}: {result.status.value}")
    for item in result.report.in_doubt if result.report else ():
        print(f"  in doubt: {item.tool} (call {item.call_id})")
    healthy = agent()  # recovery re-creates the server under its name
    async with healthy.mcp_servers[0]:
        recovered = await sagacity.recover(result.saga_id, healthy)
    for entry in await sagacity.journal.entries(result.saga_id):
        if entry.phase.value == "CHECKED":
            print(f"  checked at the far side: {entry.tool} (call {entry.call_id}): "
                  f"{entry.payload['verdict']}")
    print(f"recovered: {recovered.status.value}")
    for item in recovered.report.undone if recovered.report else ():
        print(f"  undone through the server: {item.tool} (call {item.call_id})")
    await sagacity.aclose()


async def main(db: str, real_model: bool = False, dies: bool = False) -> None:
    set_tracing_disabled(True)
    if dies:
        await server_dies(db)
        _print_charges()
        return
    shop = agent(real_model=real_model)
    async with shop.mcp_servers[0]:
        sagacity = Sagacity(db)
        result = await sagacity.run(shop, "Charge ann 49.00 EUR and ship order o-17.")
        await sagacity.aclose()
    print(f"saga {result.saga_id}: {result.status.value}")
    for item in result.report.undone if result.report else ():
        print(f"  undone through the server: {item.tool} (call {item.call_id})")
    _print_charges()


def _print_charges() -> None:
    with sqlite3.connect(os.environ.get("PAYMENTS_DB", "payments.db")) as db_:
        for charge_id, amount, refunded in db_.execute("SELECT id, amount, refunded FROM charges"):
            print(f"  charge {charge_id}: {amount} cents, refunded {refunded} time(s)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--db", default="shop.db", help="the saga journal (SQLite file)")
    parser.add_argument("--real-model", action="store_true",
                        help="use the SDK's default model (needs OPENAI_API_KEY) instead of the script")
    parser.add_argument("--server-dies", action="store_true",
                        help="the server dies mid-charge; recovery checks the far side and refunds")
    args = parser.parse_args()
    asyncio.run(main(args.db, args.real_model, args.server_dies))
