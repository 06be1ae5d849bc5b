"""The OpenTelemetry observer: spans for the steps that run outside an Agents SDK run, metrics
for every step, and the W3C ids of the current OTel span for journal entries.

Names: docs/observability.md. Imports OpenTelemetry (the ``otel`` extra): imported only by
:func:`sagacity_agents.otel.instrument`.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import metrics, trace
from opentelemetry.trace import (
    NonRecordingSpan,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
)

from ..core import observe

__all__ = ["OUT_OF_RUN_KINDS", "OtelObserver", "otel_link", "parent_from", "sdk_trace_id"]

SCOPE = "sagacity_agents"
"""The instrumentation scope name of every tracer and meter."""

OUT_OF_RUN_KINDS = {
    "recover": "sagacity.recover",
    "resolve": "sagacity.resolve",
    "approval.decision": "sagacity.approval.decision",
}
"""Steps that get an OTel span (kind -> span name): what runs outside an SDK run (the CLI, the
web inbox, another process; a decision made inline by ``Sagacity.run(approver=...)`` too). The
steps inside a run are spans of the SDK's trace only (``sdk.tracing``): bridge those with a
processor of the SDK's (``agents.add_trace_processor``) if OTel should have them too."""

_HEX = frozenset("0123456789abcdef")


def _hex_id(text: Any, prefix: str, digits: int) -> int | None:
    """The id ``prefix`` + hex digits stands for, read as ``digits`` hex digits (the first ones),
    or ``None`` (not such an id, or all zero: invalid in W3C trace context)."""
    if not isinstance(text, str) or not text.startswith(prefix):
        return None
    body = text[len(prefix):].lower()[:digits]
    if len(body) != digits or not set(body) <= _HEX:
        return None
    value = int(body, 16)
    return value or None


def parent_from(attrs: Mapping[str, Any]) -> Any:
    """The OTel context a step outside the run joins: the current OTel span when there is one
    (a web request's), else the run's trace as the journal knows it (``sagacity.linked.*``:
    the OTel ids when the run had them, else the SDK ids read as W3C ids: ``trace_<32 hex>`` is
    the trace id, the first 16 hex digits of ``span_<hex>`` the span id), else ``None``."""
    if trace.get_current_span().get_span_context().is_valid:
        return None  # the current context already has a parent
    trace_id = _hex_id(attrs.get("sagacity.linked.otel_trace_id"), "", 32)
    span_id = _hex_id(attrs.get("sagacity.linked.otel_span_id"), "", 16)
    if trace_id is None:
        trace_id = _hex_id(attrs.get("sagacity.linked.trace_id"), "trace_", 32)
        span_id = _hex_id(attrs.get("sagacity.linked.span_id"), "span_", 16)
    if trace_id is None or span_id is None:
        return None
    remote = SpanContext(trace_id, span_id, is_remote=True, trace_flags=TraceFlags(TraceFlags.SAMPLED))
    return trace.set_span_in_context(NonRecordingSpan(remote))


def otel_link() -> dict[str, str] | None:
    """The W3C ids of the OTel span current here (``core.observe.trace_link``'s OTel source)."""
    ctx = trace.get_current_span().get_span_context()
    if not ctx.is_valid:
        return None
    return {"otel_trace_id": f"{ctx.trace_id:032x}", "otel_span_id": f"{ctx.span_id:016x}"}


def sdk_trace_id() -> str | None:
    """The SDK trace id an SDK trace opened here takes: ``trace_`` + the current OTel trace's
    32 hex digits, so the two traces share them (``sdk.tracing.add_trace_id_source``)."""
    ctx = trace.get_current_span().get_span_context()
    return f"trace_{ctx.trace_id:032x}" if ctx.is_valid else None


def _attributes(attrs: Mapping[str, Any]) -> dict[str, Any]:
    """Attributes OTel accepts: ``None`` dropped, lists of ints kept, anything else as text."""
    out: dict[str, Any] = {}
    for key, value in attrs.items():
        if value is None:
            continue
        if isinstance(value, (str, bool, int, float)):
            out[key] = value
        elif isinstance(value, (list, tuple)) and all(isinstance(v, int) for v in value):
            out[key] = list(value)
        else:
            out[key] = str(value)
    return out


