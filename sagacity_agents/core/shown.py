"""A saga's entries as every display shows them (masks, ``[erased]``), and the one way to see
its sensitive values in clear: a reveal, recorded in the access log *before* anything is shown.

``sagacity journal show``, ``saga show``, the inbox's saga pages and its JSON API read entries
through :func:`read_shown` (or :func:`shown_entries` on entries already read): committed values
become their masks, ``[erased]`` once the saga's data key was erased (``sagacity saga erase``),
and clear sensitive values an older writer left in the journal are masked as well
(``core.scrub``). The stored bytes are untouched: audit exports carry them verbatim (commitments,
never values, never the sealed bytes), and the chain and tags verify without any key.

:func:`reveal_saga` is what ``journal show --reveal`` runs: it needs the master key
(``SAGACITY_DATA_KEY``), appends a ``DATA_REVEALED`` entry ``{saga_id, by, reason, paths}`` to
the access log (``core.access_log``, the reserved saga ``sagacity.access``) and only then opens
the sealed values. When that append fails (a read-only journal, a role without the right) the
reveal is refused and nothing is decrypted: a value is never seen without a trace of who saw it
and why (PCI DSS requirement 10: log every access to cardholder data).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ..errors import DataErasedError, DataKeyError
from .access_log import erasures, record_access
from .data_keys import DATA_KEY_ENVVAR, DataKeyStore, DataKeys
from .entries import ACCESS_SAGA, JournalEntry, Phase
from .fence import backend_of
from .scrub import Scrubber
from .sensitive import is_committed, pointer

__all__ = [
    "AccessRecorder", "Revealed", "committed_paths", "erased_generations", "read_shown",
    "reveal_saga", "shown_entries",
]

AccessRecorder = Callable[[Any, Any, dict[str, Any]], Awaitable[Any]]
"""``record_access(journal_or_view, phase, payload)``: appends one access-log entry, returns it,
raises when it cannot (``core.access_log.record_access``)."""


def shown_entries(entries: Iterable[JournalEntry], *, erased: Iterable[int] = ()) -> list[JournalEntry]:
    """``entries`` (one saga's, in ``seq`` order) with payloads fit to show: committed values as
    their masks (``[erased]`` for a generation in ``erased``), clear sensitive values masked
    (``core.scrub.Scrubber``). Hashes, tags and stored bytes are left as they are (the
    ``payload`` alone is replaced). Idempotent: shown entries show the same."""
    scrubber = Scrubber(erased=erased)
    out = []
    for entry in entries:
        payload = scrubber.payload(entry.payload)
        out.append(entry if payload is entry.payload else replace(entry, payload=payload))
    return out


async def erased_generations(journal: Any, saga_id: str) -> frozenset[int]:
    """The generations of ``saga_id``'s data key that were erased: the data-key store's rows
    whose wrapped key is gone, else (a saga whose key was never stored: no master key) the
    generations the access log's ``DATA_ERASED`` entries name.

    Args:
        journal: a journal or a view of one.
        saga_id: the saga.

    Raises:
        JournalError: the journal could not be read.
    """
    backend = backend_of(journal)
    if isinstance(backend, DataKeyStore):
        rows = await backend.data_keys(saga_id)
        if rows:
            return frozenset(row.generation for row in rows if row.wrapped is None)
    if saga_id == ACCESS_SAGA:
        return frozenset()
    erased = (await erasures(backend)).get(saga_id)
    if erased is None:
        return frozenset()
    generations = erased.payload.get("generations")
    return frozenset(g for g in generations if isinstance(g, int)) if isinstance(generations, list) \
        and generations else frozenset({1})


async def read_shown(journal: Any, saga_id: str) -> list[JournalEntry]:
    """``saga_id``'s entries as :func:`shown_entries` shows them, erasures read from ``journal``.

    Raises:
        JournalError: the journal could not be read.
    """
    entries = await journal.entries(saga_id)
    if not entries:
        return entries
    return shown_entries(entries, erased=await erased_generations(journal, saga_id))


def committed_paths(entry: JournalEntry) -> list[str]:
    """RFC 6901 pointers of the committed values in ``entry``'s payload, in document order."""
    found: list[str] = []

    def walk(value: Any, path: tuple[str | int, ...]) -> None:
        if is_committed(value):
            found.append(pointer(path))
        elif type(value) is dict:
            for key, item in value.items():
                walk(item, (*path, key))
        elif type(value) is list:
            for index, item in enumerate(value):
                walk(item, (*path, index))

    walk(entry.payload, ())
    return found


@dataclass(frozen=True, slots=True)
class Revealed:
    """What :func:`reveal_saga` returns."""

    entries: list[JournalEntry]
    """The saga's entries, payloads with each sealed value in clear (a value stored without a
    master key keeps its mask; one of an erased generation shows ``[erased]``)."""
    access: Any
    """The ``DATA_REVEALED`` access-log entry written before anything was opened."""
    paths: list[str]
    """The pointers revealed (each once, in order of first appearance)."""


async def reveal_saga(
    journal: Any, saga_id: str, *, by: str, reason: str, keys: DataKeys | None = None,
    record: AccessRecorder | None = None,
) -> Revealed:
    """Show ``saga_id``'s sensitive values in clear, after recording who asked and why.

    Order (the rule ``--reveal`` follows): the keys are loaded (no master key, or one that did
    not wrap this saga's key: refused, nothing logged), the ``DATA_REVEALED`` entry ``{saga_id,
    by, reason, paths}`` is appended to the access log (failing: refused, nothing opened), then
    each entry's sealed values are opened (``SagaSecrets.reveal``).

    Args:
        journal: the journal (or a view: its tagger signs the access-log entry).
        saga_id: the saga, exactly.
        by: who reveals (a person's name, as ``--as``); non-empty.
        reason: why (a ticket, a dispute); non-empty.
        keys: the data keys (default: ``DataKeys.from_env()``, i.e. ``SAGACITY_DATA_KEY``).
        record: appends the access-log entry (default ``core.access_log.record_access``).

    Returns:
        A :class:`Revealed`.

    Raises:
        ValueError: ``by`` or ``reason`` is empty.
        DataKeyError: ``NO_MASTER_KEY`` (no master key configured), ``WRONG_MASTER_KEY``,
            ``REVEAL_NOT_LOGGED`` (the access-log entry could not be written: nothing is shown;
            the cause is chained), ``SEALED_MISMATCH`` (sealed bytes edited or moved).
        JournalError: the journal could not be read.
    """
    if not by.strip() or not reason.strip():
        raise ValueError("a reveal names who asks (by) and why (reason)")
    keys = keys if keys is not None else DataKeys.from_env()
    if keys.master is None:
        raise DataKeyError(f"revealing a sensitive value needs the master key ({DATA_KEY_ENVVAR})",
                           code="NO_MASTER_KEY")
    entries = await journal.entries(saga_id)
    erased = await erased_generations(journal, saga_id)
    secrets = await keys.for_saga(journal, saga_id, create=False) if entries else None
    paths = list(dict.fromkeys(p for e in entries for p in committed_paths(e)))
    recorder = record if record is not None else record_access
    try:
        access = await recorder(journal, Phase.DATA_REVEALED,
                                {"saga_id": saga_id, "by": by, "reason": reason, "paths": paths})
    except Exception as exc:  # noqa: BLE001 - whatever failed, nothing may be shown
        raise DataKeyError(
            f"saga {saga_id!r}: the reveal could not be recorded in the access log ({exc}); "
            "nothing is shown", code="REVEAL_NOT_LOGGED") from exc
    return Revealed(_opened(entries, secrets, erased), access, paths)


def _opened(entries: Sequence[JournalEntry], secrets: Any, erased: frozenset[int]) -> list[JournalEntry]:
    """``entries`` with their sealed values opened (masks / ``[erased]`` where none opens)."""
    masks = Scrubber(erased=erased)
    out = []
    for entry in entries:
        try:
            payload = secrets.reveal(entry.payload, getattr(entry, "sealed", None), entry.write_key)
        except DataErasedError:
            payload = entry.payload
        payload = masks.committed(payload)  # what stayed committed: not stored, or erased
        out.append(entry if payload is entry.payload else replace(entry, payload=payload))
    return out
