"""Act only on evidence that verifies: one check before anything acts on a saga's past.

Every operation that acts on what a saga's journal says happened (resume, recover, approve or
reject, close, a further run of an existing saga, compensation itself) first reads the saga's
entries through :meth:`Evidence.verified_entries`, which refuses with
:class:`~sagacity_agents.errors.EvidenceError`, naming the first bad ``seq``, when:

* the hash chain does not verify (``core.chain``: an edited, inserted, reordered or removed
  entry, an edited column);
* checkpoints are configured and the chain no longer holds the newest signed checkpoint's head
  (truncated tail, deleted close, re-sealed rewrite), or a checkpoint's signature fails;
* a verify keyring is configured and an APPROVED entry carries no valid decision signature (an
  approval appended by a writer without the decision key), or a REJECTED one carries a bad one;
* a verify keyring is configured and an entry carries no valid tag, unless a signed keyring
  adoption lists it as written before the keyring, or a RESOLVED carries no valid signature
  (``core.authenticity``);
* a verify keyring is configured and an entry's tag or statement is by a key whose role may
  not sign its phase, or by a key revoked before it (``core.key_roles``: the roles and
  revocations the keyring events of the reserved saga record);
* always: an entry has a shape no run of the library writes (``core.structure``);
* always: an execution its approval does not cover, or a request decided, consumed or used
  twice (``core.approval_rule``).

Decision statement (``core.signing.statement_bytes``), signed by ``approve`` / ``reject``::

    {"type": "sagacity.decision.v1", "request_id", "saga_id", "call_id", "args_hash",
     "decision": "approved" | "rejected", "approver", "time", "key_id"}

stored in the decision entry's payload as ``"signature": {"key_id", "time", "signature"}``.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ..errors import ConfigurationError, EvidenceError, SignatureError
from .chain import (ChainFault, ChainHead, VerifyResult, check_anchor, entries_from_rows, rows_verdict,
                    sagas_to_verify, verify_entries)
from .approval_rule import approval_problem
from .authenticity import ADOPTION_SAGA, Adoption, TagCache, authenticity_fault, read_adoption, read_key_roles
from .identity import copied_saga_problem, journal_id_of
from .checkpoints import Checkpoint, CheckpointStore, sign_checkpoint
from .entries import JournalEntry, Phase
from .fence import FencedJournal, JournalView
from .journal import Journal, capabilities_of, utc_stamp
from .key_roles import KeyRoles, Role
from .reads import read_saga_rows, read_sagas
from .signing import Keyring, signed_record_problem
from .structure import structure_problem
from .tag_proofs import TagProofs

__all__ = ["DECISION_STATEMENT", "Evidence", "checkpoint_problem", "refusal", "sign_decision", "verified_entries", "verify_sagas"]

DECISION_STATEMENT = "sagacity.decision.v1"
"""The ``type`` of a decision statement."""


def _decision_fields(
    saga_id: str, request_id: str, call_id: str | None, args_hash: str, approved: bool,
    approver: str, time: str, key_id: str,
) -> dict[str, Any]:
    return {"request_id": request_id, "saga_id": saga_id, "call_id": call_id, "args_hash": args_hash,
            "decision": "approved" if approved else "rejected", "approver": approver,
            "time": time, "key_id": key_id}


def sign_decision(
    keyring: Keyring, *, saga_id: str, request_id: str, call_id: str | None, args_hash: str,
    approved: bool, approver: str,
) -> dict[str, str]:
    """Sign a human decision; the result goes into the decision entry's payload as ``signature``.

    Returns:
        ``{"key_id", "time", "signature"}``.

    Raises:
        ConfigurationError: the keyring has no signing key.
    """
    if keyring.signing_key is None:
        raise ConfigurationError("signing a decision needs a keyring with a signing key")
    time = utc_stamp()
    fields = _decision_fields(saga_id, request_id, call_id, args_hash, approved, approver, time,
                              keyring.signing_key[0])
    key_id, signature = keyring.sign(DECISION_STATEMENT, fields)
    return {"key_id": key_id, "time": time, "signature": signature}


def _decision_problem(entry: JournalEntry, keyring: Keyring, allowed: frozenset[str] | None) -> str | None:
    """Why the decision ``entry`` is not signed as required, or ``None``."""
    payload = entry.payload if isinstance(entry.payload, dict) else {}
    signed = payload.get("signature")
    if signed is None:
        # Only approvals must be signed: a rejection runs nothing, and the library writes some
        # itself (arguments that do not validate are rejected without asking a human).
        return "APPROVED entry carries no decision signature" if entry.phase is Phase.APPROVED else None
    return signed_record_problem(
        keyring, DECISION_STATEMENT, "decision", signed,
        lambda time, key_id: _decision_fields(
            entry.saga_id, str(payload.get("request_id")), entry.call_id,
            str(payload.get("args_hash")), entry.phase is Phase.APPROVED,
            str(payload.get("approver")), time, key_id),
        allowed,
    )


def _stored_key(entry: JournalEntry) -> tuple[Any, ...]:
    """Every stored column of ``entry`` the chain covers (its bytes included)."""
    return (entry.seq, entry.phase, entry.tool, entry.call_id, entry.write_key, entry.recorded_at,
            entry.prev_hash, entry.hash, entry.canonical)


def _backend_of(journal: Any) -> Any:
    """The journal object under a saga's views (a :class:`FencedJournal` over a
    :class:`JournalView` over the backend): each run makes new views of the same backend."""
    while True:
        if isinstance(journal, FencedJournal):
            journal = journal.inner
        elif isinstance(journal, JournalView):
            journal = journal.backend
        else:
            return journal


class VerifiedHeads:
    """Per journal object (weakly held) and saga id, the entries this process verified before
    acting on the saga (``Evidence.verified_entries``), kept as their stored columns and bytes:
    the saga's next run finds how many leading entries it reads are still identical to them
    (a comparison, no hashing) and hashes only the ones after (``chain.verify_entries``'
    ``known``), so reopening a saga for a one-call run costs its new entries, not its length.
    An entry edited since, in any column or byte, ends the identical prefix there and is hashed
    and checked again. What a verify is asked for (``verify``, the CLI, ``checked_entries``)
    always walks the whole chain. Bounded (:data:`_LIMIT` entries per journal, the oldest sagas
    dropped); a journal that cannot be weakly referenced is not remembered."""

    _LIMIT = 100_000

    def __init__(self) -> None:
        self._by_journal: weakref.WeakKeyDictionary[Any, dict[str, list[tuple[Any, ...]]]] = \
            weakref.WeakKeyDictionary()

    def known(self, journal: Any, saga_id: str, entries: Sequence[JournalEntry]) -> int:
        """How many leading ``entries`` are identical to the ones verified last time."""
        try:
            kept = self._by_journal.get(_backend_of(journal), {}).get(saga_id)
        except TypeError:  # not weakly referenceable or not hashable
            return 0
        if not kept:
            return 0
        same = 0
        for old, entry in zip(kept, entries):
            if old != _stored_key(entry):
                break
            same += 1
        return same

    def keep(self, journal: Any, saga_id: str, entries: Sequence[JournalEntry], known: int = 0) -> None:
        """Remember ``entries`` (verified just now) as the saga's; ``known``: how many leading ones
        :meth:`known` found identical to the ones kept (only the rest are added then)."""
        if len(entries) > self._LIMIT:
            return
        try:
            sagas = self._by_journal.setdefault(_backend_of(journal), {})
        except TypeError:
            return
        kept = sagas.pop(saga_id, None)
        total = sum(len(other) for other in sagas.values())
        while sagas and total + len(entries) > self._LIMIT:
            total -= len(sagas.pop(next(iter(sagas))))
        if kept is not None and known == len(kept):
            kept.extend(_stored_key(entry) for entry in entries[known:])
        else:
            kept = [_stored_key(entry) for entry in entries]
        sagas[saga_id] = kept


@dataclass(frozen=True)
class Evidence:
    """How much a saga's journal is checked before anything acts on it.

    Args:
        checkpoints: where signed checkpoints are kept; ``None``: the chain alone is checked.
        keyring: verify keys (checkpoints and decisions) and, on a host that signs, a signing
            key. With a keyring, APPROVED entries must carry a valid decision signature.
        decision_keys: the key ids allowed to sign decisions (``None``: any key of the keyring).
            Name the approvers' keys here so that a checkpoint key on the agent's host cannot
            sign an approval. Without keyring events these are the decision makers; with
            them, they narrow the keys given the ``decision_maker`` role (``core.key_roles``).

    Raises:
        ConfigurationError: checkpoints without a keyring (they could not be verified).
    """

    checkpoints: CheckpointStore | None = None
    keyring: Keyring | None = None
    decision_keys: frozenset[str] | None = None
    tags: TagCache = field(default_factory=TagCache, compare=False, repr=False)
    """Entry tags verified already in this process (``core.authenticity``)."""
    heads: VerifiedHeads = field(default_factory=lambda: VerifiedHeads(), compare=False, repr=False)
    """Per journal and saga, the entries this process verified before acting
    (:meth:`verified_entries`): the next run of the saga hashes only what follows them."""

    def __post_init__(self) -> None:
        if self.checkpoints is not None and self.keyring is None:
            raise ConfigurationError("checkpoints need a keyring to sign and verify them")
        object.__setattr__(self, "_adopted", None)

    async def adoption(self, journal: Journal, reserved: Sequence[JournalEntry] | None = None) -> Adoption | None:
        """The journal's signed keyring adoption (``core.authenticity.read_adoption``; ``None``:
        the reserved saga is empty, or no keyring here). One that counts is kept: only the first
        complete adoption counts, and nothing written later changes it. ``reserved``: the
        reserved saga's entries when the caller read them already."""
        if self.keyring is None:
            return None
        found = getattr(self, "_adopted", None)
        if found is None:
            found = read_adoption(reserved if reserved is not None else await journal.entries(ADOPTION_SAGA),
                                  self.keyring, self.tags)
            if found is not None and found.adopted:
                object.__setattr__(self, "_adopted", found)
        return found

    async def key_roles(self, journal: Journal) -> KeyRoles | None:
        """The keys' roles and validity the journal's keyring events record
        (``core.authenticity.read_key_roles``; ``None``: no keyring here). Read each time: a
        revocation may be journaled at any moment.

        Raises:
            JournalError: the journal could not be read.
        """
        return (await self._keyring_state(journal))[1]

    async def role_problem(self, journal: Journal, needed: Role, what: str) -> str | None:
        """Why an entry needing a ``needed`` key (``what`` names it) signed on this host would not
        verify here (``core.key_roles``: the roles the journal records), or ``None``: it would,
        or no keyring signs here.

        Raises:
            JournalError: the journal could not be read.
        """
        if self.keyring is None or self.keyring.signing_key is None:
            return None
        key_id = self.keyring.signing_key[0]
        roles = await self.key_roles(journal)
        if roles is None or needed in roles.roles_of(key_id):
            return None
        return f"its key {key_id!r} is not a {needed.value} ({roles.describe(key_id)}), as {what} needs"

    async def _keyring_state(self, journal: Journal) -> tuple[Adoption | None, KeyRoles | None]:
        """The adoption and the roles, from one read of the reserved saga."""
        if self.keyring is None:
            return None, None
        reserved = await journal.entries(ADOPTION_SAGA)
        roles = read_key_roles(reserved, self.keyring, self.tags, self.decision_keys)
        return await self.adoption(journal, reserved), roles

    async def _anchor(self, saga_id: str, roles: KeyRoles | None = None,
                      ) -> tuple[ChainHead | None, VerifyResult | None, list[Checkpoint]]:
        if self.checkpoints is None or self.keyring is None:
            return None, None, []
        try:
            found = await self.checkpoints.list(saga_id)
        except ValueError as exc:
            return None, VerifyResult(saga_id, False, 0, None, 1, ChainFault.BAD_SIGNATURE,
                                      f"unreadable checkpoint: {exc}"), []
        for checkpoint in found:
            problem = checkpoint_problem(checkpoint, self.keyring, roles)
            if problem is not None:
                return None, VerifyResult(
                    saga_id, False, 0, None, checkpoint.seq, ChainFault.BAD_SIGNATURE,
                    f"checkpoint of seq {checkpoint.seq} signed {checkpoint.time}: {problem}",
                ), found
        if not found:
            return None, None, found
        newest = max(found, key=lambda c: (c.seq, c.time))
        return ChainHead(newest.seq, newest.hash), None, found

    def check(self, saga_id: str, entries: Sequence[JournalEntry], anchor: ChainHead | None,
              checkpoints: Sequence[Checkpoint] = (), adoption: Adoption | None = None, *,
              chain: VerifyResult | None = None, roles: KeyRoles | None = None,
              journal_id: str | None = None, known: int = 0) -> VerifyResult:
        """Verify ``entries`` (chain, anchor, every checkpoint, structure, tags, their keys'
        roles and validity, decision and resolution signatures; ``adoption``: the journal's
        keyring adoptions; ``chain``: the chain's result without an anchor when the caller has
        it, see ``verify_entries``; ``roles``: the keyring events' roles, ``None``: the default
        of ``core.key_roles``; ``journal_id``: the id of the journal read, which a saga of
        derivation 2 must name in its SAGA_OPENED and its tags bind, ``core.identity``; ``None``:
        not checked; ``known``: leading entries identical to ones this process verified, see
        ``chain.verify_entries``). ``checkpoints`` must have been verified (signature and role).

        Returns:
            The :class:`VerifyResult`; the first bad ``seq`` when it fails.
        """
        result = verify_entries(saga_id, entries, anchor, chain=chain, known=known)
        if not result.ok:
            return result
        for checkpoint in sorted(checkpoints, key=lambda c: c.seq):
            fault = check_anchor(saga_id, entries, ChainHead(checkpoint.seq, checkpoint.hash))
            if fault is not None:
                return VerifyResult(saga_id, False, len(entries), None, fault.bad_seq, fault.fault,
                                    f"signed checkpoint ({checkpoint.time}, key {checkpoint.key_id}): "
                                    f"{fault.detail}", anchor)
        # The first fault by seq is reported; at one seq, a missing or bad tag first.
        faults: list[tuple[int, ChainFault, str]] = []
        before = 0
        if self.keyring is not None:
            roles = roles or KeyRoles(None, self.decision_keys, self.keyring.admin_keys)
            tag_fault, before = authenticity_fault(
                saga_id, entries, self.keyring, adoption, self.tags, roles=roles,
                checkpoint_times=[(c.seq, c.time) for c in checkpoints], journal_id=journal_id)
            faults += [tag_fault] if tag_fault is not None else []
            first_tagged = adoption.before_keyring(saga_id) if adoption is not None else 0
            allowed = roles.holders(Role.DECISION_MAKER, self.keyring.verify_keys)
            for entry in entries:
                if entry.phase in (Phase.APPROVED, Phase.REJECTED) and entry.seq > first_tagged:
                    problem = _decision_problem(entry, self.keyring, allowed)
                    if problem is not None:
                        faults.append((entry.seq, ChainFault.BAD_SIGNATURE, problem))
                        break
        copied = copied_saga_problem(entries, journal_id)  # whatever the keys
        if copied is not None:  # named before a tag it makes fail (same seq)
            faults.insert(0, (copied[0], ChainFault.OTHER_JOURNAL, copied[1]))
        shape = structure_problem(entries, saga_id)  # whatever the keys
        if shape is not None:
            faults.append((shape[0], ChainFault.STRUCTURE, shape[1]))
        trail = approval_problem(entries)  # whatever the keys
        if trail is not None:
            faults.append((trail[0], ChainFault.APPROVAL, trail[1]))
        if faults:
            seq, why, detail = min(faults, key=lambda f: f[0])
            return VerifyResult(saga_id, False, len(entries), None, seq, why, detail, anchor)
        return replace(result, unauthenticated=before) if before else result

    async def verify(self, journal: Journal, saga_id: str) -> VerifyResult:
        """Verify one saga as :meth:`verified_entries` does, returning the result.

        Raises:
            JournalError: the journal could not be read.
        """
        return (await self._verify(journal, saga_id))[0]

    async def _verify(self, journal: Journal, saga_id: str,
                      trust: bool = False) -> tuple[VerifyResult, list[JournalEntry]]:
        """The saga's verdict and entries; ``trust``: hash only what follows the entries still
        identical to the ones this process verified before acting last time (:attr:`heads`),
        and remember the ones verified now."""
        adoption, roles = await self._keyring_state(journal)
        anchor, fault, checkpoints = await self._anchor(saga_id, roles)
        entries = await journal.entries(saga_id)
        if fault is not None:
            return fault, entries
        journal_id = await journal_id_of(journal)
        known = self.heads.known(journal, saga_id, entries) if trust else 0
        with TagProofs(self.keyring, self.tags, journal_id) as proofs:
            await proofs.finish(proofs.start(entries[known:]))  # on every core; the check names faults
        result = self.check(saga_id, entries, anchor, checkpoints, adoption, roles=roles,
                            journal_id=journal_id, known=known)
        if trust and result.ok and entries:
            self.heads.keep(journal, saga_id, entries, known)
        return result, entries

    async def verify_all(self, journal: Journal) -> list[VerifyResult]:
        """Verify every saga of the journal, then every checkpointed saga the journal no longer
        lists (all of its entries removed: ``missing saga``); see :func:`verify_sagas`."""
        return await verify_sagas(journal, evidence=self, heads_too=False)

    async def verified_entries(self, journal: Journal, saga_id: str) -> list[JournalEntry]:
        """The saga's entries, only if they verify.

        Raises:
            EvidenceError: they do not; the message names the first bad ``seq`` and why.
            JournalError: the journal could not be read.
        """
        result, entries = await self._verify(journal, saga_id, trust=True)
        if not result.ok:
            raise refusal(result)
        return entries

    async def checked_entries(self, journal: Journal, saga_id: str) -> tuple[VerifyResult, list[JournalEntry]]:
        """The saga's verdict (as :meth:`verify`) and its entries as read, without raising:
        for a caller that goes through many sagas (``recover --all``) and reports a saga that
        does not verify instead of stopping. Act on the entries only when the verdict is ok.

        Raises:
            JournalError: the journal could not be read.
        """
        return await self._verify(journal, saga_id)

    @property
    def decision_key_problem(self) -> str | None:
        """Why an approval made on this host would not verify here, or ``None``: with a verify
        keyring, an approval needs a signing key that ``decision_keys`` allows."""
        if self.keyring is None:
            return None
        if self.keyring.signing_key is None:
            return "the keyring holds no private key to sign decisions with"
        key_id = self.keyring.signing_key[0]
        if self.decision_keys is not None and key_id not in self.decision_keys:
            return f"its key {key_id!r} may not sign decisions (allowed: {', '.join(sorted(self.decision_keys))})"
        return None

    @property
    def signs_checkpoints(self) -> bool:
        """Whether this host writes signed checkpoints (a store and a signing key)."""
        return self.checkpoints is not None and self.keyring is not None and self.keyring.can_sign

    async def checkpoint(self, journal: Journal, saga_id: str) -> Checkpoint | None:
        """Sign and store the saga's current head, after verifying the whole saga (a checkpoint
        never vouches for a chain that does not verify).

        Returns:
            The checkpoint, or ``None`` when this host does not sign checkpoints or the saga has
            no entries.

        Raises:
            EvidenceError: the saga does not verify.
            ConfigurationError: this host's key may not sign checkpoints (``core.key_roles``):
                nothing stored (a checkpoint by it would make the saga fail verification).
            OSError or the store's error: the checkpoint could not be stored.
        """
        if not self.signs_checkpoints:
            return None
        entries = await self.verified_entries(journal, saga_id)
        if not entries:
            return None
        assert self.keyring is not None and self.checkpoints is not None
        head = entries[-1]
        checkpoint = sign_checkpoint(self.keyring, saga_id, head.seq, head.hash, utc_stamp())
        roles = await self.key_roles(journal)
        problem = roles.checkpoint_problem(checkpoint.key_id, checkpoint.time) if roles is not None else None
        if problem is not None:
            raise ConfigurationError(f"checkpoint of saga {saga_id} not stored: {problem}")
        await self.checkpoints.put(checkpoint)
        return checkpoint


