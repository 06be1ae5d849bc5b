"""Writers' views of a journal: :class:`JournalView` builds each append's request once, with
the writer's entry tagger; :class:`FencedJournal`, a saga's view, also carries the run lease's
token on every append.

The fence's rules (design.md, "Fencing"; the journal side is ``core.journal``):

* While a run holds the saga's lease, every entry it writes carries the lease's token, the seq of
  its RUN_STARTED, and the journal writes it only while that RUN_STARTED is still the saga's
  newest: in the same transaction or statement as the insert, on every backend and every append
  path (one append, a batch, PostgreSQL's sole writer). A run whose lease another run took over
  (it stalled past the expiry: a blocked event loop, a suspended VM) writes nothing more, so it
  cannot start a tool body (no INTENT), undo anything (no COMPENSATING) or close the saga.
* One exception, because an effect that happened is a fact: the outcome of a call or an undo
  this run started before the loss (an append of :data:`~.journal.LATE_PHASES` that answers its
  own INTENT or COMPENSATING) is written *late*: unchecked, under the lost lease's token, marked
  ``late``, durable at once. Recovery pairs it with its INTENT like any outcome: the next
  recovery undoes it (or reports it), so the final report is true. The outcome of a call is
  written even when the saga was closed meanwhile (its INTENT carries the same fence:
  ``core.append_rule.reopens``): it reopens the saga for the next recovery. Only an undo's
  late outcome can still be refused by a close (``on_unjournaled`` names it).
* Holders are compared, never clocks: the journal's check reads the entries, not the time. The
  lease's expiry (``core.lease``) only decides when another run may take it over.

:class:`FencedJournal` applies this for one saga; ``core.saga`` gives every live saga one, so no
append path of the saga (calls, outcomes written behind, compensation, approvals' CONSUMED, the
close) can forget the token.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..errors import JournalError, JournalWriteError, LeaseLostError, describe_error
from .entries import JournalEntry, Phase
from .identity import SagaSeal, journal_id_of
from .append_rule import SensitiveProtector
from .journal import (
    LATE_PHASES, AppendRequest, EntryTagger, Journal, SagaSummary, append_requests, capabilities_of,
)

__all__ = ["REKEY_SECONDS", "FencedJournal", "JournalView", "backend_of"]

REKEY_SECONDS = 30.0
"""How long a worker thread's late append waits for the event loop to reload the saga's data
keys (:meth:`FencedJournal.rekey`)."""


def _answers_own_start(phase: Phase, payload: Any) -> bool:
    """Whether an append is the outcome of a call (its INTENT's seq in ``intent_seq``) or of an
    undo (``compensating_seq``) that the writer started: what may be written late."""
    if phase not in LATE_PHASES or not isinstance(payload, Mapping):
        return False
    start = payload.get("compensating_seq" if phase in (Phase.COMPENSATED, Phase.COMPENSATION_FAILED)
                        else "intent_seq")
    return isinstance(start, int) and not isinstance(start, bool)


class JournalView:
    """A writer's view of a journal: the keyword append its callers use, each call's
    :class:`AppendRequest` built once, with the writer's tagger (its keyring's signing key), and
    handed to the backend; reads pass through. A view holds the writer's state, so one journal
    object serves writers with different keyrings (``core.authenticity.signing_view``).

    Args:
        journal: the backend (a view: its backend).
        tagger: signs every entry appended through the view (``None``: untagged).

    Raises:
        TypeError: ``journal`` is a live saga's :class:`FencedJournal` (a view over it would drop
            the lease's token it adds).
    """

    def __init__(self, journal: Journal, *, tagger: EntryTagger | None = None) -> None:
        if isinstance(journal, FencedJournal):
            # Unwrapped, its lease's token would be lost: another writer's appends would pass
            # the fence the saga's run holds.
            raise TypeError(
                f"{journal!r} is a live saga's fenced journal; give another writer the journal "
                "it was made from (its .backend), not the saga's own view")
        if isinstance(journal, JournalView):
            journal = journal.backend
        self.backend: Any = journal
        """The journal underneath (a backend, or a wrapper of one)."""
        self.tagger = tagger
        """Signs each entry appended through the view (``None``: untagged)."""
        self.capabilities = capabilities_of(journal)
        """The backend's :class:`Capabilities`."""
        self._opened: dict[str, JournalEntry] = {}
        self.seals: dict[str, SagaSeal] = {}
        """Per saga written to with a tagger: what its tags bind (``core.identity``)."""
        self.secrets: dict[str, SensitiveProtector] = {}
        """Per saga: its data keys (``core.data_keys.SagaSecrets``), which commit and seal the
        sensitive values of every append to it through this view; none: stored as given."""
        self.data_keys: Any = None
        """The ``core.data_keys.DataKeys`` the :attr:`secrets` came from (``None``: none). A late
        append reloads its saga's secrets from the store first (:meth:`FencedJournal.rekey`):
        the saga's key may have been erased since (``core.erasure``), and a late outcome is
        then committed and sealed under a fresh generation, never under the erased one."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.backend!r})"

    def request(self, saga_id: str, phase: Phase, fields: dict[str, Any]) -> AppendRequest:
        """The request of ``append(saga_id, phase, **fields)`` (see :meth:`AppendRequest.build`)."""
        return AppendRequest.build(saga_id, phase, tagger=self.tagger_for(saga_id, phase, fields),
                                   protect=self.secrets.get(saga_id), **fields)

    def tagger_for(self, saga_id: str, phase: Phase, fields: Mapping[str, Any]) -> EntryTagger | None:
        """This view's tagger for one append: bound to the journal and the saga's SAGA_OPENED
        under derivation 2 (``core.identity.SagaSeal``; :meth:`bind` first)."""
        seal = self.seals.get(saga_id) if self.tagger is not None else None
        return self.tagger if seal is None else seal.tagger(self.tagger, phase, fields.get("payload"))

    async def bind(self, saga_id: str, entries: list[JournalEntry] | None = None) -> None:
        """Learn what ``saga_id``'s tags bind (once per saga and view; only with a tagger):
        the journal's id and the saga's derivation and SAGA_OPENED hash, from ``entries`` (the
        saga's, as stored: ``[]`` for a new saga) or read here.

        Raises:
            JournalError: the journal could not be read.
        """
        if self.tagger is None or saga_id in self.seals:
            return
        journal_id = await journal_id_of(self.backend)
        if entries is None:
            entries = await self.backend.entries(saga_id) if journal_id is not None else []
        self.seals[saga_id] = SagaSeal(journal_id, entries)

    def noted(self, saga_id: str, entries: list[JournalEntry]) -> list[JournalEntry]:
        """``entries`` just stored in ``saga_id``; a SAGA_OPENED among them is noted."""
        for entry in entries:
            if entry.phase is Phase.SAGA_OPENED:
                self._opened[saga_id] = entry
                seal = self.seals.get(saga_id)
                if seal is not None:
                    seal.note(entry)
        return entries

    def opened_entry(self, saga_id: str | None = None) -> JournalEntry | None:
        """The SAGA_OPENED this view last stored or replayed for ``saga_id`` (a saga's view:
        its own saga by default), or ``None``."""
        return self._opened.get(saga_id if saga_id is not None else getattr(self, "saga_id", ""))

    async def journal_id(self) -> str | None:
        """The journal's id (``Journal.journal_id`` of the backend; ``None``: it has none)."""
        return await journal_id_of(self.backend)

    async def append(self, saga_id: str, phase: Phase, **fields: Any) -> JournalEntry:
        """:meth:`JournalBackend.append` of the request that
        ``AppendRequest.build(saga_id, phase, **fields)`` builds, tagged by this view's tagger.

        Raises:
            The errors of :meth:`AppendRequest.build` and :meth:`JournalBackend.append`.
        """
        await self.bind(saga_id)
        entry = await self.backend.append(self.request(saga_id, phase, fields))
        return self.noted(saga_id, [entry])[0]

    def append_sync(self, saga_id: str, phase: Phase, **fields: Any) -> JournalEntry:
        """:meth:`append`, blocking, from a thread that is not the event loop's; only where
        ``capabilities.sync_append``.

        Raises:
            TypeError: the backend cannot append from another thread.
            The errors of :meth:`append`.
        """
        if not self.capabilities.sync_append:
            raise TypeError(f"{self.backend!r} has no blocking append")
        return self.backend.append_sync(self.request(saga_id, phase, fields))

    async def append_many(
        self, saga_id: str, appends: Sequence[Mapping[str, Any]]
    ) -> list[JournalEntry]:
        """Several appends to ``saga_id``, in order, each the keyword arguments of
        :meth:`append` (``phase`` included): in one round trip where the backend has
        ``append_many``.

        Raises:
            The errors of :meth:`append`, for the first append that fails (the ones before it
            are written, the ones after it are not).
        """
        await self.bind(saga_id)
        requests = [self.request(saga_id, spec["phase"], {k: v for k, v in spec.items() if k != "phase"})
                    for spec in appends]
        return self.noted(saga_id, await append_requests(self.backend, requests, self.capabilities))

    async def entries(self, saga_id: str) -> list[JournalEntry]:
        """:meth:`Journal.entries`, unchanged."""
        return await self.backend.entries(saga_id)

    async def entries_many(self, saga_ids: list[str]) -> dict[str, list[JournalEntry]]:
        """:meth:`EntriesMany.entries_many`, unchanged (where the backend has it)."""
        return await self.backend.entries_many(saga_ids)

    async def rows_many(self, saga_ids: list[str]) -> dict[str, list[tuple[Any, ...]]]:
        """:meth:`RowsRead.rows_many`, unchanged (where the backend has it)."""
        return await self.backend.rows_many(saga_ids)

    async def saga_ids(self) -> list[str]:
        """:meth:`Journal.saga_ids`, unchanged."""
        return await self.backend.saga_ids()

    async def saga_summaries(self, *, offset: int = 0, limit: int | None = None) -> list[SagaSummary]:
        """:meth:`Journal.saga_summaries`, unchanged."""
        return await self.backend.saga_summaries(offset=offset, limit=limit)

    async def close(self) -> None:
        """:meth:`Journal.close` of the journal underneath."""
        await self.backend.close()


def backend_of(journal: Any) -> Any:
    """The journal under a :class:`JournalView` (``journal`` itself otherwise)."""
    return journal.backend if isinstance(journal, JournalView) else journal


class FencedJournal(JournalView):
    """One saga's view of a :class:`~.journal.Journal`: appends to that saga carry the fence
    of the lease the saga holds (and every append the writer's tagger); reads pass through.

    Args:
        journal: the journal (a :class:`JournalView`: its backend, signed by its tagger).
        saga_id: the saga whose appends are fenced (appends to another saga are not).
        fence: returns the seq of the RUN_STARTED whose lease the saga holds now (``None``:
            it holds none: the append is unfenced, e.g. before its first run).
        on_lost: called once per refusal with the journal's :class:`LeaseLostError` (the saga
            stops its run at its next step).
        on_unjournaled: called with a text naming a late outcome the journal refused too (an
            undo's outcome after the saga was closed meanwhile, or a storage failure), before
            the refusal is raised.
        tagger: signs every entry (default: the tagger of ``journal`` when it is a view).

    RUN_STARTED is never fenced: it is how a lease is taken (conditionally, ``core.lease``).
    An append that passes ``fence`` itself is left as it is.
    """

    def __init__(
        self, journal: Journal, saga_id: str, fence: Callable[[], int | None],
        on_lost: Callable[[LeaseLostError], None],
        on_unjournaled: Callable[[str], None] | None = None, *, tagger: EntryTagger | None = None,
    ) -> None:
        if tagger is None and isinstance(journal, JournalView):
            tagger = journal.tagger  # the writer's: its Sagacity's keyring
        super().__init__(journal, tagger=tagger)
        self.inner = journal
        """The journal the saga was given."""
        self.saga_id = saga_id
        self._fence = fence
        self._on_lost = on_lost
        self._on_unjournaled = on_unjournaled
        try:
            self._loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            self._loop = None
        """The event loop the saga runs on (a worker thread's late append reloads keys there)."""
        self.appended: list[int] = []
        """The seqs of the entries this view appended to its saga (a replay returns and counts
        the stored one), in the order the appends returned: what the saga wrote itself, so
        that :meth:`own_tail` can tell another writer's entry from its own without a read."""

    def __repr__(self) -> str:
        return f"FencedJournal({self.inner!r}, saga {self.saga_id!r})"

    def _fenced(self, saga_id: str, phase: Phase, fields: dict[str, Any]) -> AppendRequest:
        """The request of ``append(saga_id, phase, **fields)``, with the lease's fence for an
        append to this saga (see the class notes)."""
        fence = None
        if saga_id == self.saga_id and "fence" not in fields and phase is not Phase.RUN_STARTED:
            fence = self._fence()
        if fence is not None:
            fields = {**fields, "fence": fence}
        return JournalView.request(self, saga_id, phase, fields)

    request = _fenced

    def own_tail(self, after: int) -> int | None:
        """The saga's tail as far as this view knows, when every entry after seq ``after`` is
        one it appended: the seq of its last append after ``after`` (``after`` itself when it
        appended none since); ``None`` when another writer appended in between (a seq after
        ``after`` is not one of :attr:`appended`, e.g. a stalled run's late outcome).

        A write conditional on the returned seq (``expected_seq``) then lands only if nothing
        but this view's own entries came after ``after`` (closing a saga on what compensation
        read: ``core.saga.closing``). An append of this view that raised yet was stored counts
        as another writer's: the caller reads again, never less safe.

        Args:
            after: the last seq the caller read (int >= 0).
        """
        mine = sorted({seq for seq in list(self.appended) if seq > after})
        tail = mine[-1] if mine else after
        return tail if len(mine) == tail - after else None

    def _own(self, saga_id: str, entry: JournalEntry) -> JournalEntry:
        if saga_id == self.saga_id:
            self.appended.append(entry.seq)
        return entry

    def _late(
        self, request: AppendRequest, fields: Mapping[str, Any], lost: LeaseLostError
    ) -> Callable[[], AppendRequest]:
        """After ``lost``: what builds the request again, marked late, when it is the outcome of
        the writer's own call or undo (written under the lost lease: the effect happened); built
        once the saga's secrets are reloaded (:meth:`rekey`).

        Raises:
            LeaseLostError: ``lost``, for any other append (or one already late).
        """
        self._on_lost(lost)
        own = _answers_own_start(request.phase, fields.get("payload"))
        if request.late or request.fence is None or not own:
            raise lost
        return lambda: AppendRequest.build(request.saga_id, request.phase, tagger=request.tagger,
                                           protect=self.secrets.get(request.saga_id),
                                           **{**fields, "fence": request.fence, "late": True})

    async def rekey(self, saga_id: str) -> None:
        """Reload ``saga_id``'s secrets from the store (:attr:`data_keys`), keeping the clear
        values they learned (still masked inside later free text): before a late append, since
        the key this view holds may have been erased meanwhile (``core.erasure``). A no-op
        without :attr:`data_keys`, without secrets for the saga, or when they are not stored
        (no master key: the key lives in this process only, and stays, so that the saga's equal
        values keep committing alike).

        Raises:
            JournalError: the store could not be read; DataKeyError: no key opens it.
        """
        old = self.secrets.get(saga_id)
        if self.data_keys is None or old is None or not getattr(old, "stored", False):
            return  # no stored key (this process's own, in memory): nothing could erase it
        fresh = await self.data_keys.reload(self.backend, saga_id)
        fresh.known.update(getattr(old, "known", ()))
        self.secrets[saga_id] = fresh

    def _rekey_sync(self, saga_id: str) -> None:
        """:meth:`rekey` from a worker thread: run on the event loop this view was made on (the
        store's reads are async), waited for up to :data:`REKEY_SECONDS`.

        Raises:
            JournalWriteError: the loop did not run it in time (nothing was written).
            The errors of :meth:`rekey`.
        """
        loop = self._loop
        if self.data_keys is None or saga_id not in self.secrets or loop is None or loop.is_closed():
            return
        try:
            if asyncio.get_running_loop() is loop:
                return  # on the loop itself (not a worker thread): it cannot wait for itself
        except RuntimeError:
            pass
        try:
            asyncio.run_coroutine_threadsafe(self.rekey(saga_id), loop).result(REKEY_SECONDS)
        except TimeoutError as exc:
            raise JournalWriteError(
                f"saga {saga_id!r}: its data keys could not be reloaded before a late outcome "
                f"within {REKEY_SECONDS} s (the event loop is busy); nothing written") from exc

    async def append(self, saga_id: str, phase: Phase, **fields: Any) -> JournalEntry:
        """:meth:`JournalView.append`, fenced (see the class notes); a refused outcome of the
        writer's own call or undo is written late.

        Raises:
            LeaseLostError: the saga's lease is another run's now; nothing written (after
                ``on_lost``).
            The other errors of :meth:`Journal.append`.
        """
        await self.bind(saga_id)
        request = self.request(saga_id, phase, fields)
        try:
            return self._own(saga_id, self.noted(saga_id, [await self.backend.append(request)])[0])
        except LeaseLostError as lost:
            build = self._late(request, fields, lost)
        await self.rekey(saga_id)  # the saga's key may have been erased since (core.erasure)
        late = build()
        try:  # the effect (or the undo) happened under our lease: journal it, marked late
            return self._own(saga_id, await self.backend.append(late))
        except JournalError as refused:  # closed meanwhile: say so wherever we can
            self._unjournaled(late, refused)
            raise

    def append_sync(self, saga_id: str, phase: Phase, **fields: Any) -> JournalEntry:
        """:meth:`append` through the backend's blocking ``append_sync`` (a sync tool's worker
        thread writes without a hop to the event loop), fenced and written late the same way;
        only where ``capabilities.sync_append``.

        Raises:
            TypeError: the backend cannot append from another thread.
            The errors of :meth:`append`.
        """
        if not self.capabilities.sync_append:
            raise TypeError(f"{self.backend!r} has no blocking append")
        request = self.request(saga_id, phase, fields)
        try:
            return self._own(saga_id, self.backend.append_sync(request))
        except LeaseLostError as lost:
            build = self._late(request, fields, lost)
        self._rekey_sync(saga_id)
        late = build()
        try:
            return self._own(saga_id, self.backend.append_sync(late))
        except JournalError as refused:
            self._unjournaled(late, refused)
            raise

    def _unjournaled(self, request: AppendRequest, refused: JournalError) -> None:
        """Say wherever we can that a late outcome could not be journaled (closed meanwhile)."""
        if self._on_unjournaled is not None:
            self._on_unjournaled(
                f"{request.phase.value} of {request.tool} (call {request.call_id}) could "
                f"not be journaled, even late: {describe_error(refused)}")

    async def append_many(
        self, saga_id: str, appends: Sequence[Mapping[str, Any]]
    ) -> list[JournalEntry]:
        """:meth:`JournalView.append_many`, each append fenced (``core.journal.append_each``).

        Raises:
            LeaseLostError: as :meth:`append` (the appends before the refused one are written).
        """
        try:
            stored = await super().append_many(saga_id, appends)
        except LeaseLostError as lost:
            self._on_lost(lost)
            raise
        for entry in stored:
            self._own(saga_id, entry)
        return stored
