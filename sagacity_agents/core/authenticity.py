"""Every entry authenticated under a keyring: entry tags, keyring adoption, signed resolutions.

A writer that can only INSERT journal rows (the least-privilege role of docs/postgres.md) can
append, through the library's own ``Journal.append``, entries that extend a chain validly. The
chain cannot tell them from the library's. A *tag* can: with a keyring configured, every entry
the library writes carries, in two columns of its own (``tag_key``, ``tag``), a signature by a
key the database does not hold, and everything that acts on a saga refuses an entry whose tag is
missing or wrong, naming its seq.

**Scheme: Ed25519, the keyring's own signing key** (``core.signing``). Measured against
HMAC-SHA256 in ``bench/authenticity.py`` (docs/threat-model.md has the figures and the
reasoning): the entries are written by agent hosts, recovery workers and approvers, whose keys
are deliberately different (``decision_keys``). A signature needs no secret shared by all of
them (an HMAC key on an approver's workstation or a web inbox could forge any EXECUTED), names
its writer's key, and can be checked by anyone holding the public keys (an auditor, the
stand-alone verifier) rather than only by holders of the secret. It costs ~40 µs per append and
~145 µs per entry verified on the reference host; verified tags are remembered per process
(:class:`TagCache`), so a live saga re-verifies only its new entries.

**What a tag covers.** The entry's content without its chain links: the entry's canonical bytes
as they would be at ``seq`` 0 after the genesis hash (:func:`unlinked_bytes`), i.e. saga id,
phase, tool, call id, write key, payload and recorded-at. On PostgreSQL the locked append
computes ``seq`` and ``prev_hash`` on the server (``sagacity_append_sealed``), so a tag over the
final hash cannot be made before the insert, and the application's role cannot UPDATE. The
write key is unique per saga and the saga id is covered, so a tagged content cannot be replayed
elsewhere; order and completeness stay the chain's and the signed checkpoints' business. The
signed statement is ``{"type": "sagacity.entry.v1", "content": SHA-256 hex of those bytes,
"key_id"}`` in RFC 8785 (a third party rebuilds it with ``json.dumps(..., sort_keys=True,
separators=(",", ":"))``; docs/audit-format.md). A saga opened with ``"derivation": 2``
(``core.identity``) signs ``sagacity.entry.v2`` instead, which also binds the journal's id and the
saga's SAGA_OPENED hash: the same content copied into another journal does not verify there.

**Adopting a keyring on a live journal** (:func:`adopt_keyring`). Entries written before
a keyring carry no tag. Adoption journals a signed marker in the reserved saga
:data:`ADOPTION_SAGA`: KEYRING_ADOPTED entries listing every saga's head at that moment. Under
a keyring, an untagged entry is then "unauthenticated, before the keyring" (reported, not a
fault) when its saga is listed and its seq is at or before the listed head, and the listed head
must still be in the chain (an anchor, as a checkpoint is); every other untagged entry, in any
saga, is refused. Storage order and ``recorded_at`` are the writer's to choose, so an INSERT-only
writer cannot pass a fresh unauthenticated saga off as old: only the signed list decides.

**A human's RESOLVED is signed** like an approval decision: :func:`sign_resolution`
puts ``{"key_id", "time", "signature"}`` in the payload over the statement
``sagacity.resolution.v1`` (:func:`resolution_fields`), by a key ``decision_keys`` allows.
"""

from __future__ import annotations

import base64
import hashlib
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ..errors import ConfigurationError
from .canonical import parse_json, sha256_hex
from .chain import ChainFault, ChainHead, check_anchor, verify_entries
from .entries import GENESIS_HASH, HASHED_FIELDS, JournalEntry, Phase
from .fence import JournalView, backend_of
from .identity import Derivation, derivation_of, statement_for, unlinked_bytes
from .journal import FENCE_KEY, LATE_KEY, Journal, utc_stamp
from .key_roles import KEYRING_EVENTS, KeyRoles, Role, read_roles, statement_key, tag_roles
from .signing import Keyring, signed_record_problem

