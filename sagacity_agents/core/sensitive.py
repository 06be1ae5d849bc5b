"""Which values of a call are sensitive, and what the hashed bytes hold in their place.

A card number, a CVV, an API token or a password must not sit in clear in the journal (PCI DSS
forbids storing a full card number unprotected and any CVV after authorization; GDPR's right to
erasure needs a way to make a value unrecoverable without breaking the hash chain). So a
sensitive value is replaced, in an entry's hashed payload, by a *committed value*::

    {"$sensitive": "<HMAC-SHA256 hex>", "mask": "**** **** **** 0002"}

The commitment is keyed by the saga's data key (``core.data_keys``), so a low-entropy value (a
PIN, a card number with a known prefix) cannot be guessed from the journal, and two equal values
of one saga commit alike (an approval bound to a card number refuses another one). The value
itself is sealed outside the hashed bytes, or not stored at all when no master key is configured.

What is sensitive (:class:`Sensitivity`): the fields a tool declares (``sensitive=``), plus safe
defaults each tool may switch off: field names such as ``password`` or ``card_number`` (at any
depth of a structured value), and any string that is a Luhn-valid 13-19 digit number once spaces
and dashes are removed. Card numbers are also found *inside* free text (an error message, a
prompt); names are not (a ``"token": "..."`` written inside a text is not parsed). Values this
saga already found sensitive are replaced wherever they appear later in its free text (an
exception quoting the password), when at least :data:`MIN_KNOWN_LENGTH` characters long.

Only the values under a payload's data roots (:data:`DATA_ROOTS`) are scanned: structural fields
(hashes, sequence numbers, write keys) never are, so no rule can mask an ``args_hash``.

This module is pure: no keys, no I/O. The commitment is a callable the caller passes
(``core.data_keys.SagaSecrets``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "CARD_MASK_PREFIX", "DATA_ROOTS", "DEFAULT_NAMES", "DEFAULT_SENSITIVITY", "KEY_GENERATION_KEY",
    "MASK", "MASK_KEY", "MIN_KNOWN_LENGTH", "SENSITIVE_KEY", "Found", "Sensitivity", "card_mask",
    "has_committed", "is_card_number", "is_committed", "luhn_valid", "masked", "normalise_name",
    "pointer", "redact", "redact_text",
]

SENSITIVE_KEY = "$sensitive"
"""Key of a committed value's commitment (64 lowercase hex digits of HMAC-SHA256)."""

MASK_KEY = "mask"
"""Key of a committed value's mask: what a reader without the key sees."""

KEY_GENERATION_KEY = "key"
"""Key of a committed value's data-key generation, present only when it is not 1 (a saga whose
key was erased and a late outcome then committed under a fresh one: ``core.data_keys``)."""

MASK = "****"
"""The mask of a sensitive value that is not a card number (its length is not shown)."""

CARD_MASK_PREFIX = "**** **** **** "
"""A card number's mask shows only its last four digits (PCI DSS allows at most those)."""

MIN_KNOWN_LENGTH = 4
"""Shortest value searched for inside free text once found sensitive: shorter ones (a one-digit
PIN) would mask every text they happen to occur in. They are still committed where they stand."""

DATA_ROOTS = frozenset({
    "args", "raw_args", "result", "undo_data", "error", "saw", "output", "reason", "arguments",
    "input",
})
"""Payload keys whose values come from the model, a tool, a human or an exception: the only ones
scanned. Everything else in a payload is the library's own structure."""

DEFAULT_NAMES = frozenset({
    "password", "passwd", "secret", "token", "api_key", "apikey", "cvv", "cvc", "pin",
    "card_number", "card", "pan",
})
"""Field names sensitive by default (a name matches when, normalised by :func:`normalise_name`,
it equals one of these or ends with ``_`` and one: ``access_token``, ``db_password``)."""

