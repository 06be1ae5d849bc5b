"""Several workers on one PostgreSQL database, a pause approved from another process and resumed
by a third (docs/postgres.md, "Several workers on one database").

    python -m examples.multi_worker --db postgresql://postgres@127.0.0.1:5432/test [--workers 3]

Every step is its own process: `sagacity db migrate`; N workers (`examples.multi_worker.worker`)
running sagas at once, worker 0 also pausing one for a payout; `sagacity approvals approve`; then
`sagacity saga resume` in a third process; finally `sagacity journal verify` over every chain.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys

from examples.multi_worker.app import PAYOUTS, payouts


def _run(*args: str) -> str:
    done = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed ({done.returncode}):\n{done.stdout}{done.stderr}")
    return done.stdout


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", required=True, help="postgresql:// URI")
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--sagas", type=int, default=5, help="sagas per worker")
    args = parser.parse_args()
    cli = ("-m", "sagacity_agents")
    paid_before = len(payouts())  # the file outlives a run: count this run's lines only

    print(_run(*cli, "db", "migrate", "--db", args.db).strip())
    workers = [
        subprocess.Popen(
            [sys.executable, "-m", "examples.multi_worker.worker", "--db", args.db,
             "--index", str(i), "--sagas", str(args.sagas), *(["--payout"] if i == 0 else [])],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        for i in range(args.workers)
    ]
    outputs = []
    for worker in workers:
        out, err = worker.communicate(timeout=300)
        if worker.returncode != 0:
            raise SystemExit(f"a worker failed ({worker.returncode}):\n{out}{err}")
        outputs.append(out)
        print(out.strip())
    found = re.search(r"paused saga (\S+) request (\S+)", "".join(outputs))
    if found is None:
        raise SystemExit("no saga paused for approval")
    saga_id, request_id = found.groups()

    print(f"-- approving {request_id} from another process (the CLI)")
    _run(*cli, "approvals", "approve", request_id, "--as", "ops", "--reason", "invoice checked",
         "--db", args.db)
    print(f"-- resuming saga {saga_id} in a third process")
    resumed = _run(*cli, "saga", "resume", saga_id, "--app", "examples.multi_worker.app:agent",
                   "--db", args.db)
    print(resumed.strip())
    print("-- verifying every chain")
    print(_run(*cli, "journal", "verify", "--db", args.db).strip())
    sent = len(payouts()) - paid_before
    print(f"-- payouts sent by this run: {sent} (one line each in {PAYOUTS})")
    return 0 if sent == 1 else 1


if __name__ == "__main__":
    raise SystemExit(main())