__all__ = [
    "ADOPTION_SAGA",
    "ENTRY_STATEMENT",
    "RESOLUTION_STATEMENT",
    "Adoption",
    "EntryTagger",
    "TagCache",
    "TagClaim",
    "UntaggedRefusal",
    "adopt_keyring",
    "authenticated_entries",
    "authenticity_fault",
    "entry_tagger",
    "prove_tags",
    "read_adoption",
    "read_key_roles",
    "resolution_fields",
    "role_fault",
    "sign_resolution",
    "signing_view",
    "tag_statement",
    "unlinked_bytes",
    "unlinked_from_pieces",
    "untagged_after_tagged",
]

ENTRY_STATEMENT = "sagacity.entry.v1"
"""The ``type`` of the statement an entry's tag signs."""
RESOLUTION_STATEMENT = "sagacity.resolution.v1"
"""The ``type`` of a human's signed answer to an in-doubt entry (RESOLVED)."""
ADOPTION_SAGA = "sagacity.keyring"
"""The reserved saga holding keyring adoptions (KEYRING_ADOPTED entries)."""
ADOPTION_PART = 1000
"""Heads listed per KEYRING_ADOPTED entry (a journal of many sagas is adopted in parts)."""
_CACHE_LIMIT = 200_000


def unlinked_from_pieces(head: bytes, middle: bytes, tail: bytes) -> bytes:
    """:func:`unlinked_bytes` from the pieces a PostgreSQL append sends (the bytes split around
    ``prev_hash`` and ``seq``, ``backends.postgres.journal.byte_pieces``)."""
    return b"".join((head, GENESIS_HASH.encode("ascii"), middle, b"0", tail))


def tag_statement(unlinked: bytes, key_id: str) -> bytes:
    """The bytes an entry's tag signs: RFC 8785 of ``{"type": ENTRY_STATEMENT, "content":
    SHA-256 hex of unlinked, "key_id"}`` (key ids are ``[A-Za-z0-9._-]``, so no escaping; equal
    to ``core.signing.statement_bytes``, tested)."""
    digest = hashlib.sha256(unlinked).hexdigest()
    return (f'{{"content":"{digest}","key_id":"{key_id}","type":"{ENTRY_STATEMENT}"}}'
            .encode("ascii"))


class EntryTagger:
    """Tags entries with a keyring's signing key. A writer's view (:func:`signing_view`) puts it
    on each of its append requests; the backend tags the entry when it seals it.

    Args:
        keyring: a keyring with a signing key.

    Raises:
        ConfigurationError: the keyring cannot sign.
    """

    def __init__(self, keyring: Keyring) -> None:
        if keyring.signing_key is None:
            raise ConfigurationError("tagging journal entries needs a keyring with a signing key")
        self.key_id, self._key = keyring.signing_key

    def tag(self, unlinked: bytes) -> tuple[str, str]:
        """``(key_id, tag)`` for an entry whose :func:`unlinked_bytes` are ``unlinked``
        (derivation 1; a saga of derivation 2 is tagged through ``core.identity.BoundTagger``,
        which signs with :meth:`sign`)."""
        return self.sign(tag_statement(unlinked, self.key_id))

    def sign(self, statement: bytes) -> tuple[str, str]:
        """``(key_id, tag)``: the signing key's Ed25519 signature of ``statement``, base64."""
        return self.key_id, base64.b64encode(self._key.sign(statement)).decode("ascii")

    def tag_entry(self, entry: JournalEntry) -> JournalEntry:
        """``entry`` with its tag (sealed entries only: the chain links are inside the bytes)."""
        key_id, tag = self.tag(unlinked_bytes(entry.canonical, entry.seq, entry.prev_hash))
        return replace(entry, tag_key=key_id, tag=tag)


class UntaggedRefusal:
    """The tagger of a writer whose keyring cannot sign: every append is refused
    before anything is written (under a keyring an untagged entry would be refused by every
    reader, and the saga with it: better no entry than one that blocks the saga)."""

    key_id = None

    def tag(self, unlinked: bytes) -> tuple[str, str]:
        """Never returns.

        Raises:
            JournalWriteError: always; nothing is written.
        """
        from ..errors import JournalWriteError  # noqa: PLC0415

        raise JournalWriteError(
            "this host's keyring holds no private key: under a keyring every journal entry must "
            "be tagged (docs/threat-model.md), so nothing is written here; give the host a key")

    def sign(self, statement: bytes) -> tuple[str, str]:
        """Never returns (see :meth:`tag`)."""
        return self.tag(statement)

    def tag_entry(self, entry: JournalEntry) -> JournalEntry:
        """Never returns (see :meth:`tag`)."""
        self.tag(b"")
        raise AssertionError("unreachable")  # pragma: no cover


