"""Run one saga whose second step fails: the charge is refunded through the MCP server.

    PAYMENTS_DB=/tmp/payments.db python -m examples.mcp_payments --db /tmp/shop.db [--real-model]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sqlite3

from agents import set_tracing_disabled

from sagacity_agents import Sagacity

from .app import agent


async def main(db: str, real_model: bool = False) -> None:
    set_tracing_disabled(True)
    shop = agent(real_model=real_model)
    async with shop.mcp_servers[0]:
        sagacity = Sagacity(db)
        result = await sagacity.run(shop, "Charge ann 49.00 EUR and ship order o-17.")
        await sagacity.aclose()
    print(f"saga {result.saga_id}: {result.status.value}")
    for item in result.report.undone if result.report else ():
        print(f"  undone through the server: {item.tool} (call {item.call_id})")
    with sqlite3.connect(os.environ.get("PAYMENTS_DB", "payments.db")) as db_:
        for charge_id, amount, refunded in db_.execute("SELECT id, amount, refunded FROM charges"):
            print(f"  charge {charge_id}: {amount} cents, refunded {refunded} time(s)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--db", default="shop.db", help="the saga journal (SQLite file)")
    parser.add_argument("--real-model", action="store_true",
                        help="use the SDK's default model (needs OPENAI_API_KEY) instead of the script")
    args = parser.parse_args()
    asyncio.run(main(args.db, args.real_model))
