"""What the saga tells the traces people read, without the core knowing any tracing library.

The core marks the steps an operator wants to see (a journaled call, an undo, an approval pause
or decision, a recovery, a human's resolution) with :func:`begin` / :meth:`Step.end`, and asks
:func:`trace_link` for the ids of the trace it runs in, which the journal stores in each entry
(:data:`TRACE_KEY`). Who turns them into spans and metrics is registered from outside: the SDK
layer (``sdk.tracing``: spans in the Agents SDK's trace, the SDK trace and span ids) and the
OpenTelemetry extra (``sagacity_agents.otel``: OTel spans, metrics, W3C ids). With nobody
registered a step costs one list check (``bench/observe_overhead.py``).

Attribute names are final here, so every observer shows the same ones (docs/observability.md):
the OpenTelemetry GenAI semantic-convention names where they exist (``gen_ai.tool.name``,
``gen_ai.tool.call.id``) and ``sagacity.*`` for the rest. Raw arguments and results travel
apart (``sensitive``): an observer shows them only when its run allows sensitive data, and even
then never a sensitive value: :meth:`Step.end` hands every observer the arguments, results,
error text and attributes with each sensitive value replaced by its mask (``core.scrub``: the
committed values of the journal, the defaults, the tool's declaration in :attr:`Step.spec`, and
the clear values met in the arguments wherever an error text quotes them), whatever the SDK's
``trace_include_sensitive_data`` says.

Why the trace ids go *inside* the hashed payload (docs/observability.md, "Journal and trace"):
every backend then stores the same bytes and the same hashes with no new column and no
migration; the link from an entry to its trace is evidence like the rest (an edit breaks the
chain and the entry's tag); entries written before this key existed simply have none, and
nothing in verification asks for it. A retry of the same write from another span is still the
same write: :func:`~sagacity_agents.core.journal.replay_of` compares payloads without this key.
"""

from __future__ import annotations

import re

import datetime as dt
import logging
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from .scrub import Scrubber

__all__ = [
    "TRACE_KEY",
    "redacted_error",
    "Observer",
    "Step",
    "add_link_source",
    "add_observer",
    "begin",
    "followed",
    "linked_attrs",
    "observing",
    "remove_link_source",
    "remove_observer",
    "seconds_since",
    "trace_link",
    "without_trace",
]

TRACE_KEY = "trace"
"""Payload key of an entry's trace link: ``{"trace_id", "span_id"}`` (the Agents SDK's ids,
``trace_<32 hex>`` / ``span_<24 hex>``) and/or ``{"otel_trace_id", "otel_span_id"}`` (W3C ids,
32 and 16 lowercase hex), from the context the entry was written in. Absent outside any trace."""

LinkSource = Callable[[], "Mapping[str, str] | None"]
"""Returns the ids of the trace and span current in this context, or ``None`` outside one."""

_link_sources: list[LinkSource] = []
_observers: list[Observer] = []
_log = logging.getLogger("sagacity_agents.observe")
"""Where a failing observer or id source is reported (the saga goes on without it)."""


class Observer(Protocol):
    """Turns steps into spans or metrics (``sdk.tracing``, ``sagacity_agents.otel``).

    Both methods are called in the context the step runs in (start and end in the same one), must
    be fast and must not raise: an observer's error would otherwise reach a tool's caller.
    """

    def follows(self, kind: str) -> bool:
        """Whether :meth:`start` would follow a step of ``kind`` here (asked first on the hot
        path, so that nothing is built for a step nobody follows)."""
        ...

    def start(self, kind: str, attrs: dict[str, Any]) -> Any:
        """A step of ``kind`` starts (``"call"``, ``"undo"``, ``"approval.pause"``,
        ``"approval.decision"``, ``"recover"``, ``"resolve"``); return a handle, or ``None``
        when this observer does not follow it (no trace current, say)."""
        ...

    def end(self, handle: Any, attrs: dict[str, Any], error: str | None,
            sensitive: Mapping[str, Any] | None) -> None:
        """The step of ``handle`` ended: ``attrs`` are all its attributes (those set since
        start included), ``error`` the failure's text when it failed, ``sensitive`` raw
        arguments / results (``"sagacity.call.args"``, ``"sagacity.call.result"``)."""
        ...