def checkpoint_problem(checkpoint: Checkpoint, keyring: Keyring, roles: KeyRoles | None) -> str | None:
    """Why ``checkpoint`` does not count (``None``: it does): its signature does not verify,
    or its key may not sign checkpoints or was revoked before it (``KeyRoles.checkpoint_problem``;
    ``roles`` ``None``: the default, every key a checkpoint signer)."""
    try:
        checkpoint.verify(keyring)
    except SignatureError as exc:
        return str(exc)
    roles = roles or KeyRoles(None, None, keyring.admin_keys)
    return roles.checkpoint_problem(checkpoint.key_id, checkpoint.time)


def refusal(result: VerifyResult) -> EvidenceError:
    """The :class:`EvidenceError` for a saga whose ``result`` is not ok (first bad seq, fault
    and detail named; nothing was done on it)."""
    return EvidenceError(
        f"saga {result.saga_id} does not verify, first bad seq {result.bad_seq} "
        f"({result.fault.value if result.fault else 'fault'}: {result.detail}); "
        "refusing to act on it: nothing was run, undone, decided or closed",
        saga_id=result.saga_id, bad_seq=result.bad_seq,
        fault=result.fault.value if result.fault else None,
    )


CHAIN_ONLY = Evidence()
"""The default: the hash chain is checked, no checkpoints, no signatures."""


