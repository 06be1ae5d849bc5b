"""What an undo receives: the :class:`CompensationContext` of the call it takes back, and the
idempotency key that stays the same on every retry of that undo (in this process or another).

Below both the declarations (an undo is declared to take a context) and the compensation walk
(which builds one from the journal).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .canonical import ENCODING_ERROR_KEY, sha256_hex

__all__ = ["CompensationContext", "idempotency_key", "lost_undo_data"]


def idempotency_key(saga_id: str, seq: int) -> str:
    """The idempotency key of the undo of entry ``seq`` of ``saga_id``.

    Stable across retries and processes: ``"sgc-"`` + the first 32 hex digits of
    SHA-256(``saga_id`` NUL ``seq``). Pass it to the remote API's idempotency header.
    """
    return "sgc-" + sha256_hex(f"{saga_id}\x00{seq}".encode())[:32]


@dataclass(frozen=True, slots=True)
class CompensationContext:
    """Everything an undo gets. Values are in their journaled (canonical JSON) form, because the
    undo may run in another process than the tool did."""

    saga_id: str
    """The saga being compensated."""
    seq: int
    """Sequence number of the EXECUTED entry being undone."""
    tool: str
    """Tool name as the model saw it."""
    call_id: str | None
    """The model's call id of the original call."""
    args: dict[str, Any]
    """The validated arguments the body received (canonical form: Decimal as string, etc.)."""
    result: Any
    """What the body returned (canonical form; ``bytes`` when the body returned bytes)."""
    undo_data: Any
    """What the body passed to ``record_undo_data`` (``None`` if nothing), in its JSON form: a
    ``uuid.UUID``, a path, an IP address, a ``Decimal`` or a datetime comes back as ``str``,
    bytes as base64 ``str``, a tuple or set as a list, a dataclass or pydantic model as a dict,
    an ``Enum`` as its value (``core.canonical``)."""
    idempotency_key: str
    """Stable key for this undo; the same on every retry of it."""
    raw_args: str | None = None
    """The raw argument text, journaled only for fallback-protected tools (``args`` is then empty)."""


def lost_undo_data(payload: Any) -> str | None:
    """Why a call's undo data is missing from its outcome entry, or ``None`` when it is not.

    ``record_undo_data`` given a value with no canonical encoding journals the marker
    ``{"$encoding_error": why, "type": ...}`` as the call's undo data (the effect may exist, what
    its undo needs does not): compensation never runs that undo blind, it reports the call still
    dirty with this reason.

    Args:
        payload: an outcome entry's payload (EXECUTED or FAILED), as journaled.
    """
    undo_data = payload.get("undo_data") if isinstance(payload, dict) else None
    if isinstance(undo_data, dict) and ENCODING_ERROR_KEY in undo_data:
        return f"its undo data could not be journaled ({undo_data[ENCODING_ERROR_KEY]})"
    return None