def entry_tagger(keyring: Keyring) -> EntryTagger | UntaggedRefusal:
    """What signs a writer's entries under ``keyring``: its signing key, or, for a keyring that
    cannot sign, a refusal of every append (:class:`UntaggedRefusal`)."""
    return UntaggedRefusal() if keyring.signing_key is None else EntryTagger(keyring)


def signing_view(journal: Journal, keyring: Keyring | None) -> Journal:
    """``journal`` as ``keyring``'s writer appends to it: a :class:`~.fence.JournalView` whose
    every append is tagged with the keyring's signing key (refused, with a keyring that cannot
    sign). The key stays in the view: writers with other keyrings (or none) share the backend
    object, each signing with its own key or none.

    Args:
        journal: a backend (or a view: its backend, signed by ``keyring`` instead).
        keyring: the writer's keyring; ``None``: the backend itself (a view: its backend), whose
            appends are untagged.
    """
    if keyring is None:
        return backend_of(journal)  # type: ignore[no-any-return]
    return JournalView(journal, tagger=entry_tagger(keyring))


class TagCache:
    """Tags already verified in this process, by ``(hash, key id, tag)``: the hash binds the
    bytes (the chain check re-hashes them first), so a verified tag stays verified. Bounded."""

    def __init__(self) -> None:
        self._seen: set[tuple[str, ...]] = set()

    def check(self, entry: JournalEntry, keyring: Keyring,
              derivation: Derivation | None = None) -> str | None:
        """Why ``entry``'s tag does not verify with ``keyring`` (``None``: it does), under its
        saga's ``derivation`` (``core.identity``; ``None``: derivation 1). The caller has
        checked the entry's hash against its bytes."""
        assert entry.tag_key is not None and entry.tag is not None
        seen = _seen_key(entry, derivation)
        if seen in self._seen:
            return None
        key = keyring.verify_keys.get(entry.tag_key)
        if key is None:
            return f"tagged with unknown key {entry.tag_key!r}"
        from cryptography.exceptions import InvalidSignature  # noqa: PLC0415

        try:
            key.verify(base64.b64decode(entry.tag, validate=True), _tag_statement_of(entry, derivation))
        except (InvalidSignature, ValueError, TypeError):
            return f"tag by key {entry.tag_key!r} does not verify"
        self.proven([seen])
        return None

    def unproven(self, entries: Iterable[JournalEntry], keyring: Keyring,
                 derivation: Derivation | None = None) -> list[TagClaim]:
        """The tags of ``entries`` (one saga's, of ``derivation``) not verified yet, each ready
        to verify anywhere (:func:`prove_tags`, on another thread): what :meth:`check` would
        verify. Only an entry whose stored hash is SHA-256 of its stored bytes is listed: a
        proof is remembered by hash, so it must be a proof for the bytes of that hash (the chain
        check, which :meth:`check` relies on, may not have run yet). An untagged entry, one of an
        unknown key, or one whose statement cannot be built is left out: :meth:`check` names it.
        """
        claims: list[TagClaim] = []
        sha256, seen_before, keys = hashlib.sha256, self._seen, keyring.verify_keys
        for entry in entries:
            if entry.tag is None or entry.tag_key is None:
                continue
            seen = _seen_key(entry, derivation)
            key = keys.get(entry.tag_key)
            if seen in seen_before or key is None or sha256(entry.canonical).hexdigest() != entry.hash:
                continue
            try:
                claims.append((seen, key, base64.b64decode(entry.tag, validate=True),
                               _tag_statement_of(entry, derivation)))
            except (ValueError, TypeError):
                continue
        return claims

    def proven(self, seen: Iterable[tuple[str, ...]]) -> None:
        """Remember tags verified (keys of :meth:`unproven`'s claims that :func:`prove_tags`
        returned). Bounded: the whole cache is dropped when full."""
        for one in seen:
            if len(self._seen) >= _CACHE_LIMIT:
                self._seen.clear()
            self._seen.add(one)


TagClaim = tuple[tuple[str, ...], Any, bytes, bytes]
"""A tag to verify: (its :class:`TagCache` key, the Ed25519 public key, the signature, the
signed statement)."""


