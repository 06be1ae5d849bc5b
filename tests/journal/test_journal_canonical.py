"""The canonical conversion rules (core/canonical.py), one rule at a time."""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import hashlib
from decimal import Decimal

import pytest
from pydantic import BaseModel, field_serializer

from sagacity_agents.core.canonical import (
    MAX_SAFE_INTEGER,
    canonical_bytes,
    format_timestamp,
    parse_json,
    sha256_hex,
    to_canonical_value,
)
from sagacity_agents.errors import EncodingError

UTC = dt.UTC


# --- integers -------------------------------------------------------------------------------


def test_max_safe_integer_is_2_pow_53_minus_1():
    assert MAX_SAFE_INTEGER == 2**53 - 1 == 9007199254740991


@pytest.mark.parametrize("value", [0, 1, -1, 2**53 - 1, -(2**53 - 1)])
def test_safe_integers_stay_numbers(value):
    assert to_canonical_value(value) == value
    assert canonical_bytes(value) == str(value).encode()


@pytest.mark.parametrize("value", [2**53, -(2**53), 2**64 + 1, -(10**30), 10**400])
def test_big_integers_become_decimal_strings(value):
    assert to_canonical_value(value) == str(value)
    assert canonical_bytes({"n": value}) == b'{"n":"' + str(value).encode() + b'"}'


def test_bools_are_not_integers():
    assert canonical_bytes([True, False, None]) == b"[true,false,null]"


# --- floats and decimals --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [(1.0, b"1"), (-0.0, b"0"), (1e-7, b"1e-7"), (1e21, b"1e+21"), (0.1, b"0.1"), (123.456, b"123.456")],
)
def test_floats_use_rfc8785_number_form(value, expected):
    assert canonical_bytes(value) == expected


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_nan_and_infinity_refused(value):
    with pytest.raises(EncodingError, match=r"\$\.x"):
        to_canonical_value({"x": value})


@pytest.mark.parametrize(
    ("value", "expected"),
    [(Decimal("10.10"), "10.10"), (Decimal("1E+2"), "1E+2"), (Decimal("-0.000"), "-0.000")],
)
def test_decimal_becomes_its_string(value, expected):
    assert to_canonical_value(value) == expected


@pytest.mark.parametrize("value", [Decimal("NaN"), Decimal("Infinity"), Decimal("sNaN")])
def test_non_finite_decimal_refused(value):
    with pytest.raises(EncodingError):
        to_canonical_value(value)


# --- bytes ----------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", [bytes, bytearray, memoryview])
def test_bytes_become_standard_base64(kind):
    assert to_canonical_value(kind(b"\x00\xffhi")) == "AP9oaQ=="
    assert to_canonical_value(kind(b"\xfb\xff")) == "+/8="  # standard alphabet, padded


# --- datetimes ------------------------------------------------------------------------------


def test_datetime_fixed_width_utc():
    assert to_canonical_value(dt.datetime(2026, 1, 1, tzinfo=UTC)) == "2026-01-01T00:00:00.000000Z"
    plus2 = dt.timezone(dt.timedelta(hours=2))
    assert to_canonical_value(dt.datetime(2026, 1, 1, 2, 0, 0, 7, tzinfo=plus2)) == (
        "2026-01-01T00:00:00.000007Z"
    )


def test_datetime_fixed_width_for_small_years():
    # strftime("%Y") does not pad years below 1000 on glibc.
    assert format_timestamp(dt.datetime(5, 1, 2, 3, 4, 5, 6, tzinfo=UTC)) == "0005-01-02T03:04:05.000006Z"
    assert format_timestamp(dt.datetime(999, 12, 31, tzinfo=UTC)) == "0999-12-31T00:00:00.000000Z"


def test_naive_datetime_kept_without_zone_and_refused_as_a_timestamp():
    """A naive datetime in a tool's arguments (a model sends "2025-06-12T10:00:00") is journaled
    as what it is: fixed width, no zone marker, never guessed to be UTC. Journal timestamps
    themselves must be aware."""
    assert to_canonical_value({"when": dt.datetime(2026, 1, 1, 10)}) == {"when": "2026-01-01T10:00:00.000000"}
    with pytest.raises(EncodingError, match="naive"):
        format_timestamp(dt.datetime(2026, 1, 1))


