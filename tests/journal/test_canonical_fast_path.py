"""The stdlib fast path of ``encode_canonical`` writes exactly the RFC 8785 bytes of ``rfc8785``.

The fast path is taken only for values without floats and without object keys above U+FFFF;
everything else goes to the reference encoder. Generated values (including control characters,
quotes, backslashes, U+2028/U+2029, astral characters and floats) must encode identically.
"""

from __future__ import annotations

import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from sagacity_agents.core.canonical import MAX_SAFE_INTEGER, encode_canonical

text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-MAX_SAFE_INTEGER, max_value=MAX_SAFE_INTEGER),
    st.floats(allow_nan=False, allow_infinity=False),
    text,
)
values = st.recursive(
    scalars,
    lambda children: st.one_of(st.lists(children, max_size=4), st.dictionaries(text, children, max_size=4)),
    max_leaves=20,
)


@settings(max_examples=2000, deadline=None)
@given(values)
def test_encode_canonical_equals_rfc8785(value):
    assert encode_canonical(value) == rfc8785.dumps(value)


def test_keys_above_bmp_sort_by_utf16_code_units():
    value = {"\U0001f600": 1, "\uff61": 2}  # code points and UTF-16 units disagree
    assert encode_canonical(value) == rfc8785.dumps(value)
    assert encode_canonical(value).startswith('{"\U0001f600"'.encode())


def test_floats_use_the_reference_encoder():
    assert encode_canonical({"x": 1e-7, "y": 1.0, "z": -0.0}) == b'{"x":1e-7,"y":1,"z":0}'


def test_a_value_nested_hundreds_deep_encodes_or_fails_with_encoding_error():
    """A converted value 400 lists deep (conversion accepts it) is encoded by the reference
    encoder (orjson refuses past 255), not a RecursionError from the fast-path check; one too
    deep for any encoder is an EncodingError (``encode_or_marker`` journals a marker for it)."""
    import sys

    import rfc8785

    from sagacity_agents.core.canonical import encode_canonical, to_canonical_value
    from sagacity_agents.core.saga.payloads import encode_or_marker
    from sagacity_agents.errors import EncodingError

    deep: object = 1
    for _ in range(400):
        deep = [deep]
    converted = to_canonical_value(deep)
    assert encode_canonical(converted) == rfc8785.dumps(converted)
    deeper: object = 1
    for _ in range(sys.getrecursionlimit() - 100):
        deeper = [deeper]
    try:
        encode_canonical(to_canonical_value(deeper))
    except EncodingError:
        pass
    marker = encode_or_marker(deeper)
    assert isinstance(marker, (list, dict))
