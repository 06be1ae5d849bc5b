"""The PostgreSQL journal: one database shared by many workers on many hosts (psycopg 3, async).

Ordering (design.md, "PostgreSQL"): every append is one transaction that first takes
``pg_advisory_xact_lock`` on a 64-bit hash of the saga id, then reads the saga's tail and inserts
the next entry. Appenders to one saga queue on the lock instead of racing and retrying (a tail
``SELECT ... FOR UPDATE`` + retry on unique violation loses appends under contention);
appenders to different sagas do not wait for each other (a hash collision only makes two sagas
share a queue). In READ COMMITTED each statement reads a fresh snapshot, so the insert,
a statement after the lock, sees every append committed before the lock was granted. UNIQUE
(saga_id, seq) and UNIQUE (saga_id, write_key) back the lock: a writer that bypasses it fails
rather than forks the chain.

Nothing waits for the client while the lock is held, nor for the disk when others queue for
it (measured in bench/postgres_append.py: with a client round trip inside the lock one saga gets
one append per round trip of its busiest client; with the WAL flush inside it, one append per
flush); only a sole writer's insert, below, keeps the lock it tried through its own commit. A
locked append is one statement, ``SELECT * FROM sagacity_append_sealed(...)`` (a function of the
schema, migration 0007: 0002's ``sagacity_append_entry`` with 0003's fence, 0004's entry
tag, 0005's late outcome after a close and 0007's sealed values, in autocommit):

* **The client encodes; the server only joins.** The entry's canonical bytes depend on the tail
  only through ``seq`` and ``prev_hash``. The client encodes the entry once, with the shared rule,
  after a tail of random markers, and splits the bytes around them: a prefix, the 64 hex digits
  of ``prev_hash``, a middle, the digits of ``seq``, a suffix (:func:`byte_pieces`). The function
  takes the lock; one ``INSERT ... SELECT`` reads the tail, joins the pieces around it, checks the
  shared rule's tail conditions and inserts the bytes with their ``sha256``. The client checks
  that hash against the bytes it sent, joined around the returned tail.
* **Under contention the lock is released before the flush.** When the lock was free
  (``pg_try_advisory_xact_lock``), the append commits synchronously: one commit. When others
  queue for it, the append commits with ``synchronous_commit = off``, which hands the lock on as
  soon as its commit record is in the WAL, and the client then commits a WAL record of its own
  synchronously, so the append returns only once the WAL is flushed past it, and the queued
  appenders share flushes (group commit). WAL is written in order: an entry someone chained onto
  is never lost while the later one survives.
* **A sole writer does not wait for the lock.** A journal that wrote a saga's last entry
  itself and has no other append to it in flight (:class:`~.sole_writer.SoleWriter`; the common case: one
  process runs a saga under its run lease) seals the next entry on the tail it remembers and
  sends a plain ``INSERT``: no function, no tail read, no wait. It stores the row only while the
  saga's lock is free (tried, not waited for: a locked appender is never overtaken) and the
  remembered tail is stored (a lost commit is never chained onto); UNIQUE (saga_id, seq) refuses
  it if anyone appended since. Otherwise nothing is stored and the append goes the locked way
  (as does every append to that saga for a while after); a locked append that loses its seq to
  a writer that took no lock is sent again. Either way the chain has no fork and no gap.
* **Some appends never wait for the flush** (``core.journal.lazy_phases``: SAGA_OPENED,
  RUN_STARTED and, unless ``durable_outcomes``, a call's outcome; with ``fast_outcomes`` also
  :data:`_FAST_OUTCOME_PHASES`): the saga's next durable append covers them.
* **Batches.** :meth:`PostgresJournal.append_many` sends several appends to one saga in one round
  trip (pipeline mode); each is written only if the one before it is stored.
* **Fencing** (migration 0003, design.md "Fencing"). A fenced append (``fence=n``) is inserted
  only while RUN_STARTED ``n`` is the saga's newest, read in the same statement as the insert;
  the sole writer's INSERT goes alone only when its remembered tail shows that lease (a
  RUN_STARTED, or an entry whose fence was checked), since UNIQUE (saga_id, seq) already
  refuses it when anything, a takeover included, came after that tail.
* **Retries.** When the write key is already stored the function inserts nothing and a second
  query returns the stored row (after a flush): a retry of the same write gets it back.

Failures: a connection that breaks anywhere in an append (even between INSERT and COMMIT, when
the outcome is unknown) is replaced and the append retried under the same write key: the retry
finds the stored row (flushes it, returns it) or stores it now, so the entry is stored exactly
once, or :class:`JournalWriteError` is raised. A pool exhausted for ``pool_timeout`` seconds, a
statement timeout and a schema missing or out of date also raise it; an INTENT that raises means
the tool body does not run.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Awaitable, Callable, Mapping, Sequence
from itertools import groupby
from operator import itemgetter
from typing import Any, TypeVar

from ...errors import JournalClosedError, JournalConflictError, JournalError, JournalWriteError
from ...core.authenticity import unlinked_from_pieces
from ...core.canonical import sha256_hex
from ...core.identity import new_journal_id
from ...core.entries import (
    CHAIN_COLUMNS, GENESIS_HASH, OUTCOME_PHASES, STORED_COLUMNS, JournalEntry, Phase, entry_bytes,
)
from ...core.journal import (
    AppendRequest, Clock, SagaSummary, Tail, as_request, as_requests, check_page, late_start,
    lazy_phases, next_entry, replay_of, seal, stamp_from, utc_now,
)
from .data_keys import PostgresDataKeys
from .setup import PostgresDatabase
from .sole_writer import SoleWriter

__all__ = ["PostgresJournal"]

T = TypeVar("T")

_COLUMNS = ", ".join(STORED_COLUMNS)
_CHAIN_COLUMNS = ", ".join(CHAIN_COLUMNS)
_NAMES = STORED_COLUMNS

TERMINAL_PHASES: tuple[str, ...] = (Phase.SAGA_CLOSED.value,)
"""Phases after which the shared append rule (``core.journal.next_entry``) refuses any append
but a late outcome under its INTENT's fence (``core.journal.reopens``: the function reads that
INTENT under the lock): it refuses the rest under the lock, ``next_entry`` then raises the
rule's error."""

