"""Writing keyring events: a keyring admin gives a key its roles or revokes it.

The events are KEY_ROLES and KEY_REVOKED entries in the reserved saga
(``core.authenticity.ADOPTION_SAGA``), tagged by the admin's key; what they mean and how
``verify`` reads them: ``core.key_roles``. ``sagacity audit keys`` calls these.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable

from ..errors import ConfigurationError
from .authenticity import ADOPTION_SAGA, TagCache, read_key_roles, signing_view
from .entries import JournalEntry, Phase
from .journal import Journal, utc_stamp
from .key_roles import KeyRoles, Role, is_stamp
from .signing import Keyring

__all__ = ["grant_roles", "journal_key_roles", "revoke_key"]


async def journal_key_roles(journal: Journal, keyring: Keyring,
                            decision_keys: frozenset[str] | None = None) -> KeyRoles:
    """The roles and validity the journal's keyring events give under ``keyring``.

    Raises:
        JournalError: the journal could not be read.
    """
    return read_key_roles(await journal.entries(ADOPTION_SAGA), keyring, TagCache(), decision_keys)


def _check_stamp(stamp: str | None) -> None:
    if stamp is not None and not is_stamp(stamp):
        raise ConfigurationError(f"{stamp!r} is not a UTC stamp YYYY-MM-DDTHH:MM:SS.ffffffZ")


async def _admin_journal(journal: Journal, admin: Keyring, key_id: str) -> Journal:
    """``journal`` as the admin writes to it, after checking that the admin may."""
    if admin.signing_key is None:
        raise ConfigurationError("a keyring event is signed by a keyring-admin key: this keyring holds no private key")
    if key_id not in admin.verify_keys:
        raise ConfigurationError(f"no public key {key_id!r} in the keyring: add KEY_ID.pub first")
    signer = admin.signing_key[0]
    roles = await journal_key_roles(journal, admin)
    if Role.KEYRING_ADMIN not in roles.roles_of(signer) or signer in roles.revoked:
        raise ConfigurationError(
            f"key {signer!r} is not a keyring admin ({roles.describe(signer)}): a keyring event "
            "is signed by a key the keyring directory's ADMINS file names (or one an admin made "
            "admin); nothing written")
    return signing_view(journal, admin)


async def grant_roles(journal: Journal, admin: Keyring, key_id: str, roles: Iterable[str | Role],
                      *, reason: str = "", valid_from: str | None = None) -> JournalEntry:
    """Journal KEY_ROLES: ``key_id`` has exactly ``roles`` from now on (from the first such event,
    every key's roles are explicit: give each key in use its roles).

    Args:
        journal: the journal.
        admin: a keyring whose signing key is a keyring admin.
        key_id: a key of the keyring.
        roles: role names (``core.key_roles.Role`` values); empty: no role.
        reason: why, kept in the entry.
        valid_from: UTC stamp (``YYYY-MM-DDTHH:MM:SS.ffffffZ``) shown as the key's validity start;
            ``None``: now.

    Returns:
        The KEY_ROLES entry written.

    Raises:
        ConfigurationError: the signing key is not an admin, ``key_id`` has no public key here, or
            a role name is unknown: nothing written.
        JournalError: the journal could not be written.
    """
    _check_stamp(valid_from)
    try:
        names = sorted({Role(r).value for r in roles})
    except ValueError as exc:
        raise ConfigurationError(f"unknown role: {exc} (known: {', '.join(r.value for r in Role)})") from exc
    view = await _admin_journal(journal, admin, key_id)
    return await view.append(ADOPTION_SAGA, Phase.KEY_ROLES, write_key=f"key-roles:{uuid.uuid4().hex}",
                             payload={"key_id": key_id, "roles": names,
                                      "valid_from": valid_from or utc_stamp(), "reason": reason})


async def revoke_key(journal: Journal, admin: Keyring, key_id: str, *, reason: str,
                     revoked_at: str | None = None) -> JournalEntry:
    """Journal KEY_REVOKED for ``key_id``: its tags and signatures on a saga's entries after
    that saga's newest signed checkpoint dated at or before ``revoked_at`` are refused from now
    on; what such a checkpoint covers stays valid. Sign checkpoints of every saga the key wrote
    before revoking it (``sagacity audit checkpoint``), or its uncheckpointed entries are refused.

    Args:
        journal: the journal.
        admin: a keyring whose signing key is a keyring admin.
        key_id: the key to revoke (a key of the keyring).
        reason: why (required: it is printed with every refusal).
        revoked_at: UTC stamp from which the key is revoked (e.g. when it was stolen); ``None``:
            now.

    Returns:
        The KEY_REVOKED entry written.

    Raises:
        ConfigurationError: no reason, the signing key is not an admin, or ``key_id`` has no
            public key here: nothing written.
        JournalError: the journal could not be written.
    """
    if not reason.strip():
        raise ConfigurationError("a revocation needs a reason")
    _check_stamp(revoked_at)
    view = await _admin_journal(journal, admin, key_id)
    return await view.append(ADOPTION_SAGA, Phase.KEY_REVOKED, write_key=f"key-revoked:{uuid.uuid4().hex}",
                             payload={"key_id": key_id, "revoked_at": revoked_at or utc_stamp(),
                                      "reason": reason})
