"""Canonical JSON: the fixed conversion rules and RFC 8785 encoding every hashed byte goes through.

Rules (docs/architecture.md, "The journal"), applied recursively before encoding:

* ``Decimal`` -> its string form (``Decimal("10.10")`` -> ``"10.10"``, never the float 10.1);
* ``datetime`` -> UTC, truncated to microseconds, fixed width ``2026-01-01T00:00:00.000000Z``;
  a naive datetime (no zone: no instant) keeps its wall-clock value, fixed width, without the
  ``Z`` (``2026-01-01T10:00:00.000000``); ``date`` -> ``YYYY-MM-DD``;
* ``set`` / ``frozenset`` -> sorted list (sorted by canonical bytes, so mixed types sort too);
* pydantic models -> ``model_dump(mode="python")`` then these rules (pydantic's JSON-mode dump
  for types these rules do not cover); dataclasses -> ``dataclasses.asdict`` then these
  rules; ``Enum`` -> its value;
* integers outside +/-(2**53 - 1), which RFC 8785 cannot carry as numbers -> decimal strings;
* ``bytes`` -> standard base64 string;
* ``uuid.UUID`` -> its canonical text, lowercase with hyphens (``str(value)``:
  ``"12345678-1234-5678-1234-567812345678"``);
* ``pathlib`` paths (any ``PurePath``) -> ``str(value)`` (``PurePosixPath("/a/b")`` -> ``"/a/b"``;
  a Windows path keeps its backslashes);
* ``ipaddress`` addresses, networks and interfaces -> ``str(value)``, the module's compressed,
  lowercase form (``"192.0.2.1"``, ``"2001:db8::1"``, ``"192.0.2.0/24"``, ``"192.0.2.1/24"``);
* tuples -> lists; dict keys must be strings;
* anything else (and NaN or infinite floats) -> :class:`~sagacity_agents.errors.EncodingError`.

A value comes back from the journal in this JSON form, never as the type it was: a ``UUID``, a
path, an IP address, a ``Decimal`` or a datetime is a ``str`` to whoever reads the entry (an undo
reading ``ctx.undo_data`` included); rebuild it there (``uuid.UUID(text)``) when the type matters.

Unicode is never normalized: ``"é"`` precomposed and ``"e\\u0301"`` encode (and hash) differently.
Encoding is RFC 8785 (JSON Canonicalization Scheme) by the ``rfc8785`` library.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import enum
import hashlib
import ipaddress
import json
import uuid
from decimal import Decimal
from pathlib import PurePath
from typing import Any

import orjson
import rfc8785

from ..errors import EncodingError

__all__ = [
    "ENCODING_ERROR_KEY",
    "MAX_SAFE_INTEGER",
    "canonical_bytes",
    "encode_canonical",
    "format_timestamp",
    "parse_json",
    "sha256_hex",
    "to_canonical_value",
]

MAX_SAFE_INTEGER = 2**53 - 1
"""Largest integer RFC 8785 carries as a JSON number (IEEE 754 double precision)."""

ENCODING_ERROR_KEY = "$encoding_error"
"""Marker key a writer puts in a payload in place of a value that had no canonical encoding:
``{"$encoding_error": why, "type": its type name}`` (never a ``repr``)."""

_AS_TEXT = (uuid.UUID, PurePath, ipaddress.IPv4Address, ipaddress.IPv6Address,
            ipaddress.IPv4Network, ipaddress.IPv6Network)
"""Types whose canonical form is ``str(value)`` (interfaces are addresses' subclasses)."""


def format_timestamp(value: dt.datetime) -> str:
    """Return ``value`` as fixed-width UTC text with microseconds: ``2026-01-01T00:00:00.000000Z``.

    Args:
        value: an aware datetime. Precision below a microsecond does not exist in ``datetime``;
            callers holding nanoseconds truncate before building it.

    Raises:
        EncodingError: ``value`` is naive (no time zone), so its instant is unknown.
    """
    if value.tzinfo is dt.timezone.utc:  # the journal clock's own values: the hot path
        return value.isoformat(timespec="microseconds")[:-6] + "Z"
    if value.tzinfo is None or value.utcoffset() is None:
        raise EncodingError(f"naive datetime {value!r} has no time zone; pass an aware datetime")
    utc = value.astimezone(dt.timezone.utc)
    # Not strftime: glibc's %Y does not pad years below 1000 ("5-01-01..."), breaking fixed width.
    return (
        f"{utc.year:04d}-{utc.month:02d}-{utc.day:02d}T{utc.hour:02d}:{utc.minute:02d}:"
        f"{utc.second:02d}.{utc.microsecond:06d}Z"
    )


class _Unencodable(EncodingError):
    """Raised inside the conversion; collects the JSON path while unwinding (paths are only
    built for errors, never on the hot path)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.parts: list[str] = []


def _is_astral(key: str) -> bool:
    return not key.isascii() and max(key) > "\uffff"


def _convert(value: Any, flags: list[bool] | None) -> Any:
    """The conversion; sets ``flags[0]`` when the stdlib encoder would not write RFC 8785 bytes
    (a float, or a key above U+FFFF; see :func:`_stdlib_is_jcs`)."""
    kind = type(value)
    if value is None or kind is str or kind is bool:
        return value
    if kind is int:
        return value if -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER else str(value)
    if kind is dict:
        out: dict[str, Any] = {}
        for key, item in value.items():
            if type(key) is not str:
                if not isinstance(key, str):
                    raise _Unencodable(f"dict key {key!r} is not a string")
                key = str.__str__(key)
            if flags is not None and _is_astral(key):
                flags[0] = True
            try:
                out[key] = _convert(item, flags)
            except _Unencodable as exc:
                exc.parts.append(f".{key}")
                raise
        return out
    if kind is list or kind is tuple:
        items = []
        for i, item in enumerate(value):
            try:
                items.append(_convert(item, flags))
            except _Unencodable as exc:
                exc.parts.append(f"[{i}]")
                raise
        return items
    if kind is float:
        if value != value or value in (float("inf"), float("-inf")):
            raise _Unencodable(f"float {value!r} is not representable in JSON")
        if flags is not None:
            flags[0] = True
        return value
    return _convert_other(value, flags)


def _convert_other(value: Any, flags: list[bool] | None) -> Any:
    """Everything but the exact plain types: subclasses, Decimal, datetimes, sets, models..."""
    if isinstance(value, enum.Enum):
        return _convert(value.value, flags)
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, int):
        return _convert(int(value), flags)
    if isinstance(value, float):
        return _convert(float(value), flags)
    if isinstance(value, Decimal):
        if not value.is_finite():
            raise _Unencodable(f"Decimal {value!r} is not finite")
        return str(value)
    if isinstance(value, dt.datetime):
        if value.tzinfo is None or value.utcoffset() is None:
            # A naive value (e.g. a model's "2025-06-12T10:00:00") has no instant: kept as it is,
            # fixed width and without "Z", never guessed to be UTC.
            return format_timestamp(value.replace(tzinfo=dt.timezone.utc))[:-1]
        return format_timestamp(value)
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, _AS_TEXT):
        return str(value)
    if isinstance(value, dict):
        return _convert(dict(value), flags)
    if isinstance(value, (list, tuple)):
        return _convert(list(value), flags)
    if isinstance(value, (set, frozenset)):
        items = []
        for item in value:
            try:
                items.append(_convert(item, flags))
            except _Unencodable as exc:
                exc.parts.append("[]")
                raise
        return sorted(items, key=encode_canonical)
    model_dump = getattr(value, "model_dump", None)
    if callable(model_dump) and hasattr(type(value), "model_fields"):
        # Python-mode dump first, so our rules apply (sets sorted, fixed-width timestamps,
        # Decimal as string) whatever the hash seed; pydantic's JSON mode only for the rest.
        try:
            return _convert(model_dump(mode="python"), flags)
        except _Unencodable:
            return _convert(model_dump(mode="json"), flags)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _convert(dataclasses.asdict(value), flags)
    raise _Unencodable(f"no canonical encoding for type {type(value).__qualname__}")


def to_canonical_value(value: Any, *, flags: list[bool] | None = None) -> Any:
    """Convert ``value`` to plain JSON types by the module's fixed rules.

    Args:
        value: any Python value.
        flags: optional one-item list; set to ``[True]`` when the result holds a float or a key
            above U+FFFF (then only the reference encoder writes RFC 8785 bytes).

    Returns:
        A tree of ``dict`` (str keys), ``list``, ``str``, ``int`` (within +/-(2**53 - 1)),
        ``float`` (finite), ``bool`` and ``None``.

    Raises:
        EncodingError: a value with no defined encoding; the message names its JSON path and type.
    """
    try:
        return _convert(value, flags)
    except _Unencodable as exc:
        path = "$" + "".join(reversed(exc.parts))
        raise EncodingError(f"{path}: {exc.reason}") from None
    except RecursionError:
        raise EncodingError("value is nested too deeply or contains itself") from None
    except (TypeError, ValueError) as exc:  # e.g. dataclasses.asdict on a field that cannot be copied
        raise EncodingError(f"cannot convert {type(value).__qualname__}: {exc}") from exc


def _stdlib_is_jcs(value: Any) -> bool:
    """Whether the standard library's ``json`` writes exactly the RFC 8785 bytes for ``value``.

    For converted values the two encoders differ in two places only: number formatting of
    floats (``1.0``, ``-0.0``, ``1e-7``), and key order when a key holds a character above U+FFFF
    (RFC 8785 sorts by UTF-16 code units, ``sort_keys`` by code points). String escaping is the
    same (ECMAScript ``JSON.stringify`` rules); integers are within +/-(2**53 - 1) after
    conversion. ``tests/journal/test_canonical_fast_path.py`` checks the equivalence against
    ``rfc8785`` with generated values.
    """
    if isinstance(value, dict):
        for key, item in value.items():
            if _is_astral(key) or not _stdlib_is_jcs(item):
                return False
        return True
    if isinstance(value, list):
        return all(_stdlib_is_jcs(item) for item in value)
    return not isinstance(value, float)


_FAST_OPTIONS = (orjson.OPT_SORT_KEYS | orjson.OPT_PASSTHROUGH_DATACLASS
                 | orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_SUBCLASS)
"""orjson as the stdlib's ``json.dumps(sort_keys=True, separators=(",", ":"),
ensure_ascii=False)``: sorted keys, no spaces, UTF-8 out, ECMAScript escapes (``\\n``, ``\\u001f``
lowercase). The passthrough options make it refuse what the stdlib refuses (a dataclass, a
datetime, a subclass of a JSON type): only converted values are encoded here."""


def encode_canonical(value: Any, *, stdlib_safe: bool | None = None) -> bytes:
    """Return the RFC 8785 bytes of an already converted value (see :func:`to_canonical_value`).

    The ``rfc8785`` library is the reference encoder. Values without floats and without keys
    above U+FFFF, for which ``orjson`` writes the very same bytes (as the standard library's
    ``json`` would) about ten times faster than the stdlib and forty times faster than
    ``rfc8785``, take that path: it is on the hot path of every tool call (two entries per
    call). Anything orjson refuses (a lone surrogate, nesting deeper than 255, an integer
    beyond 64 bits) goes to the reference encoder, which decides and explains.

    Args:
        value: a converted value.
        stdlib_safe: what the conversion's ``flags`` said (``not flags[0]``), to skip the check;
            ``None`` checks here.

    Raises:
        EncodingError: the value cannot be encoded (e.g. a lone surrogate in a string).
    """
    try:
        fast = stdlib_safe if stdlib_safe is not None else _stdlib_is_jcs(value)
    except RecursionError:  # deeper than the check walks: orjson refuses past 255 levels anyway
        fast = False
    if fast:
        try:
            return orjson.dumps(value, option=_FAST_OPTIONS)
        except TypeError:  # orjson.JSONEncodeError is a TypeError
            pass  # let the reference encoder decide and explain
    try:
        return rfc8785.dumps(value)
    except (rfc8785.CanonicalizationError, UnicodeError, TypeError) as exc:
        raise EncodingError(f"no RFC 8785 encoding: {exc}") from exc
    except RecursionError:
        raise EncodingError("no RFC 8785 encoding: nested too deeply") from None



def canonical_bytes(value: Any) -> bytes:
    """Return the RFC 8785 encoding of ``value`` after :func:`to_canonical_value`.

    Raises:
        EncodingError: ``value`` has no canonical encoding.
    """
    return encode_canonical(to_canonical_value(value))


def sha256_hex(data: bytes) -> str:
    """Return SHA-256 of ``data`` as 64 lowercase hex characters."""
    return hashlib.sha256(data).hexdigest()


def _refuse_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, item in pairs:
        if key in out:
            raise EncodingError(f"duplicate key {key!r} in JSON object")
        out[key] = item
    return out


def _refuse_constant(name: str) -> Any:
    raise EncodingError(f"{name} is not valid JSON")


def parse_json(text: str | bytes) -> Any:
    """Parse JSON text, refusing what would make two readers disagree.

    Args:
        text: JSON text (``str`` or UTF-8 ``bytes``).

    Returns:
        The parsed value.

    Raises:
        EncodingError: invalid JSON, a duplicate key in an object (``{"a":1,"a":2}``: readers
            disagree on which wins), or ``NaN`` / ``Infinity``.
    """
    try:
        return json.loads(text, object_pairs_hook=_refuse_duplicates, parse_constant=_refuse_constant)
    except json.JSONDecodeError as exc:
        raise EncodingError(f"invalid JSON: {exc}") from exc
