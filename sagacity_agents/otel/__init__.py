"""OpenTelemetry for sagacity-agents (the ``otel`` extra: ``pip install sagacity-agents[otel]``).

::

    from sagacity_agents.otel import instrument
    instrument()                                   # the global tracer and meter providers
    instrument(gauges_from="journal.db")           # + still-dirty / in-doubt gauges here

What it adds (every name: docs/observability.md):

* spans ``sagacity.recover``, ``sagacity.resolve``, ``sagacity.approval.decision`` for what
  runs outside an Agents SDK run (CLI, web inbox, another process), children of the current
  OTel span, else joined to the run's trace as the saga's journal knows it;
* the W3C ids of the current OTel span in every journal entry (``otel_trace_id``,
  ``otel_span_id`` beside the SDK's ``trace_id``/``span_id``), and an SDK trace opened by
  ``saga_trace`` inside an OTel span takes ``trace_`` + the OTel trace id (one id, two traces);
* metrics: calls, call failures, compensations and their failures, the approval wait
  (histogram), journal append latency by backend (histogram), and, with ``gauges_from``, the
  still-dirty, in-doubt and awaiting-approval sagas, counted when a reader collects, in the
  process that collects (one ``saga_summaries`` pass; ``bench/observe_gauges.py``).

Nothing else in the package imports OpenTelemetry: without the extra, nothing changes. The CLI
and the web inbox call :func:`instrument` themselves when OpenTelemetry is installed (the
global providers are no-ops until an application or ``opentelemetry-instrument`` sets them).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import inspect
import logging
import os
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from opentelemetry import metrics

from ..core import observe
from ..core.health import SagaHealth, saga_health
from .observer import OtelObserver, otel_link, sdk_trace_id

logger = logging.getLogger(__name__)

__all__ = ["GAUGES", "Instrumentation", "instrument", "instrument_from_env", "uninstrument"]

GAUGES = {
    "sagacity.sagas.still_dirty": ("still_dirty", "Sagas with an effect still in the world"),
    "sagacity.sagas.in_doubt": ("in_doubt", "Sagas left open IN_DOUBT (a human must answer)"),
    "sagacity.sagas.awaiting_approval": ("awaiting_approval", "Sagas paused for a decision"),
    "sagacity.sagas.reopened": ("reopened", "Sagas REOPENED by a late outcome after their close"),
}
"""Gauge name -> (:class:`~sagacity_agents.core.health.SagaHealth` field, description)."""


def _backends() -> dict[type, str]:
    from ..backends.memory.journal import InMemoryJournal
    from ..backends.postgres.journal import PostgresJournal
    from ..backends.sqlite.journal import SqliteJournal

    return {InMemoryJournal: "memory", SqliteJournal: "sqlite", PostgresJournal: "postgres"}


class Instrumentation:
    """What :func:`instrument` installed (the observer, the timed appends, the gauges)."""

    def __init__(self, observer: OtelObserver) -> None:
        self.observer = observer
        self.originals: dict[tuple[type, str], Any] = {}
        self.gauges: list[Any] = []

    def time_appends(self, backends: dict[type, str]) -> None:
        """Wrap each backend class's ``append`` / ``append_many`` / ``append_sync`` (a sync
        tool's direct write) to record their latency."""
        for cls, label in backends.items():
            for name in ("append", "append_many", "append_sync"):
                original = cls.__dict__.get(name)
                if original is None:
                    continue
                self.originals[(cls, name)] = original
                setattr(cls, name, _timed(original, label, self.observer))

    def restore(self) -> None:
        """Put the backends' methods back."""
        for (cls, name), original in self.originals.items():
            setattr(cls, name, original)
        self.originals.clear()


def _record(observer: OtelObserver, backend: str, started: float) -> None:
    """Record one append's latency; a failing metrics backend is logged, never raised: the
    append it measured is already written, and its result must reach the saga."""
    try:
        observer.timed_append(backend, started)
    except Exception:  # noqa: BLE001 - telemetry never changes what the saga does
        logger.warning("sagacity: recording an append's latency failed", exc_info=True)