def prove_tags(claims: Sequence[TagClaim]) -> list[tuple[str, ...]]:
    """The cache keys of ``claims`` whose signature verifies (Ed25519 through ``cryptography``,
    which releases the GIL while it verifies: callers run this on a pool of threads). A claim
    that does not verify is left out; :meth:`TagCache.check` names it later.

    Args:
        claims: from :meth:`TagCache.unproven`.
    """
    from cryptography.exceptions import InvalidSignature  # noqa: PLC0415

    proved: list[tuple[str, ...]] = []
    for seen, key, signature, statement in claims:
        try:
            key.verify(signature, statement)
        except (InvalidSignature, ValueError, TypeError):
            continue
        proved.append(seen)
    return proved


def _seen_key(entry: JournalEntry, derivation: Derivation | None) -> tuple[str, ...]:
    """The :class:`TagCache` key of ``entry``'s tag: its hash, key id, tag and, under a binding
    derivation, the journal id and SAGA_OPENED hash the statement binds."""
    bound = derivation if derivation is not None and derivation.binds else None
    return (entry.hash, entry.tag_key, entry.tag,  # type: ignore[return-value]
            *((bound.journal_id, bound.opened_hash) if bound is not None else ()))


def _tag_statement_of(entry: JournalEntry, derivation: Derivation | None) -> bytes:
    """The statement ``entry``'s tag signs under ``derivation``.

    Raises:
        ValueError: the bytes are not an entry's, or an id is not lowercase hex.
    """
    unlinked = unlinked_bytes(entry.canonical, entry.seq, entry.prev_hash)
    bound = derivation if derivation is not None and derivation.binds else None
    if bound is not None:
        return statement_for(unlinked, entry.tag_key, entry.phase, entry.seq, bound)  # type: ignore[arg-type,return-value]
    return tag_statement(unlinked, entry.tag_key)  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class Adoption:
    """What the journal's signed keyring adoption lists: each saga's head when it was adopted.

    Only the *first* complete adoption counts (:func:`read_adoption`): a later one would vouch
    for untagged entries written after the first, which is what an INSERT-only writer forges.
    """

    heads: Mapping[str, tuple[ChainHead, ...]]
    """saga id -> the head the adoption listed for it (one)."""
    adoption_id: str | None = None
    """The adoption that counts (``None``: none does, e.g. only an incomplete one)."""
    notes: tuple[str, ...] = ()
    """What was ignored in the reserved saga, and why (rows that are not signed adoption parts,
    incomplete or later adoptions): ``journal verify`` prints them."""

    @property
    def adopted(self) -> bool:
        """Whether an adoption counts (untagged entries up to its heads are "before the keyring")."""
        return self.adoption_id is not None

    def before_keyring(self, saga_id: str) -> int:
        """The last seq of ``saga_id`` that may be untagged (0: none)."""
        return max((h.seq for h in self.heads.get(saga_id, ())), default=0)


def _part_problem(entry: JournalEntry, keyring: Keyring, cache: TagCache) -> str | None:
    """Why ``entry`` is not a signed KEYRING_ADOPTED part, or ``None``. Checked on the entry
    alone (its bytes, its columns, its tag), not through the reserved saga's chain: a garbage
    row an INSERT-only writer adds there cannot void a signed adoption."""
    phase = entry.phase.value if isinstance(entry.phase, Phase) else str(entry.phase)
    if entry.phase is not Phase.KEYRING_ADOPTED:
        return f"a {phase!r} row, not a KEYRING_ADOPTED part"
    problem = _row_problem(entry, keyring, cache)
    if problem is not None:
        return problem
    payload = entry.payload if isinstance(entry.payload, dict) else {}
    if not (isinstance(payload.get("adoption"), str) and _int(payload.get("part"))
            and _int(payload.get("parts")) and isinstance(payload.get("heads"), dict)):
        return "malformed adoption part"
    return None


