"""The saga in the Agents SDK's own trace: custom spans (``agents.tracing``), and the SDK trace
and span ids in every journal entry written inside a traced run.

Spans (docs/observability.md lists every name and attribute)::

    saga.run                      one per run of a saga (SagaRunHooks' block): final status, still dirty
      Agent / function spans      the SDK's own
        saga.call {tool}          one per journaled call, under the SDK's function span
      saga.undo {tool}            one per undo, newest effect first
      saga.approval.pause {tool}  one per call paused for a human
      saga.approval.decision {tool}  one per decision made in the trace (its wait)
    saga.recover / saga.resolve   in a trace of their own, grouped with the saga's (group_id)

The SDK opens its trace inside ``Runner.run`` only when none is current, and ends it when the
run returns, before ``SagaRunHooks`` compensates: :func:`saga_trace` opens the trace around the
run *and* its compensation (``Sagacity`` does so; ``SagaRunHooks`` users wrap their block in it),
honouring the run's ``RunConfig`` (``workflow_name``, ``trace_id``, ``group_id``,
``trace_metadata``, ``tracing_disabled``, ``trace_include_sensitive_data``).

Raw arguments and results go into spans only inside a :func:`saga_trace` whose run config has
``trace_include_sensitive_data`` true (the SDK's default, ``OPENAI_AGENTS_TRACE_INCLUDE_SENSITIVE_DATA``);
a trace opened otherwise (``agents.trace`` alone) gets hashes and ids, never values. Even then our
``saga.*`` spans carry sensitive values only as their masks (``core.observe.Step.shown``). The
SDK's *own* spans (a function span's input and output, a generation span's messages) and the
model provider are outside that guarantee: ``Sagacity.run`` warns
(``errors.SensitiveTraceWarning``, ``sdk/trace_warning.py``) when a tool of the run has sensitive
fields and the run config lets the SDK trace tool inputs.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from agents import RunConfig
from agents.tracing import (
    SpanError,
    custom_span,
    get_current_span,
    get_current_trace,
    trace,
)

from ..core import observe

__all__ = ["SPAN_NAMES", "add_trace_id_source", "install", "saga_trace"]

SPAN_NAMES = {
    "run": "saga.run",
    "call": "saga.call {tool}",
    "undo": "saga.undo {tool}",
    "approval.pause": "saga.approval.pause {tool}",
    "approval.decision": "saga.approval.decision {tool}",
    "recover": "saga.recover",
    "resolve": "saga.resolve",
}
"""Step kind -> the custom span's name (``{tool}``: ``gen_ai.tool.name``)."""

_NO_OP = "no-op"  # the id the SDK gives a disabled trace or span

sensitive_allowed: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "sagacity_trace_sensitive", default=False
)
"""Whether spans may carry raw arguments and results here (set by :func:`saga_trace`)."""

_trace_id_sources: list[Callable[[], str | None]] = []


def add_trace_id_source(source: Callable[[], str | None]) -> None:
    """Register a source of the trace id :func:`saga_trace` gives a new trace when the run
    config names none (``sagacity_agents.otel``: the current OpenTelemetry trace's 32 hex digits,
    so that both traces share them). Registered once."""
    if source not in _trace_id_sources:
        _trace_id_sources.append(source)


def _current() -> tuple[Any, Any]:
    """(current trace, current span), ``None`` for each that is absent or disabled."""
    current = get_current_trace()
    if current is None or current.trace_id == _NO_OP:
        return None, None
    span = get_current_span()
    return current, (span if span is not None and span.span_id != _NO_OP else None)


def sdk_link() -> dict[str, str] | None:
    """The SDK trace and span ids current here (``core.observe.trace_link``'s SDK source)."""
    current = get_current_trace()
    if current is None or current.trace_id == _NO_OP:  # tracing off: one context lookup
        return None
    span = get_current_span()
    if span is None or span.span_id == _NO_OP:
        return {"trace_id": current.trace_id}
    return {"trace_id": current.trace_id, "span_id": span.span_id}


def _plain(value: Any) -> Any:
    """``value`` as span data can hold it (JSON), its text otherwise."""
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        return str(value)


