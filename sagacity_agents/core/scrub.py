"""What a display, a span, a log line or an error message may show of a value: masks, never values.

The journal holds sensitive values as committed values (``core.sensitive``): a display shows
their mask (``**** **** **** 0002``, ``****``), or ``[erased]`` once the saga's data key was
erased. But a display also reads entries written before sensitive values were committed, and a
span or a message is built from the clear values a call was given, before they reach the
journal. So everything shown goes through a :class:`Scrubber`, which

* replaces each committed value by its mask (``[erased]`` when its generation was erased);
* masks, under the data roots (``core.sensitive.DATA_ROOTS``), every value the defaults call
  sensitive (names such as ``password`` or ``card_number``, Luhn-valid card numbers, whole or in
  free text) and every field the tool declared (``spec``);
* remembers each clear value it masked (at least ``core.sensitive.MIN_KNOWN_LENGTH``
  characters) and masks it wherever it appears later in free text: an exception that quotes the
  password given to the call, and in the texts the library builds from errors (``error``,
  ``reason``, ``detail`` keys, at any depth: a saga's closing report).

A display may mask more than the writer did (the defaults apply whatever a tool exempted): a
display errs on the side of hiding. Only ``--reveal`` (``core.shown.reveal_saga``: the master
key, an access-log entry first) shows values.

Pure: no keys, no I/O (``core.observe`` uses it on the hot path of an observed step).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .sensitive import (
    CARD_MASK_PREFIX, DEFAULT_SENSITIVITY, KEY_GENERATION_KEY, MASK, MASK_KEY, SENSITIVE_KEY, MIN_KNOWN_LENGTH, Sensitivity,
    is_committed, redact, redact_text,
)

__all__ = ["ERASED", "TEXT_KEYS", "Scrubber", "scrub_text", "scrub_value"]

ERASED = "[erased]"
"""What a committed value of an erased data-key generation shows (``sagacity saga erase``)."""

TEXT_KEYS = frozenset({"error", "reason", "detail", "message"})
"""Keys whose string values are free text built from errors, searched for known values at any
depth of a payload (not only under the data roots: a closing report quotes failures)."""


def _is_mask(text: str) -> bool:
    """Whether ``text`` is a mask a scrub shows (``****``, ``**** **** **** 0002``,
    :data:`ERASED`): a display may scrub entries another display already scrubbed."""
    return text == ERASED or text == MASK or (
        text.startswith(CARD_MASK_PREFIX) and len(text) == len(CARD_MASK_PREFIX) + 4)


class _Shown(str):
    """A committed value's mask (or :data:`ERASED`) during a scrub: not a ``str`` by type, so
    ``core.sensitive.redact`` neither parses it as text nor remembers it; kept as it is when
    its field is sensitive by name (the mask the writer chose beats a blunter one)."""

    __slots__ = ()


_KEEP = "\x00"


def _stand_in(value: Any) -> str:
    """The "commitment" ``redact`` records for a value a scrubber masks: empty (only the mask
    is used), or a committed value's own mask, marked, when ``redact`` took it whole."""
    return _KEEP + value if isinstance(value, _Shown) else ""