def test_date_is_iso():
    assert to_canonical_value(dt.date(2026, 2, 3)) == "2026-02-03"


# --- containers -----------------------------------------------------------------------------


def test_set_sorted_by_canonical_bytes():
    assert to_canonical_value({"b", "a", "c"}) == ["a", "b", "c"]
    assert to_canonical_value(frozenset({3, 1, 2})) == [1, 2, 3]


def test_set_of_mixed_types_sorts_deterministically():
    value = {"b", 10, 2, None, 1.5, (1, "x"), "a", False}
    expected = ["a", "b", 1.5, 10, 2, [1, "x"], False, None]  # bytes order: '"' < '1' < '2' < '[' < 'f' < 'n'
    assert to_canonical_value(value) == expected
    for order in (list(value), list(reversed(list(value))), sorted(value, key=repr)):
        assert to_canonical_value(set(order)) == expected
        assert canonical_bytes(frozenset(order)) == b'["a","b",1.5,10,2,[1,"x"],false,null]'


def test_tuple_becomes_list_and_dict_keys_must_be_strings():
    assert to_canonical_value((1, (2, 3))) == [1, [2, 3]]
    with pytest.raises(EncodingError, match="key"):
        to_canonical_value({"ok": {1: "x"}})


class Color(enum.Enum):
    RED = "red"


class Level(enum.IntEnum):
    HIGH = 3


def test_enums_become_their_values():
    assert to_canonical_value([Color.RED, Level.HIGH]) == ["red", 3]


# --- models ---------------------------------------------------------------------------------


class Booking(BaseModel):
    hotel: str
    nights: int
    price: Decimal
    secret_note: str = "x"

    @field_serializer("secret_note")
    def _hide(self, value: str) -> str:
        return "***"


def test_pydantic_model_is_its_json_mode_dump():
    booking = Booking(hotel="Ritz", nights=2, price=Decimal("99.90"))
    assert to_canonical_value(booking) == booking.model_dump(mode="json")
    assert to_canonical_value(booking) == {"hotel": "Ritz", "nights": 2, "price": "99.90", "secret_note": "***"}
    assert canonical_bytes({"b": booking}) == (
        b'{"b":{"hotel":"Ritz","nights":2,"price":"99.90","secret_note":"***"}}'
    )


@dataclasses.dataclass
class Seat:
    row: int
    letter: str


@dataclasses.dataclass
class Ticket:
    seat: Seat
    when: dt.datetime
    total: Decimal
    tags: set[str]
    raw: bytes


def test_dataclass_dump_then_rules():
    ticket = Ticket(Seat(12, "A"), dt.datetime(2026, 1, 1, tzinfo=UTC), Decimal("10.10"), {"b", "a"}, b"\x01")
    assert to_canonical_value(ticket) == {
        "seat": {"row": 12, "letter": "A"},
        "when": "2026-01-01T00:00:00.000000Z",
        "total": "10.10",
        "tags": ["a", "b"],
        "raw": "AQ==",
    }


def test_dataclass_class_itself_is_not_encodable():
    with pytest.raises(EncodingError, match="type"):
        to_canonical_value(Seat)


def test_unknown_object_refused_with_path_and_type():
    class Handle:
        pass

    with pytest.raises(EncodingError) as info:
        to_canonical_value({"a": [1, {"b": Handle()}]})
    assert "$.a[1].b" in str(info.value) and "Handle" in str(info.value)
    assert "0x" not in str(info.value)


# --- parse_json and hashing -----------------------------------------------------------------


def test_parse_json_refuses_constants_and_bad_text():
    for text in ("NaN", '{"a": Infinity}', "-Infinity", "{", '{"a":1,}'):
        with pytest.raises(EncodingError):
            parse_json(text)
    assert parse_json(b'{"a":[1,2.5,"x",null,true]}') == {"a": [1, 2.5, "x", None, True]}


def test_unicode_not_normalized_and_not_escaped():
    assert canonical_bytes("\u00e9") != canonical_bytes("e\u0301")
    assert canonical_bytes("\u20ac\U0001f600") == '"\u20ac\U0001f600"'.encode()
    assert canonical_bytes("\n\t\"\\\x1f") == b'"\\n\\t\\"\\\\\\u001f"'


def test_sha256_hex():
    assert sha256_hex(b"") == hashlib.sha256(b"").hexdigest()
    assert sha256_hex(b"abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