# The genesis hash and the terminal phases are constants of the shared rule: written into the
# statement (prepared once per connection) rather than sent with every append.
_JOURNAL_ID = "SELECT value FROM sagacity_journal_meta WHERE key = 'journal_id'"
"""The journal's id (migration 0006)."""

_APPEND = (
    "SELECT * FROM sagacity_append_sealed(%s, %s, %s, %s, %s, %s, "
    f"'{GENESIS_HASH}', %s, %s, %s, %s, %s, "
    f"ARRAY[{', '.join(repr(p) for p in TERMINAL_PHASES)}]::text[], %s, %s, %s, %s, %s, %s, %s)"
)
# A transaction that writes WAL commits synchronously, waiting for the flush past everything
# written before it (the appends that committed without waiting included).
_FLUSH = "SELECT pg_logical_emit_message(true, 'sagacity', '')"
# A batch (append_many) is one transaction: the pipeline's statements run in the implicit
# transaction that ends at its Sync, so a lazy append's transaction-local synchronous_commit = off
# also covers the durable appends of the batch. Sent last in a batch mixing lazy and durable.
_SYNCHRONOUS = "SELECT set_config('synchronous_commit', 'on', true)"


_FAST_OUTCOME_PHASES = OUTCOME_PHASES
"""Committed without waiting for the WAL flush (visible to every other writer at once), on top of
``core.journal.lazy_phases`` (SAGA_OPENED, RUN_STARTED, and a call's outcome unless
``durable_outcomes``), with ``fast_outcomes``: every call's outcome. Never RUN_ENDED: a run that
keeps its saga open returns once its RUN_ENDED is written, and nothing durable may follow for a
long time; a lost RUN_ENDED would leave its EXECUTED entries under a run that looks crashed,
which a recovery undoes (tests/crash/test_returned_run_survives.py). Before a tool body runs, an
undo starts or a run reports its end, the saga appends a durable entry (the INTENT, the
COMPENSATING claim, RUN_ENDED...), whose flush covers the lazy ones: WAL is flushed in order. A
server crash before that loses only a saga or a run that had done nothing yet, or turns the last
call's outcome into "in doubt"."""


def _tail(seq: int, hash_: str, phase: str | None) -> Tail | None:
    """The tail as ``next_entry`` takes it (``None``: the saga had no entry)."""
    return None if seq == 0 or phase is None else (seq, hash_, phase)