class Scrubber:
    """Masks what may not be shown, remembering the clear values it met (one per saga or call).

    Args:
        spec: what is sensitive besides committed values (the tool's declaration as
            ``Sensitivity.of`` reads it, else the defaults).
        erased: data-key generations erased for this saga (their committed values show
            :data:`ERASED`).
        known: clear sensitive values already met (masked inside free text).

    Not thread-safe: one scrubber per display or per observed step.
    """

    __slots__ = ("erased", "known", "spec")

    def __init__(self, spec: Sensitivity | Iterable[str] | None = None, *,
                 erased: Iterable[int] = (), known: Iterable[str] = ()) -> None:
        self.spec = Sensitivity.of(spec) if spec is not None else DEFAULT_SENSITIVITY
        self.erased = frozenset(erased)
        self.known: set[str] = {k for k in known if len(k) >= MIN_KNOWN_LENGTH}

    def payload(self, payload: Any) -> Any:
        """An entry payload as it may be shown: committed values masked, clear sensitive values
        under the data roots masked (and remembered), known values masked in error texts.
        Returns ``payload`` itself when nothing changed."""
        out = self._committed(payload)
        if type(out) is not dict:
            return _plain(out)
        redacted, found = redact(out, self.spec, _stand_in, known=tuple(self.known))
        for item in found:
            if type(item.value) is str and len(item.value) >= MIN_KNOWN_LENGTH:
                self.known.add(item.value)
        if found:
            out = _masks(redacted)
        out = _plain(out) if out is not payload else out
        return self._texts(out) if self.known else out

    def value(self, value: Any) -> Any:
        """Any value (a call's arguments, a result) as it may be shown: scrubbed as the data
        root ``args`` of a payload would be."""
        return self.payload({"args": value})["args"]

    def text(self, text: str) -> str:
        """Free text (an error message) with card numbers and known values masked."""
        return redact_text(text, self.spec, self.known) or text

    def committed(self, value: Any) -> Any:
        """``value`` with only its committed values replaced (masks, :data:`ERASED`): what a
        reveal shows of the values it could not open. Returns ``value`` when it holds none."""
        out = self._committed(value)
        return value if out is value else _plain(out)

    def _committed(self, value: Any) -> Any:
        if is_committed(value):
            generation = value.get(KEY_GENERATION_KEY, 1)
            return _Shown(ERASED if generation in self.erased else str(value[MASK_KEY]))
        if type(value) is str and _is_mask(value):
            return _Shown(value)  # shown once already: kept as it is (a scrub is idempotent)
        if type(value) is dict:
            out = {k: self._committed(v) for k, v in value.items()}
            return value if all(out[k] is value[k] for k in value) else out
        if type(value) is list:
            items = [self._committed(v) for v in value]
            return value if all(a is b for a, b in zip(items, value, strict=True)) else items
        return value

    def _texts(self, value: Any, key: str | None = None) -> Any:
        if type(value) is str:
            return self.text(value) if key in TEXT_KEYS else value
        if type(value) is dict:
            out = {k: self._texts(v, k) for k, v in value.items()}
            return value if all(out[k] is value[k] for k in value) else out
        if type(value) is list:
            items = [self._texts(v, key) for v in value]
            return value if all(a is b for a, b in zip(items, value, strict=True)) else items
        return value


def _masks(value: Any) -> Any:
    """``redact``'s output with its committed stand-ins turned into their masks."""
    if is_committed(value):
        kept = value[SENSITIVE_KEY]
        return kept[1:] if kept.startswith(_KEEP) else value[MASK_KEY]
    if type(value) is dict:
        return {k: _masks(v) for k, v in value.items()}
    if type(value) is list:
        return [_masks(v) for v in value]
    return value


def _plain(value: Any) -> Any:
    """``value`` with every :class:`_Shown` turned back into a plain ``str`` (JSON encoders
    and pydantic see ordinary strings)."""
    if isinstance(value, str):
        return str(value) if type(value) is not str else value
    if type(value) is dict:
        return {k: _plain(v) for k, v in value.items()}
    if type(value) is list:
        return [_plain(v) for v in value]
    return value


def scrub_value(value: Any, spec: Sensitivity | Iterable[str] | None = None, known: Iterable[str] = ()) -> Any:
    """``value`` as a span or log line may carry it (:meth:`Scrubber.value`, a fresh scrubber)."""
    return Scrubber(spec, known=known).value(value)


def scrub_text(text: str, known: Iterable[str] = ()) -> str:
    """``text`` with card numbers and the ``known`` values (at least four characters) masked:
    an error message the library builds or passes on."""
    return Scrubber(known=known).text(text)

