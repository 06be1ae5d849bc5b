"""A saga's stored data key (``core.data_keys.StoredDataKey``) as a row of the
``sagacity_data_keys`` table, the same in every backend, and the checks every backend applies to
what it is asked to store (so that a bad argument is the caller's error alike on each)."""

from __future__ import annotations

from typing import Any

from ..core.data_keys import StoredDataKey

__all__ = ["KEY_COLUMNS", "check_erasure", "check_new_key", "key_from_row", "tombstone"]

KEY_COLUMNS = ("saga_id", "generation", "master_key_id", "wrapped", "created_at", "erased_at",
               "erased_by", "reason")
"""Columns of ``sagacity_data_keys`` holding a :class:`StoredDataKey`, in row order."""


def key_from_row(row: tuple[Any, ...]) -> StoredDataKey:
    """The stored key of a row of :data:`KEY_COLUMNS` (a driver's ``memoryview`` as bytes)."""
    saga_id, generation, master_key_id, wrapped, created_at, erased_at, erased_by, reason = row
    return StoredDataKey(saga_id, int(generation), master_key_id,
                         None if wrapped is None else bytes(wrapped), created_at, erased_at,
                         erased_by, reason)


def tombstone(key: StoredDataKey, *, erased_at: str, by: str, reason: str) -> StoredDataKey:
    """``key`` erased: its wrapped bytes gone, who erased it, when and why recorded (the saga,
    generation, master key id and creation stamp kept)."""
    return StoredDataKey(key.saga_id, key.generation, key.master_key_id, None, key.created_at,
                         erased_at, by, reason)


def check_new_key(saga_id: Any, generation: Any, master_key_id: Any, wrapped: Any) -> None:
    """Refuse what ``add_data_key`` cannot store.

    Raises:
        TypeError: a saga id or master key id that is not a ``str``, a generation that is not an
            ``int``, wrapped bytes that are not ``bytes``.
        ValueError: an empty saga id or master key id, a generation below 1, empty wrapped bytes.
    """
    if not isinstance(saga_id, str) or not isinstance(master_key_id, str):
        raise TypeError("saga_id and master_key_id must be str")
    if isinstance(generation, bool) or not isinstance(generation, int):
        raise TypeError(f"generation must be an int, not {type(generation).__name__}")
    if not isinstance(wrapped, bytes):
        raise TypeError(f"wrapped must be bytes, not {type(wrapped).__name__}")
    if not saga_id or not master_key_id or not wrapped or generation < 1:
        raise ValueError("a data key needs a saga id, a generation >= 1, a master key id and "
                         "its wrapped bytes")
    if "\x00" in saga_id + master_key_id:
        raise ValueError("saga id and master key id may not contain NUL")


def check_erasure(saga_id: Any, by: Any, reason: Any) -> None:
    """Refuse an erasure that does not say whose saga, who and why.

    Raises:
        TypeError: an argument that is not a ``str``.
        ValueError: an empty (or blank) argument, or one holding NUL.
    """
    if not all(isinstance(v, str) for v in (saga_id, by, reason)):
        raise TypeError("saga_id, by and reason must be str")
    if not saga_id or not by.strip() or not reason.strip():
        raise ValueError("an erasure names the saga, who erases (by) and why (reason)")
    if "\x00" in saga_id + by + reason:
        raise ValueError("saga id, by and reason may not contain NUL")
