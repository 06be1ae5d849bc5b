"""The tests' fork server (``tests/zygote.py``): a child it forks behaves as ``python`` started
it would (arguments, stdio, exit code, a crash, environment, working directory), children run
side by side, and a child killed by SIGKILL takes neither the server nor the next child with it.

Each child prints its parent's process id: the server's when the server forked it, which tells
a served child from one the launcher handed to the real interpreter (its fallback)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests import zygote

CHILD = """\
import json, os, sys
block = len(sys.argv) > 1 and sys.argv[1] == "block"
if len(sys.argv) > 1 and sys.argv[1] == "crash":
    raise RuntimeError("the child's own failure")
if len(sys.argv) > 1 and sys.argv[1] == "abort":
    os.abort()
print(json.dumps({"ppid": os.getppid(), "pid": os.getpid(), "argv": sys.argv[1:],
                  "cwd": os.getcwd(), "probe": os.environ.get("ZYGOTE_PROBE"),
                  "name": __name__, "stdin": "" if block else sys.stdin.readline().strip()}),
      flush=True)
print("to stderr", file=sys.stderr)
if block:
    sys.stdin.read()
sys.exit(int(os.environ.get("ZYGOTE_EXIT", "0")))
"""


@pytest.fixture
def child(tmp_path: Path) -> Path:
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    return script


def _run(*args: str, stdin: str = "\n", **kwargs) -> subprocess.CompletedProcess[str]:
    return subprocess.run(zygote.served(*args), input=stdin, capture_output=True, text=True,
                          check=False, **kwargs)


def _report(done: subprocess.CompletedProcess[str]) -> dict:
    return json.loads(done.stdout.splitlines()[0])


def test_a_script_runs_in_a_child_of_the_server_and_its_output_and_exit_code_come_back(child):
    done = _run(str(child), "one", "two", stdin="hello\n", env={**os.environ, "ZYGOTE_EXIT": "3"})
    report = _report(done)
    assert done.returncode == 3
    assert report["ppid"] == zygote.server_pid()
    assert report["argv"] == ["one", "two"] and report["name"] == "__main__"
    assert report["stdin"] == "hello"
    assert done.stderr == "to stderr\n"


def test_a_module_runs_as_main_from_the_working_directory(child):
    done = _run("-m", "child", "x", cwd=child.parent)
    report = _report(done)
    assert done.returncode == 0, done.stderr
    assert report["ppid"] == zygote.server_pid()
    assert report["argv"] == ["x"] and report["name"] == "__main__"


def test_a_crashing_child_is_reported_with_its_traceback_and_exit_code(child):
    done = _run(str(child), "crash")
    assert done.returncode == 1
    assert "RuntimeError: the child's own failure" in done.stderr
    assert "Traceback" in done.stderr


def test_a_child_killed_by_a_signal_is_reported_as_killed_by_it(child):
    done = _run(str(child), "abort")
    assert done.returncode == -signal.SIGABRT


def test_the_environment_and_working_directory_are_the_callers(child, tmp_path: Path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = _run(str(child), cwd=elsewhere, env={**os.environ, "ZYGOTE_PROBE": "from the test"})
    report = _report(done)
    assert done.returncode == 0, done.stderr
    assert report["ppid"] == zygote.server_pid()  # served, not handed to the real interpreter
    assert report["probe"] == "from the test"
    assert report["cwd"] == str(elsewhere)


def test_a_start_up_variable_that_differs_falls_back_to_the_real_interpreter(child):
    done = _run(str(child), env={**os.environ, "PYTHONHASHSEED": "123", "ZYGOTE_PROBE": "p"})
    report = _report(done)
    assert done.returncode == 0, done.stderr
    assert report["ppid"] != zygote.server_pid()
    assert report["probe"] == "p"


def test_children_run_side_by_side(child):
    launchers = [subprocess.Popen(zygote.served(str(child), "block", str(n)), stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for n in range(4)]
    # Every child is up (each has written its line) before any is let go: they run at once.
    reports = [json.loads(p.stdout.readline()) for p in launchers]  # type: ignore[union-attr]
    for p in launchers:
        p.stdin.close()  # type: ignore[union-attr]
    assert [p.wait() for p in launchers] == [0, 0, 0, 0]
    assert [r["argv"] for r in reports] == [["block", str(n)] for n in range(4)]
    assert len({r["pid"] for r in reports}) == 4
    assert {r["ppid"] for r in reports} == {zygote.server_pid()}
    for p in launchers:
        p.stdout.close()  # type: ignore[union-attr]
        p.stderr.close()  # type: ignore[union-attr]


def test_the_server_survives_a_child_killed_by_sigkill(child):
    launcher = subprocess.Popen(zygote.served(str(child), "block"), stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    report = json.loads(launcher.stdout.readline())  # type: ignore[union-attr]
    assert report["ppid"] == zygote.server_pid()
    os.kill(report["pid"], signal.SIGKILL)
    _, _ = launcher.communicate()
    assert launcher.returncode == -signal.SIGKILL
    done = _run(str(child), "after")
    assert done.returncode == 0, done.stderr
    assert _report(done)["ppid"] == zygote.server_pid()


def test_a_signal_to_the_launcher_reaches_the_child(child):
    launcher = subprocess.Popen(zygote.served(str(child), "block"), stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    report = json.loads(launcher.stdout.readline())  # type: ignore[union-attr]
    launcher.send_signal(signal.SIGTERM)
    launcher.communicate()
    assert launcher.returncode == -signal.SIGTERM
    assert not _alive(report["pid"])


def test_a_launcher_killed_outright_takes_its_child_with_it(child):
    launcher = subprocess.Popen(zygote.served(str(child), "block"), stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    report = json.loads(launcher.stdout.readline())  # type: ignore[union-attr]
    launcher.kill()
    launcher.communicate()
    # The server notices the launcher's closed connection and kills the child: a real process
    # must go away, so this waits (as long as the machine takes, checking every 10 ms).
    while _alive(report["pid"]):
        time.sleep(0.01)
    assert _report(_run(str(child)))["ppid"] == zygote.server_pid()


def _alive(pid: int) -> bool:
    """Whether ``pid`` still runs (the server reaps its children: a dead one is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ")[-1][:1] != "Z"
    except FileNotFoundError:
        return False


def test_the_switch_turns_the_server_off(monkeypatch):
    monkeypatch.setenv("SAGACITY_TEST_ZYGOTE", "0")
    assert zygote.command("-m", "x") == [sys.executable, "-m", "x"]
    monkeypatch.setenv("SAGACITY_TEST_ZYGOTE", "1")
    assert zygote.command("-m", "x") == zygote.served("-m", "x")
