"""Verifying what a journal says: the hash chain, its anchors (heads), signed checkpoints, keys.

::

    from sagacity_agents.evidence import verify_journal
    results = await verify_journal(journal)    # or: sagacity journal verify --db journal.db
    bad = [r for r in results if not r.ok]     # each names its saga, first bad seq and fault

:func:`verify_journal` / :func:`verify_entries` re-hash the stored bytes of every entry and
check each link and column; :func:`heads_of` exports each chain's head to keep where the
journal's writer cannot change it, :func:`heads_to_json` / :func:`heads_from_json` read and
write that export. A :class:`Keyring` holds the keys that tag entries and sign decisions and
checkpoints; :class:`Evidence` is the one check run before anything acts on a saga's past.
Each key has :class:`Role` s and a validity (:class:`KeyRoles`), journaled by a keyring admin with
:func:`grant_roles` and :func:`revoke_key` and read back with :func:`journal_key_roles`.
"""

from __future__ import annotations

from .core.chain import (ChainFault, ChainHead, VerifyResult, heads_from_json, heads_of,
                         heads_to_json, verify_entries, verify_journal)
from .core.checkpoints import Checkpoint
from .core.evidence import Evidence
from .core.key_roles import KeyRoles, Role
from .core.keyring_events import grant_roles, journal_key_roles, revoke_key
from .core.signing import Keyring

__all__ = ["ChainFault", "ChainHead", "Checkpoint", "Evidence", "KeyRoles", "Keyring", "Role",
           "VerifyResult", "grant_roles", "heads_from_json", "heads_of", "heads_to_json",
           "journal_key_roles", "revoke_key", "verify_entries", "verify_journal"]
