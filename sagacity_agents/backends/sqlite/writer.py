"""The SQLite journal's writer queue: appends that arrive together share one transaction.

Every append (or batch of appends to one saga) is queued; the journal's thread takes everything
queued at that moment and writes it in one ``BEGIN IMMEDIATE`` transaction, one commit, then
answers each caller; whatever arrived meanwhile is the next group. One append alone costs what
it did (one transaction); parallel tool calls, and the runs of many sagas in one process, share
a commit (and its fsync) instead of queueing one commit each.

Each caller gets its own answer: an append the shared rule refuses (closed saga, conflict,
fence, a write key used for another entry) inserts nothing and fails alone, its neighbours are
written; only a failure of the storage itself (an I/O error, the lock not obtained in time, the
file replaced) fails the whole group, and then nothing of it is committed, or the commit's fate
is unknown and every caller is told so (each retries under its own write key).

When nobody is writing, a caller may write its own group on its own thread instead of handing
it over (the journal's connection is shared, its lock held by each writer):

* a sync tool's worker thread (``submit_blocking``) always does: its appends cross no thread
  boundary at all (the thread would only wait for the journal's thread otherwise);
* the event loop (``submit``) does for appends that neither wait for the disk nor for another
  process's write lock (``inline_ok``: a call's outcome, RUN_STARTED; a few tens of
  microseconds, less than the hop costs), and for an append that waits for the disk (an INTENT)
  only when no other work of the loop is waiting (:func:`loop_idle`: nothing ready to run, no
  timer due within :data:`IDLE_SLACK`, no file descriptor ready): the flush then delays nobody,
  and the two thread hops (~175 us here, more than half a bare commit) are saved. If the file's
  write lock is taken, the inline attempt stops before writing anything (:class:`Busy`) and the
  appends are queued as usual. With other work waiting (many sagas in one process), a durable
  append goes to the journal's thread as before and shares its group's commit.

Whoever writes, the order is the queue's: a caller writes itself only when the queue is empty
and no drain is under way, and whatever arrives meanwhile is drained after it. Otherwise a
caller is answered through ``call_soon_threadsafe`` (the loop) or a ``concurrent.futures``
future (a worker thread).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from ...core.entries import JournalEntry
from ...core.journal import AppendRequest

__all__ = ["Answer", "Busy", "GroupWriter", "IDLE_SLACK", "Pending", "loop_idle"]

IDLE_SLACK = 0.005
"""Seconds: a timer of the loop due sooner than this counts as waiting work (:func:`loop_idle`);
a flush on a loaded disk takes a few milliseconds."""


def loop_idle(loop: asyncio.AbstractEventLoop) -> bool:
    """Whether nothing but the running callback has work on ``loop``: no callback ready, no timer
    due within :data:`IDLE_SLACK`, no file descriptor ready (a zero-timeout poll of its selector:
    level-triggered, so the loop still sees what it finds; a ``call_soon_threadsafe`` from another
    thread shows as its wake-up pipe). ``False`` for a loop whose internals are not the stdlib's
    (uvloop, say): then nothing is known, and durable appends keep their thread.

    Source of the rule: issue 37's "no thread hop for the INTENT where no other task of the loop
    is waiting"; a flush on the loop then delays no one.
    """
    ready = getattr(loop, "_ready", None)
    scheduled = getattr(loop, "_scheduled", None)
    selector = getattr(loop, "_selector", None)
    if ready is None or scheduled is None or selector is None or ready:
        return False
    if scheduled and scheduled[0].when() - loop.time() < IDLE_SLACK:
        return False
    try:
        return not selector.select(0)
    except (OSError, ValueError):  # a closed selector: nothing known
        return False

Answer = tuple[list[JournalEntry], BaseException | None]
"""One caller's answer: the entries its appends stored (or found stored) in order, and the error
of the first one that failed (``None``: all of them are written)."""


def _unused(entries: list[JournalEntry] | None, error: BaseException | None) -> None:
    """The answer of a group its caller writes itself (it reads the returned answers)."""


class Busy(Exception):
    """Raised by ``write_group(..., wait=False)`` when the file's write lock is another
    connection's: nothing was written, the caller queues its appends instead."""


@dataclass(slots=True)
class Pending:
    """One caller's appends (to one saga, in order) and how to answer it."""

    requests: list[AppendRequest]
    answer: Callable[[list[JournalEntry] | None, BaseException | None], object]