_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_SEPARATORS = re.compile(r"[\s\-.]+")
# A card number inside free text stands apart from letters and digits: a digit run inside a hex
# hash or an id ("...eccf065161663265249") is not one (masking it would corrupt a stored snapshot).
_CARD_RUN = re.compile(r"(?<![0-9A-Za-z])\d(?:[ -]?\d){12,18}(?![0-9A-Za-z])")
_CARD_CHARS = frozenset("0123456789 -")


def normalise_name(name: str) -> str:
    """``name`` in lower snake case: ``apiKey`` -> ``api_key``, ``Card-Number`` -> ``card_number``."""
    return _SEPARATORS.sub("_", _CAMEL.sub("_", name)).lower()


def luhn_valid(digits: str) -> bool:
    """Whether ``digits`` (decimal digits only) passes the Luhn check (ISO/IEC 7812-1, annex B)."""
    total = 0
    for index, char in enumerate(reversed(digits)):
        value = ord(char) - 48
        if index % 2:
            value = value * 2 - 9 if value > 4 else value * 2
        total += value
    return total % 10 == 0


def is_card_number(text: str) -> bool:
    """Whether ``text`` is a card number: after removing spaces and dashes, 13 to 19 decimal
    digits that pass the Luhn check (ISO/IEC 7812-1: primary account numbers are 8-19 digits;
    payment cards use 13-19)."""
    if not 13 <= len(text) <= 40 or not _CARD_CHARS.issuperset(text):
        return False
    digits = text.replace(" ", "").replace("-", "")
    return 13 <= len(digits) <= 19 and digits.isdigit() and luhn_valid(digits)


def card_mask(text: str) -> str:
    """The mask of a card number: ``**** **** **** `` and its last four digits."""
    digits = [c for c in text if c.isdigit()]
    return CARD_MASK_PREFIX + "".join(digits[-4:])


def pointer(path: tuple[str | int, ...]) -> str:
    """``path`` as an RFC 6901 JSON pointer (``("args", "card")`` -> ``/args/card``)."""
    return "".join("/" + str(part).replace("~", "~0").replace("/", "~1") for part in path)


