"""One worker process: runs its sagas against the shared database, then exits.

    python -m examples.multi_worker.worker --db URI --index I --sagas K [--payout]

With ``--payout`` it also starts one saga that pauses for approval and prints
``paused saga SAGA_ID request REQUEST_ID``.
"""

from __future__ import annotations

import argparse
import asyncio

from sagacity_agents import Sagacity, SagaStatus

from .app import agent


async def main(db: str, index: int, sagas: int, payout: bool) -> int:
    sagacity = Sagacity(db)  # this process's own pools; nothing shared but the database
    try:
        results = await asyncio.gather(
            *(sagacity.run(agent(), f"order-{index}-{n}") for n in range(sagas))
        )
        done = sum(r.status is SagaStatus.COMPLETED for r in results)
        print(f"worker {index}: {done}/{sagas} sagas completed", flush=True)
        if payout:
            paused = await sagacity.run(agent(), "payout to acme")
            assert paused.status is SagaStatus.AWAITING_APPROVAL, paused.status
            (request,) = paused.approvals
            print(f"paused saga {paused.saga_id} request {request.request_id}", flush=True)
        return 0 if done == sagas else 1
    finally:
        await sagacity.aclose()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--db", required=True)
    parser.add_argument("--index", type=int, required=True)
    parser.add_argument("--sagas", type=int, default=5)
    parser.add_argument("--payout", action="store_true")
    args = parser.parse_args()
    raise SystemExit(asyncio.run(main(args.db, args.index, args.sagas, args.payout)))