_TAIL = f"SELECT {_COLUMNS} FROM sagacity_journal WHERE saga_id = %s ORDER BY seq DESC LIMIT 1"
_BY_KEY = f"SELECT {_COLUMNS} FROM sagacity_journal WHERE saga_id = %s AND write_key = %s"
# The sole writer's append: the entry sealed on the remembered tail, inserted as it is, only
# (1) while nobody holds the saga's lock, taken without waiting (pg_try_advisory_xact_lock, held
# to the commit): a locked appender is then never overtaken between its tail read and its
# insert (it would lose its seq, again each time a steady sole writer got in first, and 0001's
# procedure of the previous release does not send it again), and one that queues behind the
# insert reads it; (2) while the remembered tail is stored (seq and hash: a commit lost in a
# server crash or a failover, or a row deleted, must not be chained onto): the row is selected
# from the predecessor's own row (one index probe, which the insert's unique check reads anyway;
# measured ~10 us per append cheaper than an EXISTS subquery), so nothing is selected otherwise.
# A lazy one turns synchronous_commit off for its own transaction (set_config(..., true) lasts to
# the commit; the CTE is evaluated because the insert reads it).
_VALUES = ", ".join(["%s"] * len(_NAMES))
_ALONE = (
    "sagacity_journal p WHERE p.saga_id = %s AND p.seq = %s AND p.hash = %s "
    "AND pg_try_advisory_xact_lock(hashtextextended(p.saga_id, 0))"
)
_INSERT = f"INSERT INTO sagacity_journal ({_COLUMNS}) SELECT {_VALUES} FROM {_ALONE}"
_INSERT_LAZY = (
    "WITH lazy AS (SELECT set_config('synchronous_commit', 'off', true)) "
    f"INSERT INTO sagacity_journal ({_COLUMNS}) SELECT {_VALUES} FROM lazy, {_ALONE}"
)
_SEQ_CONSTRAINT = "sagacity_journal_saga_seq"
_SEQ_TAKEN_ATTEMPTS = 5
"""Tries of a locked append whose seq an insert that took no lock got meanwhile (an INSERT
written by hand; the sole writer tries the lock and is never one)."""
_DUMMY_HASH = "1" * 64
_markers = random.Random()  # noqa: S311 - see byte_pieces: markers need not be unpredictable


def byte_pieces(request: AppendRequest, now: str) -> tuple[bytes, bytes, bytes]:
    """Split the entry's canonical bytes around ``prev_hash`` and ``seq``.

    Encodes ``request`` once with the shared sealing rule (``entries.entry_bytes``, never
    re-implemented) after a tail made of fresh random markers: 64 random hex digits as
    ``prev_hash`` and a random 15-digit ``seq``. RFC 8785 writes both as they are (hex digits in a
    string, an integer's digits), so where each marker occurs exactly once, that occurrence is the
    field, and ``head + prev_hash + middle + str(seq) + tail`` is the entry's encoding for any
    tail. A marker found anywhere else (by chance, or a payload aimed at it) sends the split to
    :func:`_byte_pieces_by_difference`, which needs no marker: right either way.

    Raises:
        EncodingError: the payload has no canonical encoding.
    """
    fields = _seal_fields(request, now)
    # Not secrets: a marker found twice only sends the split to the fallback (the uniqueness
    # check, not unpredictability, makes the split right), and os.urandom costs a system call.
    hash_text = f"{_markers.getrandbits(256):064x}"
    seq_marker = 10**14 + _markers.randrange(9 * 10**14)  # 15 digits: within JSON's safe integers
    data = entry_bytes(seq=seq_marker, prev_hash=hash_text, **fields)
    hash_marker, digits = hash_text.encode(), str(seq_marker).encode()
    at, seq_at = data.find(hash_marker), data.find(digits)
    if (0 <= at and at + 64 <= seq_at and data.find(hash_marker, at + 1) < 0
            and data.find(digits, seq_at + 1) < 0):
        return data[:at], data[at + 64:seq_at], data[seq_at + len(digits):]
    return _byte_pieces_by_difference(fields)  # a marker also in the payload: a 2**-49 chance at worst


def _seal_fields(request: AppendRequest, now: str) -> dict[str, Any]:
    return {
        "saga_id": request.saga_id, "phase": request.phase, "tool": request.tool,
        "call_id": request.call_id, "write_key": request.write_key, "payload": request.payload,
        "recorded_at": now, "stdlib_safe": request.stdlib_safe,
    }