def _row_problem(entry: JournalEntry, keyring: Keyring, cache: TagCache) -> str | None:
    """Why a row of the reserved saga is not an entry the journal wrote under a key of
    ``keyring`` (its bytes, hash and columns agree; its tag verifies), or ``None``."""
    phase = entry.phase.value if isinstance(entry.phase, Phase) else str(entry.phase)
    if entry.tag is None or entry.tag_key is None:
        return f"{phase} without a tag"
    try:
        obj = parse_json(entry.canonical)
        consistent = (isinstance(obj, dict) and set(obj) == set(HASHED_FIELDS)
                      and sha256_hex(entry.canonical) == entry.hash
                      and all(obj[k] == v for k, v in entry.hashed_object().items() if k != "payload"))
    except Exception:  # noqa: BLE001 - any unreadable row is garbage, reported as such
        consistent = False
    if not consistent or entry.saga_id != ADOPTION_SAGA:
        return "its bytes, hash and columns disagree (not an entry the journal wrote)"
    return cache.check(entry, keyring)


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def read_adoption(entries: Sequence[JournalEntry], keyring: Keyring,
                  cache: TagCache | None = None) -> Adoption | None:
    """The keyring adoption recorded in the entries of :data:`ADOPTION_SAGA` .

    Each KEYRING_ADOPTED part is authenticated on its own (bytes, columns, tag by a key of
    ``keyring``), so other rows of the reserved saga (garbage an INSERT-only writer adds, which
    breaks that saga's chain and is reported BROKEN there) do not void it. Of the *complete*
    adoptions (every part present), only the first (by the seq its last part was written at)
    counts: a later one, e.g. written by a version that allowed re-adoption, is ignored, since
    it would list untagged entries written after the first. Everything ignored is in ``notes``.

    Returns:
        The :class:`Adoption` (``adopted`` false when none counts), or ``None`` when the
        reserved saga holds no row.
    """
    if not entries:
        return None
    cache = cache or TagCache()
    notes: list[str] = []
    parts: dict[str, dict[int, tuple[int, Mapping[str, Any]]]] = {}
    counts: dict[str, int] = {}
    for entry in entries:
        if entry.phase in KEYRING_EVENTS:
            continue  # roles and revocations: read_key_roles
        problem = _part_problem(entry, keyring, cache)
        if problem is not None:
            notes.append(f"{ADOPTION_SAGA} seq {entry.seq} ignored: {problem}")
            continue
        payload = entry.payload
        parts.setdefault(payload["adoption"], {}).setdefault(payload["part"], (entry.seq, payload["heads"]))
        counts[payload["adoption"]] = payload["parts"]
    complete: list[tuple[int, str]] = []
    for adoption, got in parts.items():
        if set(got) != set(range(1, counts[adoption] + 1)):
            notes.append(f"adoption {adoption} ignored: incomplete ({len(got)} of {counts[adoption]} "
                         "parts), it lists nothing as before the keyring")
            continue
        complete.append((max(seq for seq, _ in got.values()), adoption))
    if not complete:
        return Adoption({}, None, tuple(notes))
    complete.sort()
    first = complete[0][1]
    notes += [f"adoption {later} ignored: only the first adoption ({first}) lists what is before "
              "the keyring (a later one would vouch for untagged entries written after it)"
              for _, later in complete[1:]]
    heads: dict[str, tuple[ChainHead, ...]] = {}
    for _, listed in sorted(parts[first].values()):
        for saga_id, head in listed.items():
            if isinstance(head, dict) and isinstance(head.get("seq"), int) \
                    and isinstance(head.get("hash"), str):
                heads[saga_id] = (ChainHead(head["seq"], head["hash"]),)
    return Adoption(heads, first, tuple(notes))


def untagged_after_tagged(entries: Sequence[JournalEntry]) -> JournalEntry | None:
    """The first untagged entry that follows a tagged one in a saga (``None``: none). No writer
    goes back to writing untagged entries once a keyring tags its saga: an adoption never lists
    such an entry as "before the keyring"."""
    tagged = False
    for entry in entries:
        if entry.tag is not None and entry.tag_key is not None:
            tagged = True
        elif tagged:
            return entry
    return None