def _timed(method: Any, backend: str, observer: OtelObserver) -> Any:
    if not inspect.iscoroutinefunction(method):  # append_sync: a sync tool's direct write
        @functools.wraps(method)
        def timed_sync(self: Any, *args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return method(self, *args, **kwargs)
            finally:
                _record(observer, backend, started)

        return timed_sync

    @functools.wraps(method)
    async def timed(self: Any, *args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return await method(self, *args, **kwargs)
        finally:
            _record(observer, backend, started)

    return timed


_current: Instrumentation | None = None


class _HealthCache:
    """One count of the journal's sagas shared by the gauges of a collection, recounted at most
    every ``ttl`` seconds (a collection reads three gauges; each count is a pass over the journal).

    The count runs in a thread of its own, on a journal opened for it: gauge callbacks are
    synchronous and may run on a thread whose event loop is running."""

    def __init__(self, location: str | Path, ttl: float) -> None:
        self.location = location
        self.ttl = ttl
        self.lock = threading.Lock()
        self.at = -float("inf")
        self.health: SagaHealth | None = None

    def get(self) -> SagaHealth:
        with self.lock:
            if self.health is None or time.monotonic() - self.at >= self.ttl:
                with concurrent.futures.ThreadPoolExecutor(1) as pool:
                    self.health = pool.submit(asyncio.run, self._count()).result()
                self.at = time.monotonic()
            return self.health

    async def _count(self) -> SagaHealth:
        from ..stores import open_journal

        journal = open_journal(self.location)
        try:
            return await saga_health(journal)
        finally:
            await journal.close()


def _gauge_callback(cache: _HealthCache, field: str) -> Any:
    from opentelemetry.metrics import Observation

    def observe_field(_options: Any) -> Iterable[Any]:
        return [Observation(getattr(cache.get(), field))]

    return observe_field


def instrument(
    *, tracer_provider: Any = None, meter_provider: Any = None,
    gauges_from: str | Path | None = None, gauges_ttl: float = 30.0,
) -> Instrumentation:
    """Install OpenTelemetry spans, metrics and ids (see the module notes); idempotent: a second
    call replaces the first.

    Args:
        tracer_provider: an OTel ``TracerProvider`` (``None``: the global one).
        meter_provider: an OTel ``MeterProvider`` (``None``: the global one).
        gauges_from: a journal location (SQLite path, ``postgresql://`` URI) whose sagas the
            still-dirty / in-doubt / awaiting-approval gauges count, each time a metric reader
            collects, in this process. Give it in one process (the web inbox, an ops job), not
            in every worker: each collection is one pass over the journal's index
            (``bench/observe_gauges.py`` for its cost). ``None``: no gauges.
        gauges_ttl: seconds a count is reused by later collections (the three gauges of one
            collection share one count whatever it is); 0: count at every collection.

    Returns:
        The :class:`Instrumentation` (for :func:`uninstrument`).
    """
    global _current
    uninstrument()
    observer = OtelObserver(tracer_provider, meter_provider)
    current = Instrumentation(observer)
    observe.add_observer(observer)
    observe.add_link_source(otel_link)
    current.time_appends(_backends())
    try:
        from ..sdk.tracing import add_trace_id_source
    except ImportError:  # pragma: no cover - the SDK is a dependency
        pass
    else:
        add_trace_id_source(sdk_trace_id)
    if gauges_from is not None:
        meter = metrics.get_meter("sagacity_agents", meter_provider=meter_provider)
        cache = _HealthCache(gauges_from, max(gauges_ttl, 1e-3))
        for name, (field, description) in GAUGES.items():
            current.gauges.append(meter.create_observable_gauge(
                name, callbacks=[_gauge_callback(cache, field)], unit="{saga}",
                description=description))
    _current = current
    return current


def uninstrument() -> None:
    """Remove what :func:`instrument` installed (gauges stay with their meter provider)."""
    global _current
    if _current is None:
        return
    observe.remove_observer(_current.observer)
    observe.remove_link_source(otel_link)
    _current.restore()
    _current = None


def instrument_from_env() -> Instrumentation | None:
    """:func:`instrument` with the global providers for the CLI and the web inbox, unless
    ``SAGACITY_OTEL=0`` or the application already instrumented (its choice stands)."""
    if os.environ.get("SAGACITY_OTEL", "1") == "0":
        return None
    return _current if _current is not None else instrument()
