"""Per-saga data keys: what a backend stores (placeholder until the key logic lands).

Only the stored shape and the store's protocol live here for now (issue 36's contract): a saga's
data key is stored WRAPPED by the master key, one row per generation; an erasure deletes the
wrapped bytes for good and leaves a tombstone row (``wrapped`` ``None``) naming who erased and why.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

__all__ = ["DataKeyStore", "StoredDataKey"]


@dataclass(frozen=True)
class StoredDataKey:
    """One generation of a saga's data key, as a backend stores it."""

    saga_id: str
    """The saga the key belongs to."""
    generation: int
    """1 for the saga's first key, 2 for a fresh key after an erasure, ..."""
    master_key_id: str | None
    """Id of the master key that wrapped it (16 hex digits); ``None`` on a tombstone."""
    wrapped: bytes | None
    """nonce (12 bytes) || AES-GCM ciphertext of the key; ``None``: erased (a tombstone)."""
    created_at: str
    """UTC stamp ``YYYY-MM-DDTHH:MM:SS.ffffffZ`` when the row was stored."""
    erased_at: str | None
    """UTC stamp of the erasure (``None``: not erased)."""
    erased_by: str | None
    """Who erased it (``None``: not erased)."""
    reason: str | None
    """Why it was erased (``None``: not erased)."""


@runtime_checkable
class DataKeyStore(Protocol):
    """Where a journal keeps its sagas' wrapped data keys (``core.journal.Capabilities.data_keys``)."""

    async def data_keys(self, saga_id: str) -> list[StoredDataKey]:
        """Every generation stored for ``saga_id`` (tombstones included), ascending.

        Raises:
            JournalError: storage could not be read.
        """
        ...

    async def add_data_key(self, saga_id: str, generation: int, master_key_id: str,
                           wrapped: bytes) -> StoredDataKey:
        """Store a generation if none is stored yet; return the STORED row (ours, or the one a
        concurrent writer stored first, or its tombstone). Durable before it returns.

        Raises:
            JournalError: storage failed.
        """
        ...

    async def erase_data_keys(self, saga_id: str, *, by: str, reason: str) -> int:
        """Delete the wrapped bytes of every generation of ``saga_id`` for good, leaving a
        tombstone per generation. Returns the number of generations erased (0: none held bytes).

        Raises:
            JournalError: storage failed, or the role may not delete (PostgreSQL).
        """
        ...

    async def rewrap_data_keys(self, rewrap: Callable[[StoredDataKey], tuple[str, bytes]]) -> int:
        """Replace every stored (non-erased) wrapped key by ``rewrap(row)`` = ``(master_key_id,
        wrapped)`` (master-key rotation). Returns the number of rows rewritten.

        Raises:
            JournalError: storage failed. What ``rewrap`` raises (nothing is changed).
        """
        ...