def _byte_pieces_by_difference(fields: dict[str, Any]) -> tuple[bytes, bytes, bytes]:
    """:func:`byte_pieces` without markers: seal after two dummy tails, (genesis, seq 1) and
    (``"1" * 64``, seq 2), and split where the two encodings differ."""
    first = entry_bytes(seq=1, prev_hash=GENESIS_HASH, **fields)
    second = entry_bytes(seq=2, prev_hash=_DUMMY_HASH, **fields)
    # Where the two differ, in C: the first and the last differing byte of their XOR.
    size = len(first)
    diff = int.from_bytes(first, "big") ^ int.from_bytes(second, "big")
    at = size - (diff.bit_length() + 7) // 8
    seq_at = size - 1 - ((diff & -diff).bit_length() - 1) // 8
    if not (
        size == len(second)
        and first[at:at + 64] == GENESIS_HASH.encode() and second[at:at + 64] == _DUMMY_HASH.encode()
        and first[at + 64:seq_at] == second[at + 64:seq_at]
        and first[seq_at:seq_at + 1] == b"1" and second[seq_at:seq_at + 1] == b"2"
    ):  # pragma: no cover - would mean the sealing rule changed shape
        raise JournalWriteError("cannot split the entry's bytes around prev_hash and seq")
    return first[:at], first[at + 64:seq_at], first[seq_at + 1:]


@dataclasses.dataclass(frozen=True, slots=True)
class _Sent:
    """One append statement as sent: what its answer is checked against."""

    request: AppendRequest
    now: str
    pieces: tuple[bytes, bytes, bytes]
    durable: bool
    after_key: str | None
    tag: tuple[str | None, str | None] = (None, None)


def _checked(request: AppendRequest) -> AppendRequest:
    """``request``, within PostgreSQL's own limit (nothing written when refused).

    Raises:
        JournalWriteError: NUL in the saga id, write key, tool or call id.
    """
    if "\x00" in f"{request.saga_id}{request.write_key}{request.tool or ''}{request.call_id or ''}":
        # PostgreSQL text cannot hold NUL; the payload can (it is escaped in the bytes).
        raise JournalWriteError("saga id, write key, tool and call id may not contain NUL")
    return request


_row_to_entry = JournalEntry.from_row
_saga_of = itemgetter(0)