async def adopt_keyring(journal: Journal, keyring: Keyring, *, part_size: int = ADOPTION_PART) -> list[JournalEntry]:
    """Adopt ``keyring`` on a journal that holds untagged entries: verify every saga's
    chain and structure and that no untagged entry follows a tagged one, then journal
    KEYRING_ADOPTED entries (tagged) in :data:`ADOPTION_SAGA` listing every saga's head. From
    then on, under the keyring, untagged entries up to those heads are reported
    "unauthenticated, before the keyring" and every other untagged entry is refused. Run it
    once every writer has the keyring (their entries are then tagged). **Once**: a journal
    whose reserved saga already holds a complete adoption signed by a key of ``keyring`` is
    refused (a second adoption would list the untagged entries written since the first:
    exactly what an INSERT-only writer forges).

    Args:
        journal: the journal.
        keyring: the keyring to adopt; it must hold a signing key (it tags the marker).
        part_size: heads per KEYRING_ADOPTED entry.

    Returns:
        The KEYRING_ADOPTED entries written.

    Raises:
        ConfigurationError: the keyring cannot sign.
        SagaStateError: the keyring is already adopted on this journal: nothing written.
        EvidenceError: a saga does not verify (its chain or its structure) or holds an untagged
            entry after a tagged one: nothing written; anchor or repair it first (adopting
            would vouch for it).
        JournalError: the journal could not be read or written.
    """
    from ..errors import EvidenceError, SagaStateError  # noqa: PLC0415
    from .structure import structure_problem  # noqa: PLC0415

    if not keyring.can_sign:
        raise ConfigurationError("adopting a keyring needs a keyring with a signing key")
    journal = signing_view(journal, keyring)
    existing = read_adoption(await journal.entries(ADOPTION_SAGA), keyring)
    if existing is not None and existing.adopted:
        raise SagaStateError(
            f"the keyring is already adopted on this journal (adoption {existing.adoption_id}, "
            f"{len(existing.heads)} saga(s) listed); a second adoption would vouch for untagged "
            "entries written since, so it is refused: nothing written. An untagged entry after "
            "the adoption stays BROKEN under the keyring (docs/threat-model.md, keyring adoption)")
    heads: dict[str, dict[str, Any]] = {}
    for saga_id in await journal.saga_ids():
        if saga_id == ADOPTION_SAGA:
            continue
        entries = await journal.entries(saga_id)
        result = verify_entries(saga_id, entries)
        problem = None if not result.ok else structure_problem(entries)
        late = untagged_after_tagged(entries) if result.ok and problem is None else None
        if late is not None:
            raise EvidenceError(
                f"saga {saga_id}: seq {late.seq} carries no tag but follows a tagged entry (no "
                "writer does that: a forgery, or a writer still without the keyring); not "
                "listing it as before the keyring: nothing written", saga_id=saga_id,
                bad_seq=late.seq, fault=ChainFault.UNAUTHENTICATED.value)
        if not result.ok or problem is not None:
            seq = result.bad_seq if not result.ok else problem[0]  # type: ignore[index]
            raise EvidenceError(
                f"saga {saga_id} does not verify (first bad seq {seq}); not adopting a keyring "
                "over it: nothing written", saga_id=saga_id, bad_seq=seq,
                fault=result.fault.value if result.fault else ChainFault.STRUCTURE.value)
        if entries:
            heads[saga_id] = {"seq": entries[-1].seq, "hash": entries[-1].hash}
    items = list(heads.items())
    chunks = [dict(items[i:i + part_size]) for i in range(0, len(items), part_size)] or [{}]
    adoption = f"{utc_stamp()}:{uuid.uuid4().hex[:12]}"
    written = []
    for part, chunk in enumerate(chunks, start=1):
        written.append(await journal.append(
            ADOPTION_SAGA, Phase.KEYRING_ADOPTED, write_key=f"adopt:{adoption}:{part}",
            payload={"adoption": adoption, "part": part, "parts": len(chunks), "heads": chunk},
        ))
    return written


def resolution_fields(saga_id: str, payload: Mapping[str, Any], time: str, key_id: str) -> dict[str, Any]:
    """The fields of a RESOLVED entry's signed statement (:data:`RESOLUTION_STATEMENT`)."""
    return {"saga_id": saga_id, "target_seq": payload.get("target_seq"),
            "target": str(payload.get("target")), "answer": str(payload.get("answer")),
            "resolver": str(payload.get("resolver")), "reason": str(payload.get("reason")),
            "time": time, "key_id": key_id}


def sign_resolution(keyring: Keyring, saga_id: str, payload: Mapping[str, Any]) -> dict[str, str]:
    """Sign a human's answer (the RESOLVED payload ``{"target_seq", "target", "answer",
    "resolver", "reason"}``); the result goes into the payload as ``signature``.

    Raises:
        ConfigurationError: the keyring has no signing key.
    """
    if keyring.signing_key is None:
        raise ConfigurationError("signing a resolution needs a keyring with a signing key")
    time = utc_stamp()
    fields = resolution_fields(saga_id, payload, time, keyring.signing_key[0])
    key_id, signature = keyring.sign(RESOLUTION_STATEMENT, fields)
    return {"key_id": key_id, "time": time, "signature": signature}


