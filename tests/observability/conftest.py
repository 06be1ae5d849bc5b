"""Fixtures of issue 23: the SDK's tracing switched on with a processor of the test's own (no
exporter: nothing leaves the process), and OpenTelemetry's in-memory span exporter and metric
reader."""

from __future__ import annotations

import pytest
from agents import set_trace_processors, set_tracing_disabled
from agents.tracing import TracingProcessor


class Collected(TracingProcessor):
    """Every trace started and span ended, in order (the SDK's processor interface)."""

    def __init__(self) -> None:
        self.traces: list = []
        self.spans: list = []

    def on_trace_start(self, trace) -> None:
        self.traces.append(trace)

    def on_trace_end(self, trace) -> None:
        pass

    def on_span_start(self, span) -> None:
        pass

    def on_span_end(self, span) -> None:
        self.spans.append(span)

    def shutdown(self) -> None:
        pass

    def force_flush(self) -> None:
        pass

    # --- reading ----------------------------------------------------------------------------
    def named(self, name: str) -> list:
        return [s for s in self.spans if _name(s) == name]

    def one(self, name: str):
        (span,) = self.named(name)
        return span

    def ours(self) -> list:
        return [s for s in self.spans if _name(s).startswith("saga.")]

    def by_id(self, span_id: str):
        return next(s for s in self.spans if s.span_id == span_id)

    def ancestors(self, span) -> list[str]:
        names = []
        while span.parent_id is not None:
            span = self.by_id(span.parent_id)
            names.append(_name(span))
        return names


def _name(span) -> str:
    return getattr(span.span_data, "name", None) or span.span_data.type


@pytest.fixture
def sdk_spans():
    """Tracing on, into a :class:`Collected` only; off again (as tests/conftest.py has it) after."""
    collected = Collected()
    set_trace_processors([collected])
    set_tracing_disabled(False)
    yield collected
    set_tracing_disabled(True)
    set_trace_processors([])


@pytest.fixture
def otel():
    """OpenTelemetry instrumentation into an in-memory span exporter and metric reader:
    ``(exporter, reader, instrumentation)``; removed after the test."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
        InMemorySpanExporter,
    )

    from sagacity_agents.otel import instrument, uninstrument

    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    done = instrument(tracer_provider=tracer_provider, meter_provider=meter_provider)
    yield exporter, reader, done
    uninstrument()
    meter_provider.shutdown()
    tracer_provider.shutdown()


def points(reader, name: str) -> list:
    """The data points of metric ``name`` collected now."""
    found = []
    data = reader.get_metrics_data()
    for resource in data.resource_metrics if data else ():
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name == name:
                    found.extend(metric.data.data_points)
    return found


@pytest.fixture(autouse=True)
def _no_silent_observer_failure(caplog, request):
    """An observer that raises is logged, not raised (core.observe): fail the test that hid one
    (a test of that very behaviour excepted)."""
    import logging

    caplog.set_level(logging.WARNING, logger="sagacity_agents.observe")
    yield
    if "broken" not in request.fixturenames:
        failures = [r.getMessage() for r in caplog.records if r.name == "sagacity_agents.observe"]
        assert failures == []
