"""One rule for showing model-written text to a human: every code point that renders as nothing,
as something else, or that reorders or hides its neighbours is shown escaped.

A value an approver reads (an IBAN, a memo, a tool name, a saga id) must look like exactly what
the tool receives. ``"DE89 3704 0044 \\u202e0003 1025 3200\\u202c"`` renders reversed in a
browser and in most terminals; a zero-width space splits a name invisibly; a no-break space
looks like a space. Both the CLI (:mod:`sagacity_agents.render`) and the web inbox
(``sagacity_agents.web``) show such code points as ``\\u202e``-style escapes (``\\n``, ``\\t``,
``\\r`` for those three), highlighted where the medium allows, and warn when a value had any.

Escaped (:func:`hidden`):

* every control character (Unicode category ``Cc``: C0, DEL, C1);
* every format character (``Cf``: bidi embeddings, overrides and isolates, marks such as LRM
  and RLM, zero-width space / joiner / non-joiner, word joiner, BOM, soft hyphen, the
  invisible operators, tag characters...);
* line and paragraph separators (``Zl``, ``Zp``) and every space separator but the ASCII space
  (``Zs``: no-break, en, em, thin, ideographic spaces...);
* surrogates, private-use and unassigned code points (``Cs``, ``Co``, ``Cn``);
* invisible or blank letters and marks that are not in those categories: variation
  selectors, the combining grapheme joiner, the Hangul fillers, the braille blank, the Khmer
  inherent vowels, the Mongolian vowel separator.

A backslash is not escaped: where the escapes are not highlighted (plain text), a value that
contains the six characters ``\\u202e`` reads like one that contains U+202E; :func:`hidden`
tells them apart, and the warning names the code points actually found.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable, Iterator

__all__ = ["code_point_name", "escape", "hidden", "hidden_in", "segments"]

_HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})
_INVISIBLE_EXTRA = frozenset({
    0x034F,  # combining grapheme joiner
    0x115F, 0x1160, 0x3164, 0xFFA0,  # Hangul fillers
    0x17B4, 0x17B5,  # Khmer inherent vowels
    0x180E,  # Mongolian vowel separator
    0x2800,  # braille pattern blank
    *range(0xFE00, 0xFE10),  # variation selectors
    *range(0xE0100, 0xE01F0),  # variation selectors supplement
})
_NAMED = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}


def hidden(char: str) -> bool:
    """Whether the code point ``char`` must be shown escaped (see the module's list)."""
    if char == " ":
        return False
    category = unicodedata.category(char)
    return category in _HIDDEN_CATEGORIES or category == "Zs" or ord(char) in _INVISIBLE_EXTRA


def _escaped(char: str) -> str:
    named = _NAMED.get(char)
    if named is not None:
        return named
    code = ord(char)
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def segments(text: str) -> Iterator[tuple[str, str]]:
    """``text`` cut into ``(piece, original)`` pairs, in order: a plain run as it is with
    ``original`` ``""``, each hidden code point as its escape with ``original`` that code point.
    Joined, the pieces are :func:`escape`."""
    start = 0
    for i, char in enumerate(text):
        if hidden(char):
            if i > start:
                yield text[start:i], ""
            yield _escaped(char), char
            start = i + 1
    if start < len(text):
        yield text[start:], ""


def escape(value: object) -> str:
    """``str(value)`` with every hidden code point escaped (``None`` becomes ``""``)."""
    if value is None:
        return ""
    text = str(value)
    if not any(hidden(c) for c in text):
        return text
    return "".join(piece for piece, _ in segments(text))


def code_point_name(char: str) -> str:
    """``U+202E RIGHT-TO-LEFT OVERRIDE`` (``U+XXXX`` alone for a code point without a name)."""
    name = unicodedata.name(char, "")
    if not name and unicodedata.category(char) == "Cc":
        name = "control"
    return f"U+{ord(char):04X} {name}".rstrip()


def _strings(value: object) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _strings(key)
            yield from _strings(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _strings(item)


def hidden_in(values: Iterable[object]) -> list[str]:
    """The hidden code points found in ``values`` (strings, and the keys and strings of nested
    dicts and lists), each once, named as :func:`code_point_name`, in order of appearance."""
    found: dict[str, None] = {}
    for value in values:
        for text in _strings(value):
            for char in text:
                if hidden(char):
                    found.setdefault(code_point_name(char))
    return list(found)