def _resolution_problem(entry: JournalEntry, keyring: Keyring, allowed: frozenset[str] | None) -> str | None:
    payload = entry.payload if isinstance(entry.payload, dict) else {}
    signed = payload.get("signature")
    if signed is None:
        return "RESOLVED entry carries no signature (a human's answer is signed under a keyring)"
    return signed_record_problem(
        keyring, RESOLUTION_STATEMENT, "resolution", signed,
        lambda time, key_id: resolution_fields(entry.saga_id, payload, time, key_id), allowed,
    )


def _late_key_problem(entry: JournalEntry, entries: Sequence[JournalEntry]) -> str | None:
    """Why a tagged late entry is not its run's (``None``: it is, or it is not late): a late
    outcome is accepted only under the key that tagged its run's RUN_STARTED (the entry its
    fence names), the one entry a closed saga accepts included (``core.append_rule.reopens``).
    ``entries`` are chain-verified: the entry at seq ``n`` is ``entries[n - 1]``."""
    payload = entry.payload if isinstance(entry.payload, dict) else {}
    fence = payload.get(FENCE_KEY)
    if payload.get(LATE_KEY) is not True or type(fence) is not int or not 0 < fence < entry.seq:
        return None
    run = entries[fence - 1]
    if run.phase is not Phase.RUN_STARTED or run.tag_key is None or run.tag_key == entry.tag_key:
        return None
    return (f"late entry tagged by key {entry.tag_key!r}, but its run (RUN_STARTED seq {fence}) "
            f"by {run.tag_key!r}: a late outcome is accepted only under its run's key")


def read_key_roles(entries: Sequence[JournalEntry], keyring: Keyring, cache: TagCache,
                   decision_keys: frozenset[str] | None = None) -> KeyRoles:
    """The keys' roles and validity from the reserved saga's keyring events
    (``core.key_roles.read_roles``): each event authenticated on its own (bytes, columns, a tag
    by a key of ``keyring``), so garbage rows there void nothing.

    Args:
        entries: the entries of :data:`ADOPTION_SAGA` (other phases are skipped).
        keyring: the verify keys and their out-of-band admins (``Keyring.admin_keys``).
        cache: tags verified already.
        decision_keys: the ``decision_keys`` setting (``None``: absent).
    """
    return read_roles(entries, keyring.admin_keys, decision_keys,
                      lambda entry: _row_problem(entry, keyring, cache))


def role_fault(entry: JournalEntry, roles: KeyRoles, checkpoint_times: Sequence[tuple[int, str]] = ()) -> str | None:
    """Why ``entry``'s tag key, or the key of its decision or resolution statement, may not
    sign it (``None``: they may). The table is ``core.key_roles``: a decision maker's key never
    tags a run entry, a run writer's never an APPROVED, only a keyring admin tags keyring events.
    A revoked key's tag or statement counts only up to its boundary
    (``KeyRoles.boundary``: the saga's newest signed checkpoint dated at or before the
    revocation; in the reserved saga, the revocation itself).

    Args:
        entry: a tagged entry whose tag (and statement signature) verified.
        roles: the keys' roles and validity.
        checkpoint_times: the saga's verified signed checkpoints as ``(seq, time)``.
    """
    phase = entry.phase.value if isinstance(entry.phase, Phase) else str(entry.phase)
    reserved = entry.saga_id == ADOPTION_SAGA
    checks = [(str(entry.tag_key), tag_roles(entry), "tagged")]
    signer = statement_key(entry)
    if signer is not None:
        checks.append((signer, frozenset({Role.DECISION_MAKER}), "its statement signed"))
    for key_id, needed, how in checks:
        if not needed & roles.roles_of(key_id):
            what = "decisions" if needed == {Role.DECISION_MAKER} else f"a {phase}"
            return (f"{phase} {how} by key {key_id!r}, which may not sign {what} ({roles.describe(key_id)}; "
                    f"needed: {' or '.join(sorted(r.value for r in needed))}; docs/threat-model.md, key roles)")
        boundary = roles.boundary(key_id, checkpoint_times, reserved)
        if boundary is not None and entry.seq > boundary:
            return (f"{phase} {how} by key {key_id!r}, revoked at {roles.revoked[key_id].revoked_at} "
                    f"({roles.revoked[key_id].reason}); seq {entry.seq} is after seq {boundary}, the "
                    "last one a signed checkpoint before the revocation covers")
    return None


