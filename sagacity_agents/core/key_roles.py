"""Key roles and validity: which keyring key may sign which entry, and until when.

A keyring key has roles (docs/threat-model.md, "Key roles"):

* ``run_writer``: tags every entry a run, a resume or a recovery writes (every phase not named
  below, CHECKED, REQUEST_VOIDED and phases a later version adds included);
* ``decision_maker``: signs the statements of APPROVED, REJECTED and RESOLVED entries and tags
  those entries (a REJECTED the run writes itself, for arguments that do not validate, may
  be tagged by a run writer; a RESOLVED carrying ``undo_data`` must be tagged by a run writer:
  the signed statement does not cover the undo data);
* ``checkpoint_signer``: signs checkpoints (``core.checkpoints``) and tags the access log's
  entries (DATA_REVEALED, DATA_ERASED in the reserved saga ``entries.ACCESS_SAGA``,
  ``core.access_log``): who saw or destroyed sensitive values is evidence of the same weight;
* ``keyring_admin``: tags keyring events (KEY_ROLES, KEY_REVOKED in the reserved saga). Kept
  offline. The first admins are named out of band, in the keyring directory's ``ADMINS`` file
  (``core.signing.Keyring.admin_keys``): an entry in the journal cannot make its own signer an
  admin.

**The default, for keyrings with no KEY_ROLES event** (every keyring before roles existed):
every key is a run writer and a checkpoint signer, and a decision maker when ``decision_keys``
names it (any key when the setting is absent), so every journal written before verifies as it
did. An ``ADMINS`` key is an admin only. Once a valid KEY_ROLES is journaled, roles are
explicit: a key has the roles of its newest KEY_ROLES and a key none names has none (the
``decision_keys`` setting, when given, still narrows who decides).

**Validity.** KEY_ROLES records ``valid_from`` (shown by ``audit keys list``; entries are not
judged by their ``recorded_at``, which their writer chooses). KEY_REVOKED records
``revoked_at``: in a saga, the revoked key's tags and signatures on entries after the saga's
newest signed checkpoint dated at or before ``revoked_at`` are refused (its checkpoints dated
after it too); what the checkpoint covers stays valid. In the reserved saga, the revocation's
own seq is the boundary.

Pure: the events are authenticated by the caller (``core.authenticity.read_key_roles``).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .entries import JournalEntry, Phase

__all__ = ["KEYRING_EVENTS", "KeyRoles", "Revocation", "Role", "is_stamp", "keyring_event_problem",
           "read_roles", "statement_key", "tag_roles"]


class Role(str, enum.Enum):
    """What a key may sign. Stored as its value in KEY_ROLES payloads."""

    RUN_WRITER = "run_writer"
    """Tags run entries (every phase but those below)."""
    DECISION_MAKER = "decision_maker"
    """Signs APPROVED, REJECTED and RESOLVED statements and tags those entries."""
    CHECKPOINT_SIGNER = "checkpoint_signer"
    """Signs checkpoints; tags the access log's entries (DATA_REVEALED, DATA_ERASED)."""
    KEYRING_ADMIN = "keyring_admin"
    """Tags keyring events (KEY_ROLES, KEY_REVOKED)."""


KEYRING_EVENTS = frozenset({Phase.KEY_ROLES, Phase.KEY_REVOKED})
"""The phases that change roles and validity."""

_DECIDE = frozenset({Role.DECISION_MAKER})
_TAGS: Mapping[Any, frozenset[Role]] = {
    Phase.APPROVED: _DECIDE,
    Phase.REJECTED: frozenset({Role.DECISION_MAKER, Role.RUN_WRITER}),
    Phase.RESOLVED: _DECIDE,
    Phase.KEY_ROLES: frozenset({Role.KEYRING_ADMIN}),
    Phase.KEY_REVOKED: frozenset({Role.KEYRING_ADMIN}),
    # Adoptions were written by whichever key adopted, before admins existed.
    Phase.KEYRING_ADOPTED: frozenset({Role.KEYRING_ADMIN, Role.RUN_WRITER}),
    Phase.DATA_REVEALED: frozenset({Role.CHECKPOINT_SIGNER}),
    Phase.DATA_ERASED: frozenset({Role.CHECKPOINT_SIGNER}),
}
_RUN = frozenset({Role.RUN_WRITER})
_STAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z")


