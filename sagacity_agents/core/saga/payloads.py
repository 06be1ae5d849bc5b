"""How a call's values go into its journal entries' payloads: values with no canonical encoding
are marked (never a ``repr``), bytes results are tagged, a fallback call's raw argument text is
read as the canonical value an approval hash covers."""

from __future__ import annotations

from typing import Any

from ...errors import EncodingError
from ..approval_rule import raw_args_value
from ..canonical import (
    ENCODING_ERROR_KEY,
    encode_canonical,
    to_canonical_value,
)
from ..declarations import Reversibility, ToolDeclaration
from ..sensitive import DEFAULT_SENSITIVITY, Sensitivity

__all__ = [
    "ENCODING_ERROR_KEY", "RESULT_TYPE_KEY", "REVERSIBILITY_TEXT", "UNDECLARED", "encode_or_marker",
    "encoding_marker", "raw_args_value", "sensitivity_of", "with_result",
]

REVERSIBILITY_TEXT = {kind: kind.value for kind in Reversibility}  # Enum.value is slow per call

UNDECLARED = "undeclared"
"""The ``reversibility`` journaled for a call of a tool nobody declared: it ran, its effect
is unknown, and nothing can undo it; reported "no undo declared" when the saga fails."""


def encoding_marker(value: Any, error: EncodingError) -> dict[str, str]:
    """The marker journaled in place of ``value``, which has no canonical encoding:
    ``{"$encoding_error": why, "type": its type name}`` (:data:`ENCODING_ERROR_KEY`)."""
    return {ENCODING_ERROR_KEY: str(error), "type": type(value).__qualname__}


def encode_or_marker(value: Any) -> Any:
    """``value`` converted to its canonical form, or, when it has no canonical encoding, the
    marker ``{"$encoding_error": why, "type": its type name}`` (never a ``repr``, which could
    carry data nobody meant to journal). Never raises for a value that cannot be encoded."""
    try:
        converted = to_canonical_value(value)
        encode_canonical(converted)  # e.g. a lone surrogate converts but does not encode
        return converted
    except EncodingError as exc:
        return encoding_marker(value, exc)


RESULT_TYPE_KEY = "result_type"
"""Payload key beside ``result`` saying what the canonical value stands for: ``"bytes"`` when the
body returned bytes (journaled, like all bytes, as a standard base64 string; the hashed bytes
follow the unchanged canonical rule), so a reader and the undo get bytes back, not text."""


def with_result(base: dict[str, Any], result: Any) -> dict[str, Any]:
    """``base`` with ``result`` added, and :data:`RESULT_TYPE_KEY` when ``result`` is bytes."""
    if isinstance(result, (bytes, bytearray, memoryview)):
        return {**base, "result": result, RESULT_TYPE_KEY: "bytes"}
    return {**base, "result": result}


def sensitivity_of(decl: ToolDeclaration | None) -> Sensitivity:
    """What is sensitive in a call's values: its declaration's, the defaults for a tool nobody
    declared (``core.sensitive``)."""
    return decl.sensitivity if decl is not None else DEFAULT_SENSITIVITY
