"""Issue 23, point 3: OpenTelemetry metrics (in-memory reader) for the demo's failing saga,
the still-dirty / in-doubt gauges, and nothing importing OpenTelemetry without the extra."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from sagacity_agents import FailurePolicy, Sagacity, SagaStatus
from sagacity_agents.backends import Phase, SqliteJournal
from sagacity_agents.demo.booking import BookingSystem
from sagacity_agents.demo.trip import TRIP_REQUEST, build_agent

from .conftest import points

pytestmark = pytest.mark.case("O-23")


async def test_otel_metrics_of_the_demo_saga(tmp_path, otel):
    exporter, reader, _ = otel
    sagacity = Sagacity(str(tmp_path / "j.db"), policy=FailurePolicy.CONTINUE)
    try:
        result = await sagacity.run(build_agent(BookingSystem(tmp_path / "b.db", reset=True)),
                                    TRIP_REQUEST, max_turns=12)
        entries = await sagacity.journal.entries(result.saga_id)
    finally:
        await sagacity.aclose()
    assert result.status is SagaStatus.COMPENSATED
    calls = {(p.attributes["gen_ai.tool.name"], p.attributes["sagacity.outcome"]): p.value
             for p in points(reader, "sagacity.calls")}
    assert calls == {("book_flight", "EXECUTED"): 1, ("book_hotel", "EXECUTED"): 1,
                     ("charge_card", "FAILED"): 1}
    assert [(p.attributes["gen_ai.tool.name"], p.value)
            for p in points(reader, "sagacity.call.failures")] == [("charge_card", 1)]
    undos = {p.attributes["gen_ai.tool.name"]: p.attributes["sagacity.outcome"]
             for p in points(reader, "sagacity.compensations")}
    assert undos == {"book_hotel": "COMPENSATED", "book_flight": "COMPENSATED"}
    assert points(reader, "sagacity.compensation.failures") == []
    (append,) = points(reader, "sagacity.journal.append.duration")
    assert append.attributes == {"sagacity.journal.backend": "sqlite"}
    # one point per append call: an entry written alone is one, a batch (RUN_ENDED and
    # SAGA_CLOSED share a commit) is one for its entries
    assert len(entries) - 2 <= append.count <= len(entries) and append.sum > 0
    # inside an SDK run (tracing off here) no OTel span is made: the SDK's trace tells the run
    assert exporter.get_finished_spans() == ()
    # the entries carry no OTel ids: no OTel span was current
    assert all("trace" not in e.payload for e in entries)


async def _saga(journal, saga_id: str, *phases) -> None:
    for n, (phase, payload) in enumerate(phases):
        await journal.append(saga_id, phase, write_key=f"k{n}", payload=payload)


async def test_gauges_count_still_dirty_in_doubt_and_waiting_sagas(tmp_path, otel):
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    from sagacity_agents.otel import instrument

    path = tmp_path / "j.db"
    journal = SqliteJournal(path)
    clean = {"undone": [{"seq": 3}], "failed": [], "no_undo": [], "in_doubt": [], "kept_irreversible": [{"seq": 5}]}
    dirty = {**clean, "failed": [{"seq": 4}]}
    await _saga(journal, "completed", (Phase.SAGA_OPENED, {}), (Phase.SAGA_CLOSED, {"status": "COMPLETED"}))
    await _saga(journal, "clean", (Phase.SAGA_OPENED, {}), (Phase.SAGA_CLOSED, {"status": "COMPENSATED", "report": clean}))
    await _saga(journal, "dirty", (Phase.SAGA_OPENED, {}), (Phase.SAGA_CLOSED, {"status": "COMPENSATED", "report": dirty}))
    await _saga(journal, "undo-failed", (Phase.SAGA_OPENED, {}), (Phase.RUN_ENDED, {"status": "COMPENSATION_FAILED"}))
    await _saga(journal, "doubt", (Phase.SAGA_OPENED, {}), (Phase.RUN_ENDED, {"status": "IN_DOUBT"}))
    await _saga(journal, "waiting", (Phase.SAGA_OPENED, {}), (Phase.RUN_ENDED, {"status": "AWAITING_APPROVAL"}))
    await journal.close()
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    instrument(meter_provider=provider, gauges_from=str(path))  # the fixture's uninstruments
    # collected from a running event loop: the count runs in a thread of its own
    values = {name: points(reader, name)[0].value for name in (
        "sagacity.sagas.still_dirty", "sagacity.sagas.in_doubt", "sagacity.sagas.awaiting_approval")}
    assert values == {"sagacity.sagas.still_dirty": 2, "sagacity.sagas.in_doubt": 1,
                      "sagacity.sagas.awaiting_approval": 1}
    provider.shutdown()


def test_only_the_otel_package_imports_opentelemetry():
    """The core, the SDK layer, the CLI and the web inbox never import OpenTelemetry themselves:
    only ``sagacity_agents.otel`` (the extra), which the CLI imports guarded."""
    import ast
    from pathlib import Path

    import sagacity_agents

    root = Path(sagacity_agents.__file__).parent
    offenders = []
    for path in root.rglob("*.py"):
        if path.parent.name == "otel":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            offenders += [f"{path.relative_to(root)}: {n}" for n in names if n.startswith("opentelemetry")]
    assert offenders == []


def test_nothing_imports_the_otel_extra_when_it_is_missing(tmp_path):
    """Without the extra (its packages refused: the metrics API and the OTel SDK; the Agents
    SDK's own MCP dependency brings the tracing API alone), a saga runs, the CLI's hook stays
    silent, and ``sagacity_agents.otel`` is not loaded; a plain run never loads it either."""
    script = textwrap.dedent(f"""
        import asyncio, sys
        class Refuse:
            def find_spec(self, name, path=None, target=None):
                if name in ("opentelemetry.metrics", "opentelemetry.sdk") or name.startswith("opentelemetry.sdk."):
                    raise ImportError("not installed")
        if sys.argv[1] == "refused":
            sys.meta_path.insert(0, Refuse())
        from agents import set_tracing_disabled
        set_tracing_disabled(True)
        from sagacity_agents import Sagacity, FailurePolicy
        from sagacity_agents.cli.base import otel_if_installed
        from sagacity_agents.demo.booking import BookingSystem
        from sagacity_agents.demo.trip import TRIP_REQUEST, build_agent
        if sys.argv[1] == "refused":
            otel_if_installed()
        async def main():
            s = Sagacity(":memory:", policy=FailurePolicy.CONTINUE)
            r = await s.run(build_agent(BookingSystem({str(tmp_path / 'b.db')!r}, reset=True)), TRIP_REQUEST, max_turns=12)
            print(r.status.value)
        asyncio.run(main())
        print("sagacity_agents.otel" in sys.modules, "opentelemetry.sdk" in sys.modules)
    """)
    for mode in ("refused", "plain"):
        out = subprocess.run([sys.executable, "-c", script, mode], capture_output=True, text=True,
                             timeout=120, check=False)
        assert out.returncode == 0, out.stderr
        assert out.stdout.split() == ["COMPENSATED", "False", "False"], mode


async def test_sync_tool_writes_are_timed_too(tmp_path, otel):
    """A sync tool's INTENT and outcome are written from the SDK's worker thread
    (``append_sync``, issue 22): the append-latency histogram counts them as it counts an async
    tool's."""
    from agents import Agent, function_tool

    from sagacity_agents import read_only

    from ..sdk.helpers import scripted

    @function_tool
    @read_only
    def look(city: str) -> str:
        return f"sunny in {city}"

    _, reader, _ = otel
    model = scripted(*[[("look", {"city": f"c{i}"}, f"l{i}")] for i in range(5)], "done")
    sagacity = Sagacity(str(tmp_path / "j.db"))
    try:
        result = await sagacity.run(Agent(name="w", model=model, tools=[look]), "go")
        entries = await sagacity.journal.entries(result.saga_id)
    finally:
        await sagacity.aclose()
    assert result.status is SagaStatus.COMPLETED and len(entries) == 14
    (append,) = points(reader, "sagacity.journal.append.duration")
    assert len(entries) - 2 <= append.count <= len(entries)


async def test_a_failing_metrics_backend_never_changes_the_saga(tmp_path, otel, monkeypatch):
    """Telemetry never changes what the saga does: a metrics backend that raises on every
    append-latency record leaves the demo's saga COMPENSATED, the world clean."""
    _, _, instrumentation = otel

    def broken(*_args, **_kwargs):
        raise RuntimeError("metrics backend down")

    monkeypatch.setattr(instrumentation.observer, "timed_append", broken)
    booking = BookingSystem(tmp_path / "b.db", reset=True)
    sagacity = Sagacity(str(tmp_path / "j.db"), policy=FailurePolicy.CONTINUE)
    try:
        result = await sagacity.run(build_agent(booking), TRIP_REQUEST, max_turns=12)
    finally:
        await sagacity.aclose()
    assert result.status is SagaStatus.COMPENSATED
    assert result.report.clean