async def verify_sagas(
    journal: Journal, saga_id: str | None = None, *, heads: Mapping[str, ChainHead] | None = None,
    evidence: Evidence | None = None, heads_too: bool = True,
) -> list[VerifyResult]:
    """Verify one saga or every saga: the chain and ``heads`` (``core.chain.verify_entries``),
    then, when ``evidence`` has checkpoints or a keyring, its checks too (checkpointed sagas the
    journal no longer lists included). The first fault of a saga is reported.

    Every saga is read once, many sagas per read where the backend can
    (``core.reads.read_sagas``), and its chain checked once for both. Without checkpoints or
    a keyring, on a backend with ``rows_many`` (SQLite, PostgreSQL), a saga is checked from its
    stored rows (``core.chain.rows_verdict``) and only one that does not pass plainly
    is judged entry by entry: the results are the same, faster. With a keyring, the tags of the
    saga read next are verified on one thread per core while this one is checked
    (``core.tag_proofs``); the check finds them verified and names every fault itself.

    Args:
        journal: the journal to read.
        saga_id: verify only this saga; ``None``: every saga of the journal, then checkpointed
            sagas it no longer lists, then anchored ones (``heads``) it no longer lists.
        heads: anchored heads by saga id (``core.chain.verify_journal``).
        evidence: checkpoints and keyring (``None``: the chain and the structure only).
        heads_too: ``False`` leaves out the sagas only ``heads`` lists (``Evidence.verify_all``).

    Returns:
        One :class:`VerifyResult` per saga, in the order above.

    Raises:
        JournalError: the journal could not be read.
    """
    heads = heads or {}
    evidence = evidence or CHAIN_ONLY  # the structure is checked whatever the keys
    also: list[Sequence[str]] = []
    if saga_id is None and evidence.checkpoints is not None:
        also.append(await evidence.checkpoints.saga_ids())
    ids = await sagas_to_verify(journal, saga_id, [*also, heads] if heads_too else also)
    adoption, roles = await evidence._keyring_state(journal)
    journal_id = await journal_id_of(journal)
    results: list[VerifyResult] = []
    if evidence.keyring is None and evidence.checkpoints is None and capabilities_of(journal).rows_read:
        # Read speed: the chain and the structure checked from the stored rows; a
        # saga that does not pass them plainly is checked again below, entry by entry, so its
        # fault is named exactly as it always was.
        async for sid, rows in read_saga_rows(journal, ids):
            quick = _verified_rows(sid, rows, heads.get(sid), journal_id)
            results.append(quick if quick is not None else await _verify_read(  # no tags: no keyring
                sid, entries_from_rows(rows), heads, evidence, adoption, roles, journal_id))
        return results
    # Each saga's tags are verified on every core (core.tag_proofs) while the saga read before
    # it is checked here; the check finds them verified, and still names every fault itself.
    with TagProofs(evidence.keyring, evidence.tags, journal_id) as proofs:

        async def check(sid: str, entries: list[JournalEntry], proving: list[Any]) -> VerifyResult:
            await proofs.finish(proving)
            return await _verify_read(sid, entries, heads, evidence, adoption, roles, journal_id)

        held: tuple[str, list[JournalEntry], list[Any]] | None = None
        async for sid, entries in read_sagas(journal, ids):
            started = (sid, entries, proofs.start(entries))
            if held is not None:
                results.append(await check(*held))
            held = started
        if held is not None:
            results.append(await check(*held))
    return results