class GroupWriter:
    """Queues appends and has the journal's thread write them in groups.

    Args:
        executor: the journal's single thread.
        write_group: ``write_group(pendings, wait)`` writes every :class:`Pending` given, on
            the calling thread; returns one :data:`Answer` per pending (in order), or raises to
            fail them all; with ``wait=False`` raises :class:`Busy` (nothing written) instead
            of waiting for another connection's write lock.
        inline_ok: ``inline_ok(requests, idle)``: whether the event loop may write ``requests``
            itself, ``idle`` a callable saying whether the loop has no other work waiting
            (:func:`loop_idle`; see the module notes).
    """

    def __init__(self, executor: ThreadPoolExecutor,
                 write_group: Callable[[Sequence[Pending], bool], list[Answer]],
                 inline_ok: Callable[[list[AppendRequest], Callable[[], bool]], bool]) -> None:
        self._executor = executor
        self._write_group = write_group
        self._inline_ok = inline_ok
        self._lock = threading.Lock()
        self._queue: list[Pending] = []
        self._draining = False
        """A writer is at work: the journal's thread draining, or a caller writing itself."""

    def _claim(self) -> bool:
        """Become the writer if nobody is writing and nothing is queued."""
        with self._lock:
            if self._draining or self._queue:
                return False
            self._draining = True
            return True

    def _release(self) -> None:
        """Stop being the writer; what was queued meanwhile goes to the journal's thread."""
        with self._lock:
            if not self._queue:
                self._draining = False
                return
        self._hand_over()

    def _hand_over(self) -> None:
        """Have the journal's thread drain the queue; once that thread is stopped (the journal
        closed meanwhile), drain it here: each caller is answered (the journal's error), none
        left waiting."""
        try:
            self._executor.submit(self._drain)
        except RuntimeError:  # "cannot schedule new futures after shutdown"
            self._drain()

    def _write_own(self, requests: list[AppendRequest], wait: bool) -> list[JournalEntry]:
        """Write ``requests`` on this thread as the writer (claimed by :meth:`_claim`).

        Raises:
            Busy: ``wait`` is false and the write lock is another connection's.
            The error of the first append that failed, or of the storage.
        """
        try:
            [(entries, error)] = self._write_group([Pending(requests, _unused)], wait)
        finally:
            self._release()
        if error is not None:
            raise error
        return entries

    def _enqueue(self, pending: Pending) -> None:
        with self._lock:
            self._queue.append(pending)
            if self._draining:
                return  # the drain under way takes it in its next group
            self._draining = True
        self._hand_over()

    def _drain(self) -> None:
        """On the journal's thread: write groups until the queue is empty."""
        while True:
            with self._lock:
                group, self._queue = self._queue, []
                if not group:
                    self._draining = False
                    return
            try:
                answers: list[Answer] | BaseException = self._write_group(group, True)
            except BaseException as exc:  # noqa: BLE001 - every caller of the group is told
                answers = exc
            # Stop being the writer before answering: a caller answered first would find the
            # writer still busy and queue its next append (the loop's outcome after its INTENT)
            # instead of writing it itself.
            with self._lock:
                done = not self._queue
                if done:
                    self._draining = False
            if isinstance(answers, BaseException):
                for pending in group:
                    pending.answer(None, answers)
            else:
                for pending, (entries, error) in zip(group, answers, strict=True):
                    pending.answer(entries, error)
            if done:
                return

    async def submit(self, requests: list[AppendRequest]) -> list[JournalEntry]:
        """Queue ``requests`` from the event loop and await their answer.

        Raises:
            The error of the first append that failed, or of the group's storage failure.
        """
        loop = asyncio.get_running_loop()
        if self._inline_ok(requests, lambda: loop_idle(loop)) and self._claim():
            try:
                return self._write_own(requests, wait=False)
            except Busy:
                pass  # another process is writing: queued below, waited for on the thread
        future: asyncio.Future[list[JournalEntry]] = loop.create_future()

        def settle(entries: list[JournalEntry] | None, error: BaseException | None) -> None:
            if future.cancelled():
                return  # the caller stopped waiting; what was written stays written
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(entries or [])

        self._enqueue(Pending(requests, lambda e, x: loop.call_soon_threadsafe(settle, e, x)))
        return await future

    def submit_blocking(self, requests: list[AppendRequest]) -> list[JournalEntry]:
        """Write ``requests`` from a thread that is neither the loop's nor the journal's: on this
        thread when nobody is writing, else queued and waited for.

        Raises:
            As :meth:`submit`.
        """
        if self._claim():
            return self._write_own(requests, wait=True)
        future: concurrent.futures.Future[list[JournalEntry]] = concurrent.futures.Future()

        def settle(entries: list[JournalEntry] | None, error: BaseException | None) -> None:
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(entries or [])

        self._enqueue(Pending(requests, settle))
        return future.result()

