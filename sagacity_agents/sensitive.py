"""Sensitive values: what is committed instead of stored, and the keys that seal and shred them.

::

    from sagacity_agents.sensitive import Sensitivity

    @compensable(undo=refund, sensitive={"card_number", "result.auth_code"})
    async def charge(card_number: str, amount: int) -> dict: ...

A value declared sensitive (``sensitive=`` on a decorator, ``protect_tool`` or an MCP policy), or
found by the safe defaults (:data:`DEFAULT_NAMES` and Luhn-valid card numbers, whole or inside
free text), is journaled as an HMAC commitment and a mask; its clear value is sealed under the
saga's data key when a master key is configured (``SAGACITY_DATA_KEY``, or
``Sagacity(data_key=...)``), and not stored at all otherwise. Erasing the saga's data key makes
its values unrecoverable while the chain, the tags and the approvals still verify.
docs/sensitive-data.md has the key hierarchy, what each attacker learns, rotation and erasure.
"""

from __future__ import annotations

from .core.data_keys import DataKeys, MasterKey
from .core.sensitive import DEFAULT_NAMES, Sensitivity, masked
from .core.shown import reveal_saga

__all__ = ["DEFAULT_NAMES", "DataKeys", "MasterKey", "Sensitivity", "masked", "reveal_saga"]
