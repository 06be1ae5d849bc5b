"""Reading many sagas of a journal at read speed: batched reads where the backend has them
(:class:`~.journal.EntriesMany`, :class:`~.journal.RowsRead`), the next batch read while the
caller checks this one."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from typing import Any

from .entries import JournalEntry
from .journal import Journal, capabilities_of

__all__ = ["READ_BATCH", "read_saga_rows", "read_sagas"]


READ_BATCH = 256
"""Sagas read per ``entries_many`` call by :func:`read_sagas`: one statement per batch, and a
bounded amount of the journal in memory at a time."""


async def read_sagas(
    journal: Journal, saga_ids: Sequence[str], *, batch: int = READ_BATCH
) -> AsyncIterator[tuple[str, list[JournalEntry]]]:
    """Yield ``(saga_id, entries)`` for each of ``saga_ids``, in that order: ``batch`` sagas per
    read where the backend has ``entries_many``, else one :meth:`Journal.entries` per saga.

    Args:
        journal: the journal.
        saga_ids: the sagas to read (an unknown one yields an empty list).
        batch: sagas per read (>= 1).

    Raises:
        JournalError: storage could not be read.
    """
    if not capabilities_of(journal).entries_many:
        for saga_id in saga_ids:
            yield saga_id, await journal.entries(saga_id)
        return
    many = journal.entries_many  # type: ignore[attr-defined]
    async with contextlib.aclosing(_batches(many, saga_ids, batch)) as found:
        async for item in found:
            yield item


async def read_saga_rows(
    journal: Journal, saga_ids: Sequence[str], *, batch: int = READ_BATCH
) -> AsyncIterator[tuple[str, list[tuple[Any, ...]]]]:
    """Yield ``(saga_id, rows)`` for each of ``saga_ids``, in that order, ``batch`` sagas per
    read: the stored rows (tuples of ``entries.CHAIN_COLUMNS``: no tags; ``seq`` order), no
    entry built; ``JournalEntry.from_row`` builds one from a row and two ``None`` tags.

    Args:
        journal: a journal with ``rows_many`` (``capabilities_of(journal).rows_read``).
        saga_ids: the sagas to read (an unknown one yields an empty list).
        batch: sagas per read (>= 1).

    Raises:
        JournalError: storage could not be read.
    """
    rows_many = journal.rows_many  # type: ignore[attr-defined]
    async with contextlib.aclosing(_batches(rows_many, saga_ids, batch)) as found:
        async for item in found:
            yield item


async def _batches(
    many: Callable[[list[str]], Any], saga_ids: Sequence[str], batch: int
) -> AsyncGenerator[tuple[str, Any], None]:
    """``(saga_id, many's list for it)`` for each of ``saga_ids``, ``batch`` per call of ``many``."""
    chunks = [list(saga_ids[start:start + batch]) for start in range(0, len(saga_ids), batch)]
    # The next batch is read (on the backend's thread, or by the server) while the caller
    # checks this one: the read and the check overlap.
    ahead = asyncio.ensure_future(many(chunks[0])) if chunks else None
    try:
        for i, chunk in enumerate(chunks):
            assert ahead is not None
            found = await ahead
            if i + 1 < len(chunks):
                ahead = asyncio.ensure_future(many(chunks[i + 1]))
                # Let the read start now (hand the statement to the backend's thread, or send
                # it to the server): the caller checks the batch without awaiting anything, so
                # the task would otherwise first run when it is awaited, and nothing overlap.
                await asyncio.sleep(0)
            else:
                ahead = None
            for saga_id in chunk:
                yield saga_id, found.get(saga_id, [])
    finally:
        if ahead is not None:  # the caller stopped early: the read ahead is not wanted
            ahead.add_done_callback(_retrieved)
            ahead.cancel()


def _retrieved(task: asyncio.Future[Any]) -> None:
    """Mark an abandoned read's error as seen (asyncio would log it as never retrieved)."""
    if not task.cancelled():
        task.exception()