class SdkSpans:
    """The :class:`~sagacity_agents.core.observe.Observer` that makes custom spans in the SDK
    trace current in the step's context (none: the step is not followed)."""

    def follows(self, kind: str) -> bool:
        """Whether an SDK trace is current here (tracing on, inside a run or ``saga_trace``)."""
        current = get_current_trace()
        return current is not None and current.trace_id != _NO_OP

    def start(self, kind: str, attrs: dict[str, Any]) -> Any:
        """A custom span for the step, started and made current (``None`` outside a trace)."""
        current, _span = _current()
        if current is None:
            return None
        name = SPAN_NAMES.get(kind, f"saga.{kind}").format(tool=attrs.get("gen_ai.tool.name") or "?")
        span = custom_span(name, {k: v for k, v in attrs.items() if v is not None})
        span.start(mark_as_current=True)
        return span

    def end(self, handle: Any, attrs: dict[str, Any], error: str | None,
            sensitive: Mapping[str, Any] | None) -> None:
        """Fill the span's data, mark it in error when the step failed, finish it."""
        data = handle.span_data.data
        data.update({k: v for k, v in attrs.items() if v is not None})
        if sensitive and sensitive_allowed.get():
            data.update({k: _plain(v) for k, v in sensitive.items()})
        if error is not None:
            # An exception's text may quote the call's arguments: only with sensitive data on.
            message = error if sensitive_allowed.get() else observe.redacted_error(error, attrs.get("sagacity.outcome"))
            handle.set_error(SpanError(message=message, data={"sagacity.outcome": attrs.get("sagacity.outcome")}))
        finish(handle)


def finish(span: Any) -> None:
    """Finish ``span``, restoring the current span when this is the context that started it."""
    try:
        span.finish(reset_current=True)
    except ValueError:  # finished from another context (a stream's block left elsewhere)
        span.finish(reset_current=False)


_observer = SdkSpans()


def install() -> None:
    """Register the SDK spans observer and the SDK id source (``core.observe``); idempotent.
    Called when ``sagacity_agents.sdk`` is imported."""
    observe.add_observer(_observer)
    observe.add_link_source(sdk_link)


def run_span(saga_id: str, agent: str | None) -> Any:
    """Start the ``saga.run`` span (current), or ``None`` outside a trace."""
    if _current()[0] is None:
        return None
    span = custom_span(SPAN_NAMES["run"], {"sagacity.saga.id": saga_id, "sagacity.agent": agent})
    span.start(mark_as_current=True)
    return span


def end_run_span(span: Any, status: Any, report: Any, error: BaseException | None) -> None:
    """Finish the ``saga.run`` span with the saga's final status and what is still dirty."""
    if span is None:
        return
    data = span.span_data.data
    data["sagacity.saga.status"] = getattr(status, "value", status)
    dirty = list(report.still_dirty) if report is not None else []
    data["sagacity.still_dirty.count"] = len(dirty)
    data["sagacity.still_dirty.seqs"] = [item.seq for item in dirty]
    if report is not None:
        data["sagacity.undone.count"] = len(report.undone)
    if error is not None:
        data["sagacity.run.error"] = type(error).__qualname__
    bad = getattr(status, "value", status) not in ("COMPLETED", "AWAITING_APPROVAL", "OPEN")
    if bad:
        span.set_error(SpanError(message=f"saga {data['sagacity.saga.status']}",
                                 data={"still_dirty": len(dirty)}))
    finish(span)


@contextlib.contextmanager
def saga_trace(
    run_config: RunConfig | dict[str, Any] | None = None, *, saga_id: str | None = None,
    workflow_name: str | None = None,
) -> Iterator[Any]:
    """Open the SDK trace around a saga's run and its compensation (when none is current).

    ::

        run_config = RunConfig(workflow_name="trip", group_id="conversation-42")
        with saga_trace(run_config, saga_id=saga_id):
            async with SagaRunHooks(journal, agent=agent, saga_id=saga_id) as hooks:
                await Runner.run(agent, "book", hooks=hooks, run_config=run_config)

    Args:
        run_config: the run's config (a ``RunConfig`` or a dict of its fields, as
            ``Runner.run`` takes it); its ``workflow_name``, ``trace_id``, ``group_id``,
            ``trace_metadata`` and ``tracing_disabled`` shape the trace as ``Runner.run`` would,
            and ``trace_include_sensitive_data`` decides whether spans get raw values. ``None``:
            a default ``RunConfig()``.
        saga_id: the saga's id, the trace's ``group_id`` when the config names none (every
            trace of one saga, its recovery's included, groups together) and in its metadata.
        workflow_name: overrides the config's (``"sagacity recover"`` for a recovery).

    Raises:
        TypeError: a dict with a key ``RunConfig`` does not have.

    Yields:
        The trace opened here, or ``None`` (a trace was already current, or tracing is off).
    """
    # Runner.run takes a RunConfig or a dict of its fields: read both alike.
    config = RunConfig(**run_config) if isinstance(run_config, dict) else (run_config or RunConfig())
    token = sensitive_allowed.set(bool(config.trace_include_sensitive_data))
    try:
        if config.tracing_disabled or get_current_trace() is not None:
            yield None
            return
        trace_id = config.trace_id
        for source in () if trace_id else _trace_id_sources:
            trace_id = source() or trace_id
        metadata = dict(config.trace_metadata or {})
        if saga_id is not None:
            metadata.setdefault("sagacity.saga.id", saga_id)
        with trace(workflow_name or config.workflow_name, trace_id=trace_id,
                   group_id=config.group_id or saga_id, metadata=metadata or None,
                   tracing=config.tracing) as opened:
            yield opened
    finally:
        sensitive_allowed.reset(token)