def authenticity_fault(
    saga_id: str, entries: Sequence[JournalEntry], keyring: Keyring, adoption: Adoption | None,
    cache: TagCache, decision_keys: frozenset[str] | None = None, roles: KeyRoles | None = None,
    checkpoint_times: Sequence[tuple[int, str]] = (), journal_id: str | None = None,
) -> tuple[tuple[int, ChainFault, str] | None, int]:
    """Check a chain-verified saga's tags (under its keyring adoption), their keys' roles and
    validity (:func:`role_fault`) and RESOLVED signatures.

    Args:
        saga_id: the saga.
        entries: its entries, in ``seq`` order, chain-verified.
        keyring: the verify keys.
        adoption: the journal's keyring adoptions (``None``: none, every entry must be tagged).
        cache: tags verified already.
        decision_keys: the ``decision_keys`` setting (``None``: absent); used when ``roles`` is
            ``None``.
        roles: the keys' roles and validity (``None``: the default, ``core.key_roles``).
        checkpoint_times: the saga's verified signed checkpoints as ``(seq, time)``.
        journal_id: the id of the journal the saga is read from: a saga of derivation 2 is
            verified bound to it (``core.identity``); ``None``: derivation 1 for every saga.

    Returns:
        ``(fault, before)``: the first fault as ``(seq, ChainFault, why)`` or ``None``, and how
        many untagged entries the adoption lists as written before the keyring.
    """
    roles = roles if roles is not None else KeyRoles(None, decision_keys, keyring.admin_keys)
    allowed = roles.holders(Role.DECISION_MAKER, keyring.verify_keys)
    listed: Iterable[ChainHead] = adoption.heads.get(saga_id, ()) if adoption is not None else ()
    adopted = adoption is not None and adoption.adopted
    for head in listed:
        anchored = check_anchor(saga_id, entries, head)
        if anchored is not None and anchored.bad_seq is not None and anchored.fault is not None:
            return (anchored.bad_seq, anchored.fault,
                    f"keyring adoption: {anchored.detail}"), 0
    before = adoption.before_keyring(saga_id) if adoption is not None and saga_id != ADOPTION_SAGA else 0
    untagged_before = 0
    derivation = derivation_of(entries, journal_id)
    for entry in entries:
        if entry.tag is None or entry.tag_key is None:
            if entry.seq <= before:
                untagged_before += 1
            else:
                return (entry.seq, ChainFault.UNAUTHENTICATED,
                        f"{entry.phase.value if isinstance(entry.phase, Phase) else entry.phase} "
                        "carries no tag" + (" and is after the keyring's adoption" if adopted
                                           else " (no keyring adoption lists it)")), untagged_before
        else:
            problem = (cache.check(entry, keyring, derivation) or _late_key_problem(entry, entries)
                       or role_fault(entry, roles, checkpoint_times))
            if problem is not None:
                return (entry.seq, ChainFault.BAD_SIGNATURE, problem), untagged_before
        if entry.phase is Phase.RESOLVED and entry.seq > before:
            problem = _resolution_problem(entry, keyring, allowed)
            if problem is not None:
                return (entry.seq, ChainFault.BAD_SIGNATURE, problem), untagged_before
    return None, untagged_before


async def authenticated_entries(saga: Any) -> list[JournalEntry]:
    """A live saga's entries for its verdict (``core.saga.verdict``): through its evidence's
    full check when a keyring is configured (tags, structure, signatures), so a guardrail never
    reads a forged entry as the saga's; the entries as stored otherwise (the verdict reads the
    journal on the run's own path, where the chain check is not paid).

    Args:
        saga: a live saga (its ``journal``, ``saga_id`` and, optionally, ``evidence``).

    Raises:
        EvidenceError: the saga does not verify under the keyring (first bad seq named).
        JournalError: the journal could not be read.
    """
    evidence = getattr(saga, "evidence", None)
    if evidence is not None and getattr(evidence, "keyring", None) is not None:
        return list(await evidence.verified_entries(saga.journal, saga.saga_id))
    return list(await saga.journal.entries(saga.saga_id))