class OtelObserver:
    """Spans (:data:`OUT_OF_RUN_KINDS`) and metrics for the saga's steps.

    Args:
        tracer_provider: where spans go (``None``: the global one).
        meter_provider: where metrics go (``None``: the global one).
    """

    def __init__(self, tracer_provider: Any = None, meter_provider: Any = None) -> None:
        self.tracer = trace.get_tracer(SCOPE, tracer_provider=tracer_provider)
        meter = metrics.get_meter(SCOPE, meter_provider=meter_provider)
        self.meter = meter
        self.calls = meter.create_counter(
            "sagacity.calls", unit="{call}",
            description="Journaled tool calls, by tool and outcome as the journal judged it")
        self.call_failures = meter.create_counter(
            "sagacity.call.failures", unit="{call}",
            description="Calls that failed their saga (raised, or classified failed)")
        self.compensations = meter.create_counter(
            "sagacity.compensations", unit="{undo}", description="Undos run, by tool and outcome")
        self.compensation_failures = meter.create_counter(
            "sagacity.compensation.failures", unit="{undo}",
            description="Undos that failed, timed out or were left in doubt")
        self.approval_wait = meter.create_histogram(
            "sagacity.approval.wait", unit="s",
            description="Seconds from an approval request to its decision")
        self.append_duration = meter.create_histogram(
            "sagacity.journal.append.duration", unit="s",
            description="Seconds one journal append took, by backend")

    def follows(self, kind: str) -> bool:
        """Every step (its metrics)."""
        return True

    def start(self, kind: str, attrs: dict[str, Any]) -> Any:
        """A handle for every step (metrics); an OTel span too for steps outside an SDK run."""
        name = OUT_OF_RUN_KINDS.get(kind)
        if name is None:
            return (kind, None, None)  # inside a run: the SDK's spans tell it (sdk/tracing.py)
        parent = parent_from(attrs)
        if parent is None:  # the journal knows no trace: join the SDK trace current here, if any
            here = observe.trace_link() or {}
            parent = parent_from({f"sagacity.linked.{k}": here.get(k) for k in ("trace_id", "span_id")})
        span = self.tracer.start_span(name, context=parent, kind=SpanKind.INTERNAL,
                                      attributes=_attributes(attrs))
        token = otel_context.attach(trace.set_span_in_context(span))  # entries carry its ids
        return (kind, span, token)

    def end(self, handle: Any, attrs: dict[str, Any], error: str | None,
            sensitive: Mapping[str, Any] | None) -> None:
        """Record the step's metrics; end its span (raw values never go into OTel spans)."""
        kind, span, token = handle
        labels = {"gen_ai.tool.name": attrs.get("gen_ai.tool.name") or "",
                  "sagacity.outcome": attrs.get("sagacity.outcome") or ""}
        if kind == "call":
            self.calls.add(1, labels)
            if attrs.get("sagacity.verdict") == "failed":
                self.call_failures.add(1, {"gen_ai.tool.name": labels["gen_ai.tool.name"]})
        elif kind == "undo":
            self.compensations.add(1, labels)
            if attrs.get("sagacity.outcome") != "COMPENSATED":
                self.compensation_failures.add(1, labels)
        elif kind == "approval.decision" and error is None:
            wait = attrs.get("sagacity.approval.wait_seconds")
            if isinstance(wait, (int, float)):
                self.approval_wait.record(max(float(wait), 0.0), {
                    "gen_ai.tool.name": labels["gen_ai.tool.name"],
                    "sagacity.approval.decision": attrs.get("sagacity.approval.decision") or ""})
        if span is None:
            return
        if token is not None:
            otel_context.detach(token)
        span.set_attributes(_attributes(attrs))
        if error is not None:
            # OpenTelemetry spans never carry raw values; an exception's text may quote them.
            span.set_status(Status(StatusCode.ERROR, observe.redacted_error(error, attrs.get("sagacity.outcome"))))
        span.end()

    def timed_append(self, backend: str, started: float) -> None:
        """Record one append's latency (``time.perf_counter()`` at its start)."""
        self.append_duration.record(time.perf_counter() - started, {"sagacity.journal.backend": backend})
