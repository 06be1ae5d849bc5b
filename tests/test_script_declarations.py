"""R-04 a (issue 18): declaration ids do not depend on how the module was started. A tool
declared in a script run as ``python app.py`` is journaled as ``app:...`` (it was ``__main__:...``,
which ``saga recover --app app:agent`` could not find, and whose report then pointed at
``saga resolve``, which answers "not in doubt"). Real processes: the script, then the CLI."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from sagacity_agents.backends import Phase, SqliteJournal

pytestmark = pytest.mark.case("R-04a")

APP = textwrap.dedent('''
    """A trip whose card is declined; the hotel API is down on the first undo (UNDO_DOWN)."""
    import asyncio
    import os
    import sys

    from agents import Agent, function_tool, set_tracing_disabled
    from agents.testing import ScriptedModel, assistant_message, function_call

    from sagacity_agents import CompensationContext, Sagacity, compensable, record_undo_data

    set_tracing_disabled(True)


    def cancel_hotel(ctx: CompensationContext) -> None:
        if os.environ.get("UNDO_DOWN"):
            raise ConnectionError("hotel API down")
        with open("cancelled.txt", "a") as out:
            out.write(ctx.undo_data["booking_id"] + "\\n")


    def refund(ctx: CompensationContext) -> None:
        pass


    @function_tool
    @compensable(undo=cancel_hotel)
    def book_hotel(city: str) -> str:
        record_undo_data({"booking_id": "H-1"})
        return "booked H-1"


    @function_tool
    @compensable(undo=refund)
    def charge_card(amount: int) -> str:
        raise RuntimeError("card declined")


    model = ScriptedModel()
    model.enqueue([function_call("book_hotel", {"city": "Lisbon"}, call_id="c1")])
    model.enqueue([function_call("charge_card", {"amount": 300}, call_id="c2")])
    model.enqueue([assistant_message("Booked!")])
    agent = Agent(name="travel", model=model, tools=[book_hotel, charge_card])

    if __name__ == "__main__":
        result = asyncio.run(Sagacity("journal.db").run(agent, "Book Lisbon"))
        print(result.saga_id, result.status.value)
''')

OTHER = textwrap.dedent('''
    """Another module declaring a tool of the same name: not the declaration the journal names."""
    from agents import Agent, function_tool
    from sagacity_agents import compensable


    def nothing(ctx) -> None:
        pass


    @function_tool
    @compensable(undo=nothing)
    def book_hotel(city: str) -> str:
        return "booked"


    agent = Agent(name="travel", tools=[book_hotel])
''')


def run(cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    child = {k: v for k, v in os.environ.items() if k not in ("UNDO_DOWN", "SAGACITY_DB")}
    child.update(env)
    return subprocess.run([sys.executable, *args], cwd=cwd, env=child, capture_output=True,
                          text=True, timeout=120, check=False)


def entries(tmp_path: Path, saga_id: str) -> list:
    async def read() -> list:
        journal = SqliteJournal(tmp_path / "journal.db")
        try:
            return await journal.entries(saga_id)
        finally:
            await journal.close()

    return asyncio.run(read())


def left_for_recovery(tmp_path: Path) -> str:
    """Run ``python app.py`` with the hotel API down: the saga is left COMPENSATION_FAILED."""
    (tmp_path / "app.py").write_text(APP, "utf-8")
    proc = run(tmp_path, "app.py", UNDO_DOWN="1")
    assert proc.returncode == 0, proc.stderr
    saga_id, status = proc.stdout.split()
    assert status == "COMPENSATION_FAILED"
    return saga_id


def test_script_run_directly_is_recovered_with_app_module(tmp_path):
    """``python app.py`` journals ``app:book_hotel``; ``sagacity saga recover --app app:agent``
    (another process, importing ``app``) finds the undo, cancels the hotel and closes the saga."""
    saga_id = left_for_recovery(tmp_path)
    assert [e.payload["declaration"] for e in entries(tmp_path, saga_id)
            if e.phase is Phase.INTENT] == ["app:book_hotel", "app:charge_card"]

    recovered = run(tmp_path, "-m", "sagacity_agents", "saga", "recover", saga_id,
                    "--app", "app:agent", "--db", "journal.db")
    assert recovered.returncode == 0, recovered.stdout + recovered.stderr
    assert "COMPENSATED" in recovered.stdout and "undone: seq" in recovered.stdout
    assert (tmp_path / "cancelled.txt").read_text() == "H-1\n"


def test_a_missing_undo_names_the_cause_never_saga_resolve(tmp_path):
    """Recovered with an agent that does not declare the journaled tool: exit 1, and the output
    says the undo was not found, why, and what to do; it does not send the human to
    ``saga resolve`` (which refuses: a failed undo is not in doubt)."""
    saga_id = left_for_recovery(tmp_path)
    (tmp_path / "other.py").write_text(OTHER, "utf-8")
    recovered = run(tmp_path, "-m", "sagacity_agents", "saga", "recover", saga_id,
                    "--app", "other:agent", "--db", "journal.db")
    assert recovered.returncode == 1
    out = " ".join(recovered.stdout.split())
    assert "no undo registered for tool 'book_hotel' in the agent graph given (declaration app:book_hotel)" in out
    assert "undo not found: the agent given with --app declares no tool under the declaration id" in out
    assert "declaration_id=" in out and "then recover again" in out
    assert "saga resolve" not in out.replace("`saga resolve` does not apply", "")


def test_ids_follow_the_module_however_it_was_started(tmp_path):
    """``python pkg/app.py`` (a package folder) and ``python -m pkg.app`` give ``pkg.app:...``;
    ``python app.py`` gives ``app:...``: each what ``--app`` imports."""
    script = ("from sagacity_agents import no_undo\n"
              "@no_undo\ndef pay(n: int) -> str: ...\n"
              "print(pay.__sagacity_declaration__.declaration_id)\n")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("", "utf-8")
    (tmp_path / "pkg" / "app.py").write_text(script, "utf-8")
    (tmp_path / "app.py").write_text(script, "utf-8")
    assert run(tmp_path, "pkg/app.py").stdout.strip() == "pkg.app:pay"
    assert run(tmp_path, "-m", "pkg.app").stdout.strip() == "pkg.app:pay"
    assert run(tmp_path, "app.py").stdout.strip() == "app:pay"