class PostgresJournal(PostgresDataKeys):
    """A :class:`~sagacity_agents.core.journal.Journal` in a PostgreSQL database. It keeps the
    sagas' wrapped data keys too, in the same schema (``core.data_keys.DataKeyStore``,
    ``backends.postgres.data_keys``).

    Args:
        database: a :class:`PostgresDatabase` (shared with a
            :class:`~sagacity_agents.backends.postgres.approvals.PostgresApprovalStore`), or a
            ``postgresql://`` URI to open one with ``pool_options``.
        clock: source of ``recorded_at``; defaults to the system UTC time.
        fast_outcomes: don't wait for outcome entries at all (default ``False``). By default
            one durable commit per call: a call's outcome (EXECUTED / REFUSED / FAILED)
            commits with ``synchronous_commit = off`` and the next durable commit (the next
            INTENT's, the run's end) flushes it (``core.journal.lazy_phases``). With ``True``,
            also a successful async call's EXECUTED entry is written behind
            the call: its result goes back to the agent at once and the saga waits for the entry
            before compensation, a verdict and the end of the run
            (:attr:`writes_outcomes_behind`). An INTENT is durable before its body runs either
            way. A server crash can then lose an outcome, never an INTENT: the call is in doubt,
            as if the process had died after the body, and recovery treats it so.
        durable_outcomes: every outcome waits for the WAL flush (the stricter rule);
            not with ``fast_outcomes``. Journaled in each run's RUN_STARTED.
        pool_options: keyword arguments of :class:`PostgresDatabase` (``max_size``,
            ``pool_timeout``, ``statement_timeout``...) when ``database`` is a URI.

    Raises:
        ConfigurationError: the ``postgres`` extra is not installed.
        ValueError: both ``fast_outcomes`` and ``durable_outcomes``.
    """

    def __init__(
        self,
        database: PostgresDatabase | str,
        *,
        clock: Clock = utc_now,
        fast_outcomes: bool = False,
        durable_outcomes: bool = False,
        **pool_options: Any,
    ) -> None:
        if fast_outcomes and durable_outcomes:
            raise ValueError("fast_outcomes and durable_outcomes contradict each other: choose one")
        self.database = (
            database if isinstance(database, PostgresDatabase)
            else PostgresDatabase(database, **pool_options)
        )
        self._clock = clock
        self._lazy_phases = (lazy_phases(durable_outcomes=durable_outcomes)
                             | (_FAST_OUTCOME_PHASES if fast_outcomes else frozenset()))
        self.durable_outcomes = durable_outcomes
        """Every outcome waits for the flush (see the class notes); journaled in RUN_STARTED."""
        self._sole = SoleWriter()
        self._journal_id: str | None = None
        self.writes_outcomes_behind = fast_outcomes
        """Read by the saga (``core.saga.outcomes``): a successful call's outcome entry is written behind
        the call, its result not held back for it (``fast_outcomes``)."""

    def __repr__(self) -> str:
        return f"PostgresJournal({self.database!r})"

    def _statement(
        self, request: AppendRequest, after_key: str | None
    ) -> tuple[tuple[Any, ...], _Sent]:
        """The parameters of one append statement, and what its answer is checked against."""
        now = stamp_from(self._clock)
        head, middle, tail = byte_pieces(request, now)
        durable = request.late or request.phase not in self._lazy_phases  # late: durable at once
        # The tag covers the content without the links the server joins in (core.authenticity).
        tag = (request.tagger.tag(unlinked_from_pieces(head, middle, tail))
               if request.tagger is not None else (None, None))
        late_intent = late_start(request.phase, request.payload) if request.late else None
        params = (request.saga_id, request.phase.value, request.tool, request.call_id,
                  request.write_key, now, head, middle, tail, durable, request.expected_seq,
                  after_key, request.fence if request.checks_fence else None, *tag,
                  late_intent, request.fence if late_intent is not None else None, request.sealed)
        return params, _Sent(request, now, (head, middle, tail), durable, after_key, tag)

    async def _append_once(self, conn: Any, request: AppendRequest) -> JournalEntry:
        params, sent = self._statement(request, None)
        cur = await conn.execute(_APPEND, params, prepare=True)
        return await self._finish(conn, sent, await cur.fetchone())

    async def _finish(self, conn: Any, sent: _Sent, row: Any) -> JournalEntry:
        """Turn the server's answer to one append into the stored entry, or the rule's error."""
        request = sent.request
        if row is None:  # pragma: no cover - the function always returns one row
            raise JournalWriteError(f"append to saga {request.saga_id!r}: no answer")
        status, seq, prev_hash, digest, tail_phase, lease = row
        if sent.durable and status in ("unflushed", "exists"):
            # Stored by a commit that did not wait for the flush (ours under contention, or an
            # earlier try of this write): return only once the WAL is flushed past it.
            await conn.execute(_FLUSH, prepare=True)
        if status == "exists":  # a retry of a stored write (or a key used twice: replay_of says)
            cur = await conn.execute(_BY_KEY, (request.saga_id, request.write_key))
            stored = await cur.fetchone()
            if stored is None:  # pragma: no cover - the application never deletes rows
                raise JournalWriteError(f"append to saga {request.saga_id!r}: key row vanished")
            return replay_of(_row_to_entry(stored), request)
        if status == "refused":  # the shared rule, applied to the tail read under the lock, raises
            next_entry(request, _tail(seq - 1, prev_hash, tail_phase), now=sent.now, lease=lease)
            if sent.after_key is not None:  # pragma: no cover - the append before it raised
                raise JournalConflictError(
                    f"saga {request.saga_id!r}: the append before {request.phase.value} in its "
                    "batch is not stored; not written"
                )
            raise JournalWriteError(  # pragma: no cover - the server mirrors the shared rule
                f"append to saga {request.saga_id!r}: the server refused what the shared append "
                "rule allows; run `sagacity journal verify`"
            )
        head, middle, tail = sent.pieces
        canonical = b"".join((head, prev_hash.encode(), middle, str(seq).encode(), tail))
        if sha256_hex(canonical) != digest:  # pragma: no cover - the server joins as we do
            raise JournalWriteError(
                f"append to saga {request.saga_id!r}: the server stored other bytes than the "
                "shared append rule seals; run `sagacity journal verify`"
            )
        return JournalEntry(
            saga_id=request.saga_id, seq=seq, phase=request.phase, tool=request.tool,
            call_id=request.call_id, write_key=request.write_key, payload=request.payload,
            recorded_at=sent.now, prev_hash=prev_hash, hash=digest, canonical=canonical,
            tag_key=sent.tag[0], tag=sent.tag[1], sealed=request.sealed,
        )

    async def append(self, saga_id: AppendRequest | str, phase: Phase | None = None,
                     **fields: Any) -> JournalEntry:
        """See :meth:`Journal.append`. Returns after the commit (durable unless the phase is
        one of those committed without waiting for the flush, see the class notes).

        Raises:
            EncodingError: the payload has no canonical encoding (nothing written).
            JournalClosedError: the saga's last entry is SAGA_CLOSED (nothing written).
            JournalConflictError: ``expected_seq`` is not the saga's last seq (nothing written).
            LeaseLostError: ``fence`` is not the saga's newest RUN_STARTED (nothing written).
            JournalWriteError: not stored (pool exhausted, statement timeout, connection broken
                three times, schema missing), or the write key names a different entry.
        """
        request = _checked(as_request(saga_id, phase, fields))
        saga_id = request.saga_id
        tail = self._sole.begin(saga_id, fence=request.fence if request.checks_fence else None)
        entry = None
        try:
            if tail is not None:
                entry = await self._append_alone(request, tail)
            if entry is None:

                async def work(conn: Any) -> JournalEntry:
                    return await self._append_once(conn, request)

                entry = await self._locked(saga_id, work)
            return entry
        finally:
            self._sole.end(saga_id, entry)

    async def _append_alone(self, request: AppendRequest, tail: Tail) -> JournalEntry | None:
        """The sole writer's append (see the module notes): the entry sealed on ``tail``, the
        saga's last entry as this journal stored it, and inserted as it is. ``None`` when the
        locked way must decide: the seq (or the write key) is taken, the saga's lock is held
        (a locked append is under way), ``tail`` is not stored
        (lost in a crash or a failover, or deleted), or the shared rule refuses on ``tail`` (the
        real tail may be later; the server reads it under the lock).

        Raises:
            JournalWriteError: as :meth:`append` (pool exhausted, timeout, broken connections).
        """
        try:
            # begin() gave a tail only where the lease at it is known to be the fence
            entry = seal(request, tail, stamp_from(self._clock), lease=request.fence)
        except (JournalClosedError, JournalConflictError):
            return None
        lazy = request.phase in self._lazy_phases and not request.late
        statement = _INSERT_LAZY if lazy else _INSERT
        row = (entry.saga_id, entry.seq, request.phase.value, entry.tool, entry.call_id,
               entry.write_key, entry.recorded_at, entry.prev_hash, entry.hash, entry.canonical,
               entry.tag_key, entry.tag, entry.sealed, entry.saga_id, tail[0], tail[1])
        taken = self.database.psycopg.errors.UniqueViolation

        async def work(conn: Any) -> bool:
            try:
                cur = await conn.execute(statement, row, prepare=True)
            except taken:  # nothing stored: the seq is someone else's, or this is a retry
                return False
            return cur.rowcount == 1  # 0: the lock is held, or the tail is not stored

        if await self.database.run(
            f"append to saga {request.saga_id!r}", work, write=True, retry_broken=True
        ):
            return entry
        self._sole.lost_race(request.saga_id)
        return None

    async def _locked(self, saga_id: str, work: Callable[[Any], Awaitable[T]]) -> T:
        """Run a locked append (or batch) to ``saga_id``; again when an insert that took no lock
        got its seq between its tail read and its insert (UNIQUE (saga_id, seq) refused it,
        nothing was stored), at most :data:`_SEQ_TAKEN_ATTEMPTS` times in all.

        Raises:
            JournalWriteError: as :meth:`append`; the seq refusal itself after the last try.
        """
        for attempt in range(1, _SEQ_TAKEN_ATTEMPTS + 1):
            try:
                return await self.database.run(
                    f"append to saga {saga_id!r}", work, write=True, retry_broken=True
                )
            except JournalWriteError as exc:
                cause = exc.__cause__
                if attempt == _SEQ_TAKEN_ATTEMPTS or not (
                    isinstance(cause, self.database.psycopg.errors.UniqueViolation)
                    and cause.diag.constraint_name == _SEQ_CONSTRAINT
                ):
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    async def append_many(
        self, requests: Sequence[AppendRequest] | str, appends: Sequence[Mapping[str, Any]] = (), /,
    ) -> list[JournalEntry]:
        """Several appends to one saga in one round trip (psycopg pipeline mode), in order;
        see ``core.journal.append_requests`` (the loose form: the saga id and one keyword
        mapping per append). Each is its own locked statement (a batch never goes
        the sole writer's way), and the batch one transaction (the implicit one a pipeline runs
        up to its Sync: one commit,
        which waits for the flush when the batch holds a durable append, and a connection that
        breaks before it completes leaves every append of the batch stored or none); every
        one after the first is written only if the one before it is stored (its
        ``p_after_key``), so the batch stops at its first refused append.

        Raises:
            The errors of :meth:`append`, for the first append that fails (the ones before it
            are written, the ones after it are not).
        """
        batch = [_checked(request) for request in as_requests(requests, appends)]
        if not batch:
            return []
        saga_id = batch[0].saga_id

        async def work(conn: Any) -> list[JournalEntry]:
            sent, cursors = [], []
            async with conn.pipeline():
                for i, request in enumerate(batch):
                    params, one = self._statement(request, batch[i - 1].write_key if i else None)
                    cursors.append(await conn.execute(_APPEND, params, prepare=True))
                    sent.append(one)
                if any(one.durable for one in sent):
                    # One transaction, one commit: a lazy append (or one that queued for the
                    # lock) turned its synchronous_commit off; a durable entry needs the wait.
                    await conn.execute(_SYNCHRONOUS, prepare=True)
            rows = [await cur.fetchone() for cur in cursors]
            entries: list[JournalEntry] = []
            alone = False
            for i, (one, row) in enumerate(zip(sent, rows, strict=True)):
                if i and row is not None and row[0] == "refused" and (rows[i - 1][0] == "exists" or alone):
                    # The append before it was not inserted by this batch (a retry of a stored
                    # write, or sent again alone): this one is sent on its own too.
                    entries.append(await self._append_once(conn, one.request))
                    alone = True
                    continue
                alone = False
                entries.append(await self._finish(conn, one, row))
            return entries

        self._sole.begin(saga_id, alone=False)
        stored: list[JournalEntry] = []
        try:
            stored = await self._locked(saga_id, work)
            return stored
        finally:
            self._sole.end(saga_id, max(stored, key=lambda e: e.seq) if stored else None)

    async def journal_id(self) -> str:
        """The schema's journal id (migration 0006; ``core.journal.Identified``), read once.

        Raises:
            JournalError: it could not be read (an older schema is refused first, naming
                ``sagacity db migrate``).
        """
        if self._journal_id is None:
            async def work(conn: Any) -> str:
                cur = await conn.execute(_JOURNAL_ID)
                row = await cur.fetchone()
                if row is None:
                    raise JournalError("the sagacity_journal_meta table holds no journal id; "
                                       "restore it or give the journal one: `sagacity journal new-id`")
                return str(row[0])

            self._journal_id = await self.database.run("read of the journal id", work, retry_broken=True)
        return self._journal_id

    async def assign_journal_id(self, journal_id: str | None = None) -> str:
        """Give the schema a new journal id (``sagacity journal new-id``, for a copy meant to
        become another journal; needs UPDATE on ``sagacity_journal_meta``, which the
        application's role does not hold): its sagas of derivation 2 fail verification from
        then on. Other processes keep the old id until they reopen the journal.

        Returns:
            The new id.

        Raises:
            JournalError: the id could not be written.
        """
        new = journal_id or new_journal_id()

        async def work(conn: Any) -> None:
            await conn.execute(
                "INSERT INTO sagacity_journal_meta (key, value) VALUES ('journal_id', %s) "
                "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value", (new,))

        await self.database.run("write of the journal id", work)
        self._journal_id = new
        return new

    async def entries(self, saga_id: str) -> list[JournalEntry]:
        """See :meth:`Journal.entries`."""

        async def work(conn: Any) -> list[JournalEntry]:
            cur = await conn.execute(
                f"SELECT {_COLUMNS} FROM sagacity_journal WHERE saga_id = %s ORDER BY seq",
                (saga_id,),
            )
            return [_row_to_entry(r) for r in await cur.fetchall()]

        return await self.database.run(f"read of saga {saga_id!r}", work, retry_broken=True)

    async def tail(self, saga_id: str) -> JournalEntry | None:
        """The saga's newest entry (``core.journal.TailRead``): one probe of the index on
        ``(saga_id, seq)``, read backwards, whatever the saga's length. ``None``: no entry.

        Raises:
            JournalError: the read failed (pool exhausted, timeout, broken connections).
        """

        async def work(conn: Any) -> JournalEntry | None:
            cur = await conn.execute(_TAIL, (saga_id,), prepare=True)
            row = await cur.fetchone()
            return None if row is None else _row_to_entry(row)

        return await self.database.run(f"read of saga {saga_id!r}", work, retry_broken=True)

    async def entries_many(self, saga_ids: list[str]) -> dict[str, list[JournalEntry]]:
        """The entries of each of ``saga_ids`` in one statement (``core.journal.read_sagas``):
        ``{saga_id: entries}`` in ``seq`` order, sagas without entries left out.

        Raises:
            JournalWriteError: the read failed (pool exhausted, timeout, broken connections).
        """
        return {sid: [_row_to_entry(r) for r in rows]
                for sid, rows in (await self._rows_many(saga_ids, _COLUMNS)).items()}

    async def rows_many(self, saga_ids: list[str]) -> dict[str, list[tuple[Any, ...]]]:
        """:meth:`entries_many` as stored rows, each a tuple of ``entries.CHAIN_COLUMNS`` (no
        tags), no entry built (``core.journal.read_saga_rows``: ``verify`` checks the rows).

        Raises:
            JournalWriteError: the read failed (pool exhausted, timeout, broken connections).
        """
        return await self._rows_many(saga_ids, _CHAIN_COLUMNS)

    async def _rows_many(self, saga_ids: list[str], columns: str) -> dict[str, list[tuple[Any, ...]]]:
        async def work(conn: Any) -> dict[str, list[tuple[Any, ...]]]:
            cur = conn.cursor(binary=True)  # binary results: the bytes arrive as bytes
            await cur.execute(
                f"SELECT {columns} FROM sagacity_journal WHERE saga_id = ANY(%s) "
                "ORDER BY saga_id, seq", (list(saga_ids),),
            )
            return {sid: list(chain) for sid, chain in groupby(await cur.fetchall(), _saga_of)}

        if not saga_ids:
            return {}
        return await self.database.run("read of sagas", work, retry_broken=True)

    async def saga_ids(self) -> list[str]:
        """See :meth:`Journal.saga_ids`. Derived from the entries (no side table an editor could
        prune), in order of each saga's first stored row (the identity column)."""

        async def work(conn: Any) -> list[str]:
            cur = await conn.execute(
                "SELECT saga_id FROM sagacity_journal GROUP BY saga_id ORDER BY min(id)"
            )
            return [r[0] for r in await cur.fetchall()]

        return await self.database.run("list of sagas", work, retry_broken=True)

    async def saga_summaries(self, *, offset: int = 0, limit: int | None = None) -> list[SagaSummary]:
        """See :meth:`Journal.saga_summaries`: one statement (a pass over the primary key's index
        to count and order the sagas, then the page's first and last rows by primary key)."""
        check_page(offset, limit)

        async def work(conn: Any) -> list[SagaSummary]:
            cur = await conn.execute(
                "WITH page AS (SELECT saga_id, count(*) AS n, min(seq) AS lo, max(seq) AS hi, "
                "min(id) AS first_id FROM sagacity_journal GROUP BY saga_id ORDER BY min(id) "
                "LIMIT %s OFFSET %s) "
                f"SELECT page.n, page.lo, page.hi, {', '.join('j.' + c.strip() for c in _COLUMNS.split(','))} "
                "FROM page JOIN sagacity_journal j ON j.saga_id = page.saga_id "
                "AND j.seq IN (page.lo, page.hi) ORDER BY page.first_id, j.seq",
                (limit, offset),
            )
            found: dict[str, tuple[int, int, int, dict[int, JournalEntry]]] = {}
            for row in await cur.fetchall():
                entry = _row_to_entry(row[3:])
                found.setdefault(entry.saga_id, (row[0], row[1], row[2], {}))[3][entry.seq] = entry
            return [SagaSummary(sid, n, rows[lo], rows[hi]) for sid, (n, lo, hi, rows) in found.items()]

        return await self.database.run("list of sagas", work, retry_broken=True)

    async def close(self) -> None:
        """Close this loop's pool and listener (shared with the approval store). Idempotent."""
        await self.database.close()