def tag_roles(entry: JournalEntry) -> frozenset[Role]:
    """The roles of which one must be its tag key's for ``entry`` (contract: module docstring).

    A RESOLVED carrying ``undo_data`` needs a run writer: its signed statement does not cover
    the undo data, which a compensation acts on. An unknown phase needs a run writer."""
    if entry.phase is Phase.RESOLVED and isinstance(entry.payload, dict) and "undo_data" in entry.payload:
        return _RUN
    return _TAGS.get(entry.phase, _RUN)


def statement_key(entry: JournalEntry) -> str | None:
    """The key id of the decision or resolution statement in an APPROVED, REJECTED or RESOLVED
    entry's payload (``None``: none, or another phase)."""
    if entry.phase not in (Phase.APPROVED, Phase.REJECTED, Phase.RESOLVED) or not isinstance(entry.payload, dict):
        return None
    signed = entry.payload.get("signature")
    key_id = signed.get("key_id") if isinstance(signed, dict) else None
    return key_id if isinstance(key_id, str) else None


@dataclass(frozen=True, slots=True)
class Revocation:
    """A key's revocation, as its KEY_REVOKED says."""

    revoked_at: str
    """UTC stamp from which the key is revoked (the admin's, possibly before the event)."""
    seq: int
    """The KEY_REVOKED entry's seq in the reserved saga."""
    reason: str
    """Why, as the admin wrote it."""


