"""The wire-transfer approval with nothing but ``Runner.run`` + ``SagaRunHooks`` (no facade).

    python -m examples.hooks_approval pay [--db hooks.db] [--wait SECONDS]
    python -m examples.hooks_approval resume SAGA_ID [--db hooks.db]

``pay`` runs the payments agent under ``SagaRunHooks``; the run pauses on the irreversible
``send_wire`` and ONE call (``hooks.request_approvals``) stores the request and the stripped
snapshot. With ``--wait`` it then awaits the decision (``wait_for_decision``: a human approves
from another shell with ``sagacity approvals approve``) and resumes in the same process;
without it, ``resume`` does that later in any process: ONE call (``hooks.resume_state``) returns
the checked ``RunState`` to pass to ``Runner.run`` on the same saga.
"""

from __future__ import annotations

import argparse
import asyncio

from agents import Runner

from sagacity_agents import SagacityError, SagaRunHooks, wait_for_decision
from sagacity_agents.backends import SqliteApprovalStore, SqliteJournal

from ..wire_transfer.app import agent


async def pay(db: str, wait: float | None) -> str:
    journal, store = SqliteJournal(db), SqliteApprovalStore(db)
    try:
        payer = agent()
        async with SagaRunHooks(journal, agent=payer, approvals=store) as hooks:
            result = await Runner.run(payer, "Pay invoice 42 to our supplier.", hooks=hooks)
            paused = await hooks.request_approvals(result)
        print(f"saga {hooks.saga_id}: {hooks.status.value if hooks.status else '?'}")
        for request in paused.requests:
            print(f"request {request.request_id}: {request.tool} {request.args} (sha256 {request.args_hash})")
            print(f"  approve it: sagacity approvals approve {request.request_id} --as alice --db {db}")
        if wait is None or not paused.requests:
            print(f"then resume: python -m examples.hooks_approval resume {hooks.saga_id} --db {db}")
            return hooks.saga_id
        for request in paused.requests:
            decided = await wait_for_decision(store, request.request_id, timeout=wait)
            print(f"request {request.request_id} {decided.decision} by {decided.approver}")
        await _resume(journal, store, hooks.saga_id)
        return hooks.saga_id
    finally:
        await journal.close()
        await store.close()


async def _resume(journal: SqliteJournal, store: SqliteApprovalStore, saga_id: str) -> None:
    payer = agent()  # a fresh agent: this may be another process
    async with SagaRunHooks(journal, agent=payer, saga_id=saga_id, approvals=store) as hooks:
        state = await hooks.resume_state(context=None)  # checked, consumed, CONSUMED journaled
        result = await Runner.run(payer, state, hooks=hooks)
    print(f"saga {saga_id}: {hooks.status.value if hooks.status else '?'}: {result.final_output}")


async def resume(db: str, saga_id: str) -> None:
    journal, store = SqliteJournal(db), SqliteApprovalStore(db)
    try:
        await _resume(journal, store, saga_id)
    finally:
        await journal.close()
        await store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    pay_cmd = commands.add_parser("pay", help="run until the wire pauses (and optionally wait)")
    pay_cmd.add_argument("--db", default="hooks.db", help="journal + approval store (SQLite)")
    pay_cmd.add_argument("--wait", type=float, default=None, metavar="SECONDS",
                         help="await the decision, then resume in this process")
    resume_cmd = commands.add_parser("resume", help="resume a decided saga (any process)")
    resume_cmd.add_argument("saga_id")
    resume_cmd.add_argument("--db", default="hooks.db")
    args = parser.parse_args()
    try:
        if args.command == "pay":
            asyncio.run(pay(args.db, args.wait))
        else:
            asyncio.run(resume(args.db, args.saga_id))
    except SagacityError as exc:  # refused (a closed saga, no decision...): say why, exit 1
        raise SystemExit(f"Error: {exc}") from None


if __name__ == "__main__":
    main()
