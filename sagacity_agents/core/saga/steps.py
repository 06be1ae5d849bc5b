"""One call path for async and sync tool bodies: a call is written once, as a generator of the
steps to perform (journal appends, the body, coroutines of the saga's own), and run by one of
two drivers, :func:`drive` on the event loop and :func:`drive_in_thread` from a worker thread.

The generator does no I/O: it yields what to do and is sent the result back (or has the error
thrown in), so every decision (retry a lost INTENT, mark an unencodable result, hold a refused
outcome) is made in one place for both kinds of body. A step is one of:

* :class:`Append`: append one entry to the saga's journal (the entry is sent back);
* :data:`BODY`: run the tool's body (its result is sent back);
* an awaitable: a coroutine of the saga's (an approval check, a refusal); the thread driver
  runs it on the saga's event loop.

The thread driver appends through the journal's blocking ``append_sync`` when the fence view
has it (SQLite, memory: no hop to the event loop), else on the loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Generator
from typing import Any, TypeVar

from ..entries import Phase

__all__ = ["BODY", "Append", "Steps", "drive", "drive_in_thread"]

T = TypeVar("T")

Steps = Generator[Any, Any, T]
"""A call's step sequence: yields steps, returns the call's value."""


class Append:
    """Append one entry to the saga's journal: ``journal.append(saga_id, phase, **fields)``."""

    __slots__ = ("fields", "phase")

    def __init__(self, phase: Phase, fields: dict[str, Any]) -> None:
        self.phase = phase
        self.fields = fields


BODY = object()
"""The step that runs the tool's body."""


def _resume(method: Callable[[Any], Any], arg: Any) -> tuple[bool, Any]:
    """Send ``arg`` into the steps (or throw it in): ``(False, next step)``, or ``(True, what
    they returned)``; what they raise goes on."""
    try:
        return False, method(arg)
    except StopIteration as stop:
        return True, stop.value


async def drive(steps: Steps[T], journal: Any, saga_id: str,
                body: Callable[[], Awaitable[Any]] | None = None) -> T:
    """Run ``steps`` on the event loop: appends and coroutines awaited, ``body()`` awaited.

    Returns:
        What the steps return.

    Raises:
        Whatever the steps raise (an error of a step is thrown into them first).
    """
    send, throw, append = steps.send, steps.throw, journal.append
    finished, op = False, send(None)
    while not finished:
        try:
            if type(op) is Append:
                value = await append(saga_id, op.phase, **op.fields)
            elif op is BODY:
                value = await body()  # type: ignore[misc]
            else:
                value = await op
        except BaseException as exc:  # noqa: BLE001 - the steps decide; they re-raise what is not theirs
            finished, op = _resume(throw, exc)
            continue
        try:
            op = send(value)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
    return op  # type: ignore[no-any-return]


def drive_in_thread(steps: Steps[T], journal: Any, saga_id: str, body: Callable[[], Any],
                    loop: asyncio.AbstractEventLoop, direct: bool) -> T:
    """Run ``steps`` from a worker thread: ``body()`` called here, coroutines run on ``loop``
    (this thread waits for them), appends through ``journal.append_sync`` when ``direct``, else
    on ``loop``.

    Returns and raises:
        As :func:`drive`.
    """
    def on_loop(coro: Awaitable[Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, loop).result()  # type: ignore[arg-type]

    send, throw = steps.send, steps.throw
    finished, op = False, send(None)
    while not finished:
        try:
            if type(op) is Append:
                value = (journal.append_sync(saga_id, op.phase, **op.fields) if direct
                         else on_loop(journal.append(saga_id, op.phase, **op.fields)))
            elif op is BODY:
                value = body()
            else:
                value = on_loop(op)
        except BaseException as exc:  # noqa: BLE001 - as in drive
            finished, op = _resume(throw, exc)
        else:
            finished, op = _resume(send, value)
    return op  # type: ignore[no-any-return]