@dataclass(frozen=True)
class KeyRoles:
    """Every key's roles and validity, as the keyring events (or the default) say.

    Args:
        explicit: key id -> roles given by KEY_ROLES; ``None``: no KEY_ROLES (the default).
        decision_keys: the ``decision_keys`` setting (``None``: absent).
        admins: the keyring's out-of-band admins (``Keyring.admin_keys``).
        revoked: key id -> its revocation.
        valid_from: key id -> the ``valid_from`` of its newest KEY_ROLES.
        notes: keyring events ignored, and why.
    """

    explicit: Mapping[str, frozenset[Role]] | None = None
    decision_keys: frozenset[str] | None = None
    admins: frozenset[str] = frozenset()
    revoked: Mapping[str, Revocation] = field(default_factory=dict)
    valid_from: Mapping[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    def roles_of(self, key_id: str) -> frozenset[Role]:
        """The roles of ``key_id`` (validity aside)."""
        admin = frozenset({Role.KEYRING_ADMIN}) if key_id in self.admins else frozenset()
        if self.explicit is None:
            if admin:
                return admin
            roles = {Role.RUN_WRITER, Role.CHECKPOINT_SIGNER}
            if self.decision_keys is None or key_id in self.decision_keys:
                roles.add(Role.DECISION_MAKER)
            return frozenset(roles)
        roles = set(self.explicit.get(key_id, frozenset())) | admin
        if self.decision_keys is not None and key_id not in self.decision_keys:
            roles.discard(Role.DECISION_MAKER)
        return frozenset(roles)

    def holders(self, role: Role, key_ids: Iterable[str]) -> frozenset[str]:
        """Those of ``key_ids`` that hold ``role``."""
        return frozenset(k for k in key_ids if role in self.roles_of(k))

    def describe(self, key_id: str) -> str:
        """``roles: a, b`` or ``no role``, and the revocation, for messages."""
        roles = sorted(r.value for r in self.roles_of(key_id))
        text = f"roles: {', '.join(roles)}" if roles else "no role"
        rev = self.revoked.get(key_id)
        return text + (f"; revoked at {rev.revoked_at}: {rev.reason}" if rev else "")

    def boundary(self, key_id: str, checkpoint_times: Sequence[tuple[int, str]], reserved: bool) -> int | None:
        """The last seq of a saga that ``key_id``'s tags and signatures may still cover
        (``None``: not revoked).

        Args:
            key_id: the key.
            checkpoint_times: the saga's verified signed checkpoints as ``(seq, time)``.
            reserved: the saga is the reserved one: the revocation's own seq is the boundary.
        """
        rev = self.revoked.get(key_id)
        if rev is None:
            return None
        if reserved:
            return rev.seq
        return max((seq for seq, time in checkpoint_times if time <= rev.revoked_at), default=0)

    def checkpoint_problem(self, key_id: str, time: str) -> str | None:
        """Why a checkpoint signed by ``key_id`` at ``time`` does not count (``None``: it does)."""
        if Role.CHECKPOINT_SIGNER not in self.roles_of(key_id):
            return f"signed by key {key_id!r} ({self.describe(key_id)}), which may not sign checkpoints"
        rev = self.revoked.get(key_id)
        if rev is not None and time > rev.revoked_at:
            return f"signed by key {key_id!r} at {time}, after its revocation at {rev.revoked_at}"
        return None


def is_stamp(text: str) -> bool:
    """Whether ``text`` is a fixed-width UTC stamp ``YYYY-MM-DDTHH:MM:SS.ffffffZ`` (the
    journal's, compared as strings)."""
    return bool(_STAMP.fullmatch(text))


def keyring_event_problem(entry: JournalEntry) -> str | None:
    """Why a KEY_ROLES / KEY_REVOKED payload is malformed (``None``: it is well formed)."""
    payload = entry.payload if isinstance(entry.payload, dict) else {}
    if not isinstance(payload.get("key_id"), str) or not isinstance(payload.get("reason", ""), str):
        return "malformed keyring event (key_id, reason)"
    if entry.phase is Phase.KEY_ROLES:
        roles = payload.get("roles")
        if not isinstance(roles, list) or not all(r in Role._value2member_map_ for r in roles):
            return f"malformed KEY_ROLES: roles {roles!r} (known: {', '.join(r.value for r in Role)})"
        stamp = payload.get("valid_from")
    else:
        stamp = payload.get("revoked_at")
    if not isinstance(stamp, str) or not is_stamp(stamp):
        return f"malformed keyring event: time {stamp!r} is not a UTC stamp"
    return None


def read_roles(entries: Sequence[JournalEntry], admins: frozenset[str],
               decision_keys: frozenset[str] | None,
               authentic: Callable[[JournalEntry], str | None]) -> KeyRoles:
    """The roles and validity the reserved saga's keyring events give, in seq order.

    An event counts only when ``authentic(entry)`` finds nothing wrong (its bytes, columns and
    tag), its payload is well formed and its tag key is a keyring admin not revoked before it;
    every other event is ignored and named in ``notes`` (``verify`` also refuses it at its seq,
    ``core.authenticity.role_fault``).

    Args:
        entries: the reserved saga's entries (other phases are skipped).
        admins: the keyring's out-of-band admins.
        decision_keys: the ``decision_keys`` setting.
        authentic: why an entry is not one the journal wrote under a keyring key, or ``None``.
    """
    explicit: dict[str, frozenset[Role]] | None = None
    revoked: dict[str, Revocation] = {}
    valid_from: dict[str, str] = {}
    notes: list[str] = []
    for entry in entries:
        if entry.phase not in KEYRING_EVENTS:
            continue
        state = KeyRoles(explicit, decision_keys, admins, revoked)
        problem = authentic(entry) or keyring_event_problem(entry)
        if problem is None and Role.KEYRING_ADMIN not in state.roles_of(str(entry.tag_key)):
            problem = f"tagged by key {entry.tag_key!r} ({state.describe(str(entry.tag_key))}), not a keyring admin"
        if problem is None and entry.tag_key in revoked:
            problem = f"tagged by key {entry.tag_key!r}, revoked at seq {revoked[entry.tag_key].seq}"
        if problem is not None:
            notes.append(f"keyring event seq {entry.seq} ignored: {problem}")
            continue
        payload = entry.payload
        if entry.phase is Phase.KEY_ROLES:
            explicit = dict(explicit or {})
            explicit[payload["key_id"]] = frozenset(Role(r) for r in payload["roles"])
            valid_from[payload["key_id"]] = payload["valid_from"]
        else:
            revoked.setdefault(payload["key_id"], Revocation(payload["revoked_at"], entry.seq,
                                                             str(payload.get("reason", ""))))
    return KeyRoles(explicit, decision_keys, admins, revoked, valid_from, tuple(notes))