@dataclass(frozen=True, slots=True)
class Sensitivity:
    """What is sensitive in one tool's values (arguments, result, undo data, error text).

    Args:
        fields: declared sensitive fields. A bare name (``"card_number"``) matches that key at any
            depth under any data root; a dotted path rooted at a data root (``"args.card"``,
            ``"result.token"``, ``"undo_data.iban"``) matches that place only (dict keys; list
            items are transparent).
        names: the default names (:data:`DEFAULT_NAMES`) are sensitive too.
        card_numbers: Luhn-valid card numbers are sensitive, whole or inside free text.
        exempt: default names switched off for this tool (``{"token"}`` for a pagination token);
            normalised like field names.

    Raises:
        ValueError: an empty field name, or a dotted path not rooted at a data root.
    """

    fields: frozenset[str] = frozenset()
    names: bool = True
    card_numbers: bool = True
    exempt: frozenset[str] = frozenset()
    _bare: frozenset[str] = field(default=frozenset(), init=False, repr=False, compare=False)
    _paths: frozenset[tuple[str, ...]] = field(default=frozenset(), init=False, repr=False,
                                               compare=False)
    _suffixes: tuple[str, ...] = field(default=(), init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        fields = frozenset(self.fields) if not isinstance(self.fields, str) else frozenset({self.fields})
        bare, paths = set(), set()
        for name in fields:
            if not isinstance(name, str) or not name.strip():
                raise ValueError(f"a sensitive field must be a non-empty name or path, not {name!r}")
            parts = tuple(name.split("."))
            if len(parts) == 1:
                bare.add(normalise_name(name))
            elif parts[0] in DATA_ROOTS and all(parts):
                paths.add(parts)
            else:
                raise ValueError(
                    f"sensitive path {name!r} must start with one of {sorted(DATA_ROOTS)} "
                    "(e.g. 'args.card_number'), or be a bare field name")
        exempt = frozenset(normalise_name(n) for n in self.exempt)
        defaults = (DEFAULT_NAMES - exempt) if self.names else frozenset()
        object.__setattr__(self, "fields", fields)
        object.__setattr__(self, "exempt", exempt)
        object.__setattr__(self, "_bare", frozenset(bare) | defaults)
        object.__setattr__(self, "_paths", frozenset(paths))
        object.__setattr__(self, "_suffixes", tuple("_" + n for n in defaults))

    @classmethod
    def of(cls, spec: Sensitivity | Iterable[str] | str | None) -> Sensitivity:
        """A declaration's ``sensitive=`` as a :class:`Sensitivity`: ``None`` -> the defaults,
        a name or an iterable of names/paths -> those fields plus the defaults.

        Raises:
            TypeError: ``spec`` is none of these (a mapping, a number).
            ValueError: as the constructor.
        """
        if spec is None:
            return DEFAULT_SENSITIVITY
        if isinstance(spec, Sensitivity):
            return spec
        if isinstance(spec, str):
            return cls(frozenset({spec}))
        if isinstance(spec, Mapping) or not isinstance(spec, Iterable):
            raise TypeError(
                "sensitive= takes field names or paths (e.g. {'card_number', 'result.token'}) "
                f"or a Sensitivity, not {type(spec).__name__}")
        return cls(frozenset(spec))

    def names_field(self, name: str) -> bool:
        """Whether a dict key called ``name`` holds a sensitive value wherever it stands."""
        norm = name if name.islower() and name.isidentifier() else normalise_name(name)
        return norm in self._bare or (bool(self._suffixes) and norm.endswith(self._suffixes))

    def names_path(self, path: tuple[str, ...]) -> bool:
        """Whether the dict-key path ``path`` (root first, list indices left out) is declared."""
        return path in self._paths

    def declares_undo_data(self, undo_needs: Iterable[str] = ()) -> bool:
        """Whether a compensatable tool's undo data would hold a sensitive value by declaration:
        a path under ``undo_data`` is declared, or a key its undo needs is a sensitive name (the
        refusal without a master key, ``core.declarations``)."""
        return any(p[0] == "undo_data" for p in self._paths) or any(
            self.names_field(k) for k in undo_needs)


DEFAULT_SENSITIVITY = Sensitivity()
"""The defaults: names and card numbers, nothing declared."""


@dataclass(frozen=True, slots=True)
class Found:
    """One sensitive value found in a payload: where, the value (canonical JSON form), its mask,
    and whether it is sensitive as a whole (a named or declared field, a card number) rather
    than a free text holding sensitive parts (only whole values are remembered as known: a
    text remembered whole would later mask as ``****`` where it masked as ``pw ****`` before,
    and an approval's committed arguments would no longer hash alike)."""

    path: tuple[str | int, ...]
    value: Any
    mask: str
    whole: bool = True


def redact_text(text: str, spec: Sensitivity, known: Iterable[str] = ()) -> str | None:
    """``text`` with each card number (when ``spec.card_numbers``) and each ``known`` value
    inside it replaced by its mask, or ``None`` when it holds none."""
    out = text
    if spec.card_numbers and len(text) >= 13:
        out = _CARD_RUN.sub(lambda m: card_mask(m.group()) if is_card_number(m.group())
                            else m.group(), out)
    # Longest first, in a fixed order: a value inside another known one never splits it, and
    # the same text always gets the same mask (masks are in the hashed bytes).
    for value in sorted(known, key=lambda v: (-len(v), v)):
        if value in out:
            out = out.replace(value, MASK)
    return None if out == text else out


def _scan(value: Any, path: tuple[str | int, ...], keys: tuple[str, ...], spec: Sensitivity,
          known: tuple[str, ...], found: list[Found], whole: bool) -> Any:
    """``value`` with its sensitive parts replaced by placeholders (recorded in ``found``),
    the same object when nothing changed."""
    if whole:
        if type(value) is dict and SENSITIVE_KEY in value and MASK_KEY in value:
            return value  # already committed (an approval's arguments, an INTENT's copied on)
        mask = card_mask(value) if isinstance(value, str) and is_card_number(value) else MASK
        found.append(Found(path, value, mask))
        return found[-1]
    if type(value) is str:
        if spec.card_numbers and len(value) >= 13 and is_card_number(value):
            found.append(Found(path, value, card_mask(value)))
            return found[-1]
        if len(value) >= 13 or known:
            masked_text = redact_text(value, spec, known)
            if masked_text is not None:
                found.append(Found(path, value, masked_text, False))
                return found[-1]
        return value
    if type(value) is dict:
        out = value
        paths = spec._paths  # the dict-key path is built only where a rooted path is declared
        for key, item in value.items():
            here = keys + (key,) if paths else keys
            sensitive = spec.names_field(key) or (bool(paths) and here in paths)
            new = _scan(item, path + (key,), here, spec, known, found, sensitive)
            if new is not item:
                if out is value:
                    out = dict(value)
                out[key] = new
        return out
    if type(value) is list:
        out_list = value
        for index, item in enumerate(value):
            new = _scan(item, path + (index,), keys, spec, known, found, False)
            if new is not item:
                if out_list is value:
                    out_list = list(value)
                out_list[index] = new
        return out_list
    return value


def redact(
    payload: Any, spec: Sensitivity, commit: Callable[[Any], str], *, known: Iterable[str] = (),
    generation: int = 1,
) -> tuple[Any, list[Found]]:
    """Replace every sensitive value under ``payload``'s data roots by its committed value.

    Args:
        payload: an entry payload, already in canonical form (``core.canonical``); anything but
            a dict is returned as is.
        spec: what is sensitive for the call's tool.
        commit: the commitment of a canonical value (``SagaSecrets.commit``): 64 hex digits.
        known: clear values this saga already found sensitive (searched inside free text).
        generation: the data key's generation, recorded in each committed value when not 1.

    Returns:
        ``(payload, found)``: the payload (the same object when nothing was found) and what was
        found, in document order, each with its path (a tuple for :func:`pointer`).
    """
    if type(payload) is not dict:
        return payload, []
    known_values = tuple(k for k in known if len(k) >= MIN_KNOWN_LENGTH)
    found: list[Found] = []
    out = payload
    for root, value in payload.items():
        if root not in DATA_ROOTS or value is None:
            continue
        whole = spec.names_path((root,))
        new = _scan(value, (root,), (root,), spec, known_values, found, whole)
        if new is not value:
            if out is payload:
                out = dict(payload)
            out[root] = new
    if not found:
        return payload, found
    return _committed(out, found, commit, generation), found


def _committed(value: Any, found: list[Found], commit: Callable[[Any], str], generation: int) -> Any:
    """``value`` with each :class:`Found` placeholder replaced by its committed dict."""
    if type(value) is Found:
        committed: dict[str, Any] = {SENSITIVE_KEY: commit(value.value), MASK_KEY: value.mask}
        if generation != 1:
            committed[KEY_GENERATION_KEY] = generation
        return committed
    if type(value) is dict:
        return {k: _committed(v, found, commit, generation) for k, v in value.items()}
    if type(value) is list:
        return [_committed(v, found, commit, generation) for v in value]
    return value


def is_committed(value: Any) -> bool:
    """Whether ``value`` is a committed value (a dict with :data:`SENSITIVE_KEY` and a mask)."""
    return type(value) is dict and SENSITIVE_KEY in value and MASK_KEY in value


def has_committed(value: Any) -> bool:
    """Whether a committed value stands anywhere in ``value``."""
    if is_committed(value):
        return True
    if type(value) is dict:
        return any(has_committed(v) for v in value.values())
    if type(value) is list:
        return any(has_committed(v) for v in value)
    return False


def masked(value: Any, *, erased: bool = False) -> Any:
    """``value`` with every committed value replaced by its mask (``"[erased]"`` when
    ``erased``): what a display, a span or an undo without the key gets."""
    if is_committed(value):
        return "[erased]" if erased else value[MASK_KEY]
    if type(value) is dict:
        return {k: masked(v, erased=erased) for k, v in value.items()}
    if type(value) is list:
        return [masked(v, erased=erased) for v in value]
    return value
