"""Start the payment: the run pauses on the wire and prints how to approve and resume it.

    python -m examples.wire_transfer [--db wire.db]
"""

from __future__ import annotations

import argparse
import asyncio
import shlex

from sagacity_agents import Sagacity, SagaStatus

from .app import BANK_DB, agent


async def start(db: str) -> str:
    sagacity = Sagacity(db)
    result = await sagacity.run(agent(), "Pay invoice 42 to our supplier.")
    await sagacity.aclose()
    assert result.status is SagaStatus.AWAITING_APPROVAL, result.status
    (request,) = result.approvals
    print(f"saga {result.saga_id} is waiting for approval")
    print(f"request {request.request_id}: {request.tool} {request.args} (sha256 {request.args_hash})")
    print("approve it from another shell, then resume:")
    db = shlex.quote(db)  # a URI's "?" must reach the command as it is
    print(f"  sagacity approvals show {request.request_id} --db {db}")
    print(f"  sagacity approvals approve {request.request_id} --as alice --reason 'invoice checked' --db {db}")
    print(f"  sagacity saga resume {result.saga_id} --app examples.wire_transfer.app:agent --db {db}")
    print(f"  sagacity journal show {result.saga_id} --db {db}")
    print(f"(the bank's executed wires go to {BANK_DB}, whatever --db says: the resuming process "
          "loads the app, not this command line; WIRE_BANK_DB=path moves it)")
    return result.saga_id


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--db", default="wire.db", help="journal + approval store (SQLite)")
    asyncio.run(start(parser.parse_args().db))


if __name__ == "__main__":
    main()