class Step:
    """One observed step: attributes gathered while it runs, handed to each observer at the end.

    Made by :func:`begin` only when some observer follows the step; callers hold ``None``
    otherwise and skip the calls (the hot path pays nothing more)."""

    __slots__ = ("_ended", "_handles", "attrs", "clear", "kind", "sensitive", "spec")

    def __init__(self, kind: str, attrs: dict[str, Any], handles: list[tuple[Observer, Any]]) -> None:
        self.kind = kind
        self.attrs = attrs
        self.sensitive: dict[str, Any] = {}
        self.spec: Any = None
        """What the step's tool declared sensitive (``core.sensitive.Sensitivity``; ``None``:
        the defaults): masked in what observers get."""
        self.clear: list[Any] = []
        """Clear values never handed to observers, read only to learn the sensitive values in
        them (a call's arguments, once the committed ones replaced them in :attr:`sensitive`):
        an error text quoting one is masked."""
        self._handles = handles
        self._ended = False

    def end(self, error: str | None = None, /, **attrs: Any) -> None:
        """End the step (once; later calls do nothing) with more ``attrs`` and, when it failed,
        the ``error`` text. Observers get them masked (:meth:`shown`). Never raises."""
        if self._ended:
            return
        self._ended = True
        self.attrs.update(attrs)
        try:
            sensitive, error = self.shown(error)
        except Exception:  # noqa: BLE001 - nothing unmasked leaves: drop what cannot be masked
            _log.warning("a %s step's values could not be masked; left out", self.kind, exc_info=True)
            sensitive, error = {}, (None if error is None else "error (details could not be masked)")
        for observer, handle in self._handles:
            try:
                observer.end(handle, self.attrs, error, sensitive or None)
            except Exception:  # noqa: BLE001 - telemetry never changes what the saga does
                _log.warning("observer %r failed to end a %s step", observer, self.kind, exc_info=True)

    def shown(self, error: str | None) -> tuple[dict[str, Any], str | None]:
        """``(sensitive values, error text)`` as observers may see them: every committed value
        as its mask, every value the defaults or :attr:`spec` call sensitive masked, and the
        clear values met there, card numbers too, masked inside the error text (an exception
        quoting the password it was given). Attributes are the library's own (ids, hashes,
        names, counts): never scanned, so no hash is ever cut by a card-number rule."""
        scrubber = Scrubber(self.spec)
        for value in self.clear:
            scrubber.value(value)  # learns the sensitive values in it; the result is dropped
        shown = {key: scrubber.value(value) for key, value in self.sensitive.items()}
        return shown, (scrubber.text(error) if error is not None else None)


def begin(kind: str, **attrs: Any) -> Step | None:
    """Start a step of ``kind`` with ``attrs`` (see :class:`Observer`); ``None`` when no
    observer follows it. Never raises."""
    if not _observers:
        return None
    handles: list[tuple[Observer, Any]] = []
    for observer in _observers:
        try:
            handle = observer.start(kind, attrs)
        except Exception:  # noqa: BLE001 - telemetry never changes what the saga does
            _log.warning("observer %r failed to start a %s step", observer, kind, exc_info=True)
            handle = None
        if handle is not None:
            handles.append((observer, handle))
    return Step(kind, attrs, handles) if handles else None


def followed(kind: str) -> bool:
    """Whether some observer follows a step of ``kind`` in this context. Never raises."""
    for observer in _observers:
        try:
            if observer.follows(kind):
                return True
        except Exception:  # noqa: BLE001 - telemetry never changes what the saga does
            _log.warning("observer %r failed to answer for a %s step", observer, kind, exc_info=True)
    return False


