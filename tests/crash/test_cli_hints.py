"""What the CLI prints after a crash can be run as printed: a child is killed (SIGKILL) after the
car's booking reached the far side, before its EXECUTED; then, as an operator would, in separate
processes: ``saga recover`` (the car in doubt), each ``saga resolve`` hint it printed, and the
``saga recover`` hint that printed. Each hint line is parsed from stdout and run as it is, with
the same environment, and exits 0; nothing says anything about an API key on stderr."""

from __future__ import annotations

import datetime as dt
import os
import shlex
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests import forked

from . import app

pytestmark = pytest.mark.multiprocess

ROOT = Path(__file__).resolve().parents[2]


def _hints(stdout: str) -> list[str]:
    """The command lines printed: lines that start (indented or not) with ``sagacity ``."""
    return [line.strip() for line in stdout.splitlines() if line.strip().startswith("sagacity ")]


def _answerable_at(stdout: str) -> dt.datetime | None:
    """The latest ``can be answered from TIME`` the output names (``None``: none)."""
    times = [dt.datetime.fromisoformat(line.split("answered from ", 1)[1].split(" ", 1)[0])
             for line in stdout.splitlines() if "answered from " in line]
    return max(times) if times else None


def _run(line: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    argv = shlex.split(line)
    if shutil.which("sagacity", path=env.get("PATH")) is None:
        argv = forked.python_command("-m", "sagacity_agents.cli", *argv[1:])
    return subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize(("backend", "answer"),
                         [("sqlite", "--ran"), ("sqlite", "--not-run"), ("postgres", "--ran")])
def test_every_hint_printed_after_a_crash_runs_as_printed(request, backend, answer, tmp_path):
    location = str(request.getfixturevalue("pg_uri")) if backend == "postgres" else str(tmp_path / "journal.db")
    far = str(tmp_path / "far.db")
    child = forked.context().Process(target=app.crash, args=("after-effect-before-executed", location, far))
    child.start()
    child.join(60)
    assert child.exitcode == -9
    env = {**os.environ, "CRASH_FAR_DB": far, "PYTHONPATH": os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)}
    env.pop("OPENAI_API_KEY", None)

    first = _run(f"sagacity saga recover {app.SAGA_ID} --app tests.crash.app:agent --db {shlex.quote(location)}", env)
    assert first.returncode == 1, first.stdout + first.stderr
    assert "API_KEY" not in first.stderr, first.stderr
    hints = _hints(first.stdout)
    resolves = [h for h in hints if h.startswith("sagacity saga resolve ")]
    recovers = [h for h in hints if h.startswith("sagacity saga recover ")]
    assert len(resolves) == 2 and len(recovers) == 1, first.stdout
    assert all("SEQ" not in h and "--db" in h for h in hints)
    at = _answerable_at(first.stdout)
    while at is not None and dt.datetime.now(dt.timezone.utc) <= at:
        time.sleep(0.5)  # the call's deadline: waited out, not asserted on

    (chosen,) = [h for h in resolves if f" {answer} " in h]
    resolved = _run(chosen, env)
    assert resolved.returncode == 0, resolved.stdout + resolved.stderr
    assert "API_KEY" not in resolved.stderr, resolved.stderr
    assert _hints(resolved.stdout) == recovers  # the same command both printed

    final = _run(recovers[0], env)
    assert final.returncode == 0, final.stdout + final.stderr
    assert "API_KEY" not in final.stderr, final.stderr
    assert final.stdout.startswith("COMPENSATED")
    cancelled = {kind for kind, _key in app.applications(far) if kind.startswith("cancel-")}
    assert cancelled == ({"cancel-hotel", "cancel-car"} if answer == "--ran" else {"cancel-hotel"})
