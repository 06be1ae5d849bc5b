"""Signed checkpoints: a saga's head (seq and hash), signed with Ed25519, kept outside the journal.

A hash chain alone cannot show that its last entries were removed or that its tail was rewritten
and re-sealed: what remains is a valid chain. A checkpoint signed with a key the journal's
database never holds, and stored elsewhere, can: the chain must still hold an entry at the
checkpoint's ``seq`` with exactly its hash. The writer signs a checkpoint when a saga closes, at
every pause for approval, and on demand (``sagacity audit checkpoint``).

Statement signed (``core.signing.statement_bytes``)::

    {"type": "sagacity.checkpoint.v1", "saga_id": ..., "seq": N, "hash": H, "time": T, "key_id": K}

The stores are backends: ``backends.directory.checkpoints.DirectoryCheckpointStore`` (JSON Lines
files in a directory) and ``backends.postgres.checkpoints.PostgresCheckpointStore``.
"""

from __future__ import annotations

import builtins
import dataclasses
from dataclasses import asdict, dataclass
from typing import Any, Protocol, runtime_checkable

from ..errors import ConfigurationError
from .signing import Keyring

__all__ = ["CHECKPOINT_STATEMENT", "Checkpoint", "CheckpointStore", "sign_checkpoint"]

CHECKPOINT_STATEMENT = "sagacity.checkpoint.v1"
"""The ``type`` of a checkpoint statement."""


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A signed head of one saga's chain."""

    saga_id: str
    """The saga."""
    seq: int
    """Sequence number of the head entry."""
    hash: str
    """Its hash (64 lowercase hex digits)."""
    time: str
    """When it was signed (UTC, ``2026-01-01T00:00:00.000000Z``)."""
    key_id: str
    """Which key signed it."""
    signature: str
    """Ed25519 signature (base64) over the statement of the other fields."""

    def statement(self) -> dict[str, Any]:
        """The signed fields (everything but the signature)."""
        return {"saga_id": self.saga_id, "seq": self.seq, "hash": self.hash, "time": self.time,
                "key_id": self.key_id}

    def to_json(self) -> dict[str, Any]:
        """A JSON-able dict of every field."""
        return asdict(self)

    @classmethod
    def from_json(cls, data: Any) -> Checkpoint:
        """Parse the form :meth:`to_json` writes.

        Raises:
            ValueError: missing or mistyped fields.
        """
        names = ("saga_id", "seq", "hash", "time", "key_id", "signature")
        if not isinstance(data, dict) or set(data) != set(names):
            raise ValueError(f"not a checkpoint: {data!r}")
        if not isinstance(data["seq"], int) or isinstance(data["seq"], bool) or data["seq"] < 1:
            raise ValueError(f"checkpoint seq must be an integer >= 1, got {data['seq']!r}")
        if not all(isinstance(data[n], str) for n in names if n != "seq"):
            raise ValueError(f"checkpoint fields must be strings: {data!r}")
        return cls(saga_id=data["saga_id"], seq=data["seq"], hash=data["hash"], time=data["time"],
                   key_id=data["key_id"], signature=data["signature"])

    def verify(self, keyring: Keyring) -> None:
        """Check the signature.

        Raises:
            SignatureError: unknown key or a signature that does not verify.
        """
        keyring.verify(CHECKPOINT_STATEMENT, self.statement(), self.signature)


def sign_checkpoint(keyring: Keyring, saga_id: str, seq: int, head_hash: str, time: str) -> Checkpoint:
    """Sign the head ``(seq, head_hash)`` of ``saga_id`` at ``time``.

    Raises:
        ConfigurationError: the keyring has no signing key.
    """
    if keyring.signing_key is None:
        raise ConfigurationError("checkpoints need a keyring with a signing key")
    key_id = keyring.signing_key[0]
    unsigned = Checkpoint(saga_id, seq, head_hash, time, key_id, signature="")
    _, signature = keyring.sign(CHECKPOINT_STATEMENT, unsigned.statement())
    return dataclasses.replace(unsigned, signature=signature)


@runtime_checkable
class CheckpointStore(Protocol):
    """Where signed checkpoints are kept (never the journal's own database)."""

    async def put(self, checkpoint: Checkpoint) -> None:
        """Store a checkpoint durably (an identical one again is harmless).

        Raises:
            OSError or a store-specific error: it could not be stored.
        """
        ...

    async def list(self, saga_id: str) -> builtins.list[Checkpoint]:
        """Every checkpoint of ``saga_id``, in the order stored (malformed records raise).

        Raises:
            ValueError: a stored record is not a checkpoint.
        """
        ...

    async def saga_ids(self) -> builtins.list[str]:
        """Every saga with at least one checkpoint."""
        ...