def trace_link() -> dict[str, str] | None:
    """The ids of the trace(s) current in this context, merged (:data:`TRACE_KEY`), or ``None``.
    Never raises."""
    if not _link_sources:
        return None
    if len(_link_sources) == 1:  # the common case, written out (twice per call)
        try:
            only = _link_sources[0]()
        except Exception:  # noqa: BLE001 - an entry is never refused for its telemetry
            _log.warning("trace-id source %r failed", _link_sources[0], exc_info=True)
            return None
        return dict(only) if only else None
    link: dict[str, str] | None = None
    for source in _link_sources:
        try:
            ids = source()
        except Exception:  # noqa: BLE001 - an entry is never refused for its telemetry
            _log.warning("trace-id source %r failed", source, exc_info=True)
            ids = None
        if ids:
            link = {**link, **ids} if link else dict(ids)
    return link


def without_trace(payload: Any) -> Any:
    """``payload`` without its :data:`TRACE_KEY` (the same write, whichever span wrote it)."""
    if isinstance(payload, dict) and TRACE_KEY in payload:
        return {k: v for k, v in payload.items() if k != TRACE_KEY}
    return payload


def linked_attrs(entries: Any, *, request_id: str | None = None) -> dict[str, str]:
    """The trace a step outside the run joins (a recovery, a human's decision or resolution):
    the trace link of the saga's newest entry that has one (with ``request_id``: of that
    request's AWAITING_APPROVAL entry, the pause the decision answers), as attributes
    ``sagacity.linked.<id>`` (``trace_id``, ``span_id``, ``otel_trace_id``, ``otel_span_id``).
    Empty when the journal knows no trace."""
    for entry in reversed(entries):
        payload = entry.payload
        if not isinstance(payload, dict) or not isinstance(payload.get(TRACE_KEY), dict):
            continue
        if request_id is not None and payload.get("request_id") != request_id:
            continue
        return {f"sagacity.linked.{k}": v for k, v in payload[TRACE_KEY].items() if isinstance(v, str)}
    return {}


def seconds_since(stamp: str | None, now: dt.datetime) -> float | None:
    """Seconds from the journal's fixed-width UTC text ``stamp`` to the aware ``now`` (an
    approval's wait); ``None`` when ``stamp`` cannot be read."""
    try:
        then = dt.datetime.strptime(stamp or "", "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=dt.UTC)
    except ValueError:
        return None
    return (now - then).total_seconds()


def observing() -> bool:
    """Whether some observer is registered (worth reading what a step joins)."""
    return bool(_observers)


def add_observer(observer: Observer) -> None:
    """Register ``observer`` (once; a second registration of the same object is ignored)."""
    if observer not in _observers:
        _observers.append(observer)


def remove_observer(observer: Observer) -> None:
    """Unregister ``observer`` (no error when it was not registered)."""
    if observer in _observers:
        _observers.remove(observer)


def add_link_source(source: LinkSource) -> None:
    """Register a source of trace ids for :func:`trace_link` (once)."""
    if source not in _link_sources:
        _link_sources.append(source)


def remove_link_source(source: LinkSource) -> None:
    """Unregister ``source`` (no error when it was not registered)."""
    if source in _link_sources:
        _link_sources.remove(source)


_ERROR_TYPE = re.compile(r"^([A-Za-z_][\w.]*)(?::|$)")


def redacted_error(error: str, outcome: Any = None) -> str:
    """An error text safe for a span that must carry no raw value: the exception's type when
    the text starts with one (``"ValueError: IBAN ... unknown"`` -> ``"ValueError"``), else the
    outcome; an exception's message may quote the call's arguments (an IBAN, a passport)."""
    found = _ERROR_TYPE.match(error.strip())
    head = found.group(1) if found else (str(outcome) if outcome else "error")
    return f"{head} (details redacted: trace_include_sensitive_data is off)"
