"""Settings shared by the facade and the CLI: the ``SAGACITY_*`` variables, where the embedded
journal lives by default, and the evidence policy (checkpoints, keyring, decision keys) they
describe (:func:`evidence_from`).

Every setting comes from an argument first, then a ``SAGACITY_*`` environment variable, then the
default here. Which backend a location names is ``stores``' business.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .core.checkpoints import CheckpointStore
    from .core.evidence import Evidence

__all__ = [
    "CHECKPOINTS_ENVVAR",
    "DB_ENVVAR",
    "DECISION_KEYS_ENVVAR",
    "DEFAULT_JOURNAL_PATH",
    "KEYRING_ENVVAR",
    "SIGNING_KEY_ENVVAR",
    "checkpoint_store_at",
    "evidence_from",
    "journal_path",
]

DB_ENVVAR = "SAGACITY_DB"
"""Environment variable naming the SQLite journal file."""

DEFAULT_JOURNAL_PATH = "sagacity.db"
"""Journal file (in the current directory) used when neither an argument nor ``SAGACITY_DB``
names one."""


def journal_path(explicit: str | None = None) -> str:
    """The journal path: ``explicit``, else ``$SAGACITY_DB``, else :data:`DEFAULT_JOURNAL_PATH`."""
    return explicit or os.environ.get(DB_ENVVAR) or DEFAULT_JOURNAL_PATH


CHECKPOINTS_ENVVAR = "SAGACITY_CHECKPOINTS"
"""Environment variable naming the signed-checkpoint directory or ``postgresql://`` URI (no
checkpoints when unset)."""

KEYRING_ENVVAR = "SAGACITY_KEYRING"
"""Environment variable naming the keyring directory (``KEY_ID.pub`` / ``KEY_ID.key`` files)."""

SIGNING_KEY_ENVVAR = "SAGACITY_SIGNING_KEY_ID"
"""Environment variable naming which private key of the keyring signs (when it holds several)."""

DECISION_KEYS_ENVVAR = "SAGACITY_DECISION_KEYS"
"""Environment variable listing (comma-separated) the key ids allowed to sign decisions: the
decision makers of a keyring without role events (``core.key_roles``)."""


def checkpoint_store_at(location: str | Path) -> CheckpointStore:
    """The checkpoint store ``location`` names: a ``postgresql://`` / ``postgres://`` URI is a
    :class:`~sagacity_agents.backends.postgres.checkpoints.PostgresCheckpointStore` (its
    ``sagacity_schema`` query parameter names the schema, default ``sagacity_checkpoints``),
    anything else a
    :class:`~sagacity_agents.backends.directory.checkpoints.DirectoryCheckpointStore`.

    Raises:
        ConfigurationError: a URI without the ``postgres`` extra, or a bad schema name.
        OSError: the directory cannot be created.
    """
    from .stores import open_checkpoint_store  # noqa: PLC0415 - keeps settings light

    return open_checkpoint_store(location)


def evidence_from(
    checkpoints: Any = None, keyring: Any = None, signing_key_id: str | None = None,
    decision_keys: Any = None,
) -> Evidence:
    """The :class:`~sagacity_agents.core.evidence.Evidence` policy from arguments, else
    ``$SAGACITY_CHECKPOINTS`` / ``$SAGACITY_KEYRING`` / ``$SAGACITY_SIGNING_KEY_ID``.

    Args:
        checkpoints: a ``CheckpointStore``, a directory path, a ``postgresql://`` URI
            (:func:`checkpoint_store_at`), or ``None`` (environment, else none).
        keyring: a ``Keyring``, a keyring directory path, or ``None`` (environment, else none).
        signing_key_id: which private key of a keyring directory signs.
        decision_keys: key ids allowed to sign decisions (an iterable, or a comma-separated
            string); ``None``: ``$SAGACITY_DECISION_KEYS``, else any key of the keyring. In a
            journal without keyring events these are its decision makers (every key stays a run
            writer); once roles are journaled they narrow the ``decision_maker`` keys
            (``core.key_roles``).

    Raises:
        ConfigurationError: a keyring that cannot be loaded, or checkpoints without a keyring.
    """
    from .core.evidence import Evidence  # noqa: PLC0415 - keeps settings light
    from .core.signing import Keyring  # noqa: PLC0415

    checkpoints = checkpoints or os.environ.get(CHECKPOINTS_ENVVAR) or None
    keyring = keyring or os.environ.get(KEYRING_ENVVAR) or None
    if isinstance(checkpoints, (str, Path)):
        checkpoints = checkpoint_store_at(checkpoints)
    if isinstance(keyring, (str, Path)):
        keyring = Keyring.load(keyring, signing_key_id=signing_key_id or os.environ.get(SIGNING_KEY_ENVVAR) or None)
    decision_keys = decision_keys or os.environ.get(DECISION_KEYS_ENVVAR) or None
    if isinstance(decision_keys, str):
        decision_keys = [k.strip() for k in decision_keys.split(",") if k.strip()]
    allowed = frozenset(decision_keys) if decision_keys is not None else None
    return Evidence(checkpoints=checkpoints, keyring=keyring, decision_keys=allowed)
