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

A caller is either the event loop (``submit``: answered through ``call_soon_threadsafe``) or a
sync tool's worker thread (``submit_blocking``: answered through a ``concurrent.futures``
future), so a sync tool's append crosses one thread boundary and back, like an async one.
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

__all__ = ["Answer", "GroupWriter", "Pending"]

Answer = tuple[list[JournalEntry], BaseException | None]
"""One caller's answer: the entries its appends stored (or found stored) in order, and the error
of the first one that failed (``None``: all of them are written)."""


@dataclass(slots=True)
class Pending:
    """One caller's appends (to one saga, in order) and how to answer it."""

    requests: list[AppendRequest]
    answer: Callable[[list[JournalEntry] | None, BaseException | None], object]


class GroupWriter:
    """Queues appends and has the journal's thread write them in groups.

    Args:
        executor: the journal's single thread.
        write_group: run on that thread with every queued :class:`Pending`; returns one
            :data:`Answer` per pending (in order), or raises to fail them all.
    """

    def __init__(self, executor: ThreadPoolExecutor,
                 write_group: Callable[[Sequence[Pending]], list[Answer]]) -> None:
        self._executor = executor
        self._write_group = write_group
        self._lock = threading.Lock()
        self._queue: list[Pending] = []
        self._draining = False

    def _enqueue(self, pending: Pending) -> None:
        with self._lock:
            self._queue.append(pending)
            if self._draining:
                return  # the drain under way takes it in its next group
            self._draining = True
        self._executor.submit(self._drain)

    def _drain(self) -> None:
        """On the journal's thread: write groups until the queue is empty."""
        while True:
            with self._lock:
                group, self._queue = self._queue, []
                if not group:
                    self._draining = False
                    return
            try:
                answers = self._write_group(group)
            except BaseException as exc:  # noqa: BLE001 - every caller of the group is told
                for pending in group:
                    pending.answer(None, exc)
                continue
            for pending, (entries, error) in zip(group, answers, strict=True):
                pending.answer(entries, error)

    async def submit(self, requests: list[AppendRequest]) -> list[JournalEntry]:
        """Queue ``requests`` from the event loop and await their answer.

        Raises:
            The error of the first append that failed, or of the group's storage failure.
        """
        loop = asyncio.get_running_loop()
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
        """Queue ``requests`` from a thread that is neither the loop's nor the journal's, and
        wait for their answer.

        Raises:
            As :meth:`submit`.
        """
        future: concurrent.futures.Future[list[JournalEntry]] = concurrent.futures.Future()

        def settle(entries: list[JournalEntry] | None, error: BaseException | None) -> None:
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(entries or [])

        self._enqueue(Pending(requests, settle))
        return future.result()