def _verified_rows(sid: str, rows: Sequence[Sequence[Any]], anchor: ChainHead | None,
                   journal_id: str | None) -> VerifyResult | None:
    """The result of a saga whose stored rows pass the chain and the anchor
    (``core.chain.rows_verdict``), the journal's identity, the structure rule and the approval
    rule; ``None``: something to name, or to judge entry by entry."""
    verified = rows_verdict(sid, rows, anchor)
    if verified is None:
        return None
    chain, fields = verified
    if rows and copied_saga_problem(entries_from_rows(rows[:1]), journal_id) is not None:
        return None
    if structure_problem(fields, sid) is not None or approval_problem(fields) is not None:
        return None
    return chain


async def _verify_read(
    sid: str, entries: list[JournalEntry], heads: Mapping[str, ChainHead], evidence: Evidence,
    adoption: Adoption | None, roles: KeyRoles | None = None, journal_id: str | None = None,
) -> VerifyResult:
    """One saga's result for :func:`verify_sagas`, from its entries as read."""
    chain = verify_entries(sid, entries)
    anchored = verify_entries(sid, entries, heads[sid], chain=chain) if sid in heads else chain
    if not anchored.ok:
        return anchored  # a fault inside the chain, or against its heads anchor
    cp_anchor, fault, checkpoints = await evidence._anchor(sid, roles)
    full = fault or evidence.check(sid, entries, cp_anchor, checkpoints, adoption, chain=chain,
                                   roles=roles, journal_id=journal_id)
    # The chain's result carries the heads anchor; the full one the count before a keyring.
    return full if not full.ok else replace(anchored, unauthenticated=full.unauthenticated)


async def verified_entries(journal: Journal, saga_id: str, evidence: Evidence | None = None) -> list[JournalEntry]:
    """``(evidence or CHAIN_ONLY).verified_entries(journal, saga_id)``; see :class:`Evidence`.

    Raises:
        EvidenceError: the saga does not verify (first bad ``seq`` named).
    """
    return await (evidence or CHAIN_ONLY).verified_entries(journal, saga_id)
