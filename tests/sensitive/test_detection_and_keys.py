"""What the core finds sensitive (defaults, declarations, free text) and what its keys do
(commitments, sealing, binding to journal/saga/write key/path, wrapping, rotation)."""

from __future__ import annotations

import asyncio
import json
import os

import pytest

from sagacity_agents.core.canonical import encode_canonical, to_canonical_value
from sagacity_agents.core.data_keys import (
    DataKeys, MasterKey, StoredDataKey, is_sealed_text, parse_master_key,
)
from sagacity_agents.core.sensitive import (
    DEFAULT_SENSITIVITY, MASK, SENSITIVE_KEY, Sensitivity, has_committed, is_card_number,
    luhn_valid, masked, normalise_name,
)
from sagacity_agents.errors import ConfigurationError, DataErasedError, DataKeyError

CARD = "4000 0000 0000 0002"


class _Store:
    """The smallest data-key store: the contract's insert-if-absent and erase."""

    def __init__(self) -> None:
        self.rows: dict[tuple[str, int], StoredDataKey] = {}

    async def data_keys(self, saga_id):
        return [r for (s, _), r in sorted(self.rows.items()) if s == saga_id]

    async def add_data_key(self, saga_id, generation, master_key_id, wrapped):
        return self.rows.setdefault((saga_id, generation),
                                    StoredDataKey(saga_id, generation, master_key_id, wrapped, "t"))

    async def may_erase_data_keys(self):
        return True

    async def erase_data_keys(self, saga_id, *, by, reason):
        erased = 0
        for key, row in list(self.rows.items()):
            if key[0] == saga_id and row.wrapped is not None:
                self.rows[key] = StoredDataKey(saga_id, row.generation, row.master_key_id, None,
                                               row.created_at, "t", by, reason)
                erased += 1
        return erased


def _secrets(keys: DataKeys, store=None, saga="s1", journal_id="J"):
    return asyncio.run(keys.secrets_for(store if store is not None else _Store(), saga,
                                        journal_id=journal_id))


def _payload(**data):
    return to_canonical_value(data)


@pytest.mark.case("X-01")
@pytest.mark.parametrize("text, card", [
    (CARD, True), ("4000000000000002", True), ("4242-4242-4242-4242", True),
    ("4000 0000 0000 0003", False), ("1234", False), ("12345678901234567890", False),
    ("4000 0000 0000 000a", False),
])
def test_card_numbers_are_luhn_valid_13_to_19_digits_after_spaces_and_dashes(text, card):
    assert is_card_number(text) is card


@pytest.mark.case("X-01")
def test_default_names_match_their_snake_forms_and_suffixes():
    spec = DEFAULT_SENSITIVITY
    for name in ["password", "apiKey", "API-KEY", "cvv", "cvc", "pin", "card_number", "cardNumber",
                 "card", "pan", "access_token", "db_password", "client_secret"]:
        assert spec.names_field(name), name
    for name in ["amount", "shipping", "pinned", "company", "tokenizer"]:
        assert not spec.names_field(name), name
    assert normalise_name("cardNumber") == "card_number"


@pytest.mark.case("X-01")
def test_every_default_can_be_switched_off_per_tool():
    payload = _payload(args={"token": "page-2-of-9", "number": CARD})
    secrets = _secrets(DataKeys())
    kept, sealed = secrets.protect(payload, Sensitivity(names=False, card_numbers=False), "w")
    assert kept == payload and sealed is None
    exempt, _ = secrets.protect(payload, Sensitivity(exempt={"token"}), "w")
    assert exempt["args"]["token"] == "page-2-of-9"
    assert exempt["args"]["number"]["mask"] == "**** **** **** 0002"


@pytest.mark.case("X-01")
def test_declared_names_and_rooted_paths_and_free_text():
    secrets = _secrets(DataKeys())
    spec = Sensitivity.of({"iban", "result.reference"})
    payload = _payload(args={"iban": "DE89370400440532013000", "note": f"card {CARD} please"},
                       result={"reference": "R-77", "other": {"reference": "kept"}},
                       error="no", intent_seq=3, args_hash="4" * 64)
    out, _ = secrets.protect(payload, spec, "w")
    assert out["args"]["iban"]["mask"] == MASK
    assert out["args"]["note"]["mask"] == "card **** **** **** 0002 please"
    assert out["result"]["reference"]["mask"] == MASK
    assert out["result"]["other"]["reference"] == "kept"  # a rooted path matches its place only
    assert out["args_hash"] == "4" * 64 and out["intent_seq"] == 3  # structure is never scanned


@pytest.mark.case("X-01")
def test_a_value_found_once_is_masked_in_later_free_text_of_the_saga():
    secrets = _secrets(DataKeys())
    secrets.protect(_payload(args={"password": "hunter22"}), DEFAULT_SENSITIVITY, "w1")
    out, _ = secrets.protect(_payload(error="login failed: password 'hunter22' rejected"),
                             DEFAULT_SENSITIVITY, "w2")
    assert "hunter22" not in json.dumps(out)
    assert out["error"]["mask"] == "login failed: password '****' rejected"


@pytest.mark.case("X-01")
@pytest.mark.parametrize("spec", [{"card": 1}, 3, {"nope.card"}, {""}])
def test_a_bad_declaration_is_refused_with_a_clear_error(spec):
    with pytest.raises((TypeError, ValueError), match="sensitive"):
        Sensitivity.of(spec)


@pytest.mark.case("X-02")
def test_commitments_are_keyed_per_saga_and_equal_within_one():
    keys = DataKeys()
    one, two = _secrets(keys, saga="a"), _secrets(keys, saga="b")
    assert one.commit(CARD) == one.commit(CARD) != two.commit(CARD)
    assert len(one.commit(CARD)) == 64


@pytest.mark.case("X-02")
def test_without_a_master_key_values_are_committed_and_not_stored():
    secrets = _secrets(DataKeys())
    out, sealed = secrets.protect(_payload(args={"card_number": CARD}), DEFAULT_SENSITIVITY, "w")
    assert sealed is None and not secrets.stored
    assert CARD not in json.dumps(out) and has_committed(out)
    assert masked(out) == {"args": {"card_number": "**** **** **** 0002"}}
    with pytest.raises(DataKeyError) as refused:
        secrets.seal_text("snapshot", "x")
    assert refused.value.code == "NOT_STORED"


@pytest.mark.case("X-02")
def test_sealed_values_open_only_at_their_journal_saga_write_key_and_path():
    master = MasterKey(os.urandom(32))
    store = _Store()
    secrets = _secrets(DataKeys(master), store)
    payload = _payload(args={"card_number": CARD, "cvv": "123"}, result={"token": "tok_live_9"})
    out, sealed = secrets.protect(payload, DEFAULT_SENSITIVITY, "w1")
    assert secrets.stored and sealed is not None
    for clear in (CARD.encode(), b"4000000000000002", b"tok_live_9"):
        assert clear not in sealed and clear not in encode_canonical(out)
    assert secrets.reveal(out, sealed, "w1") == payload
    with pytest.raises(DataKeyError, match="does not open"):
        secrets.reveal(out, sealed, "w2")  # moved to another entry
    swapped = {**out, "args": {"card_number": out["args"]["cvv"], "cvv": out["args"]["card_number"]}}
    with pytest.raises(DataKeyError):
        secrets.reveal(swapped, sealed, "w1")  # moved to another path
    with pytest.raises(DataKeyError):  # the wrapped key is bound to its journal id
        asyncio.run(DataKeys(master).secrets_for(store, "s1", journal_id="other"))
    # A process with the master key reads it back through the stored (wrapped) key.
    fresh = asyncio.run(DataKeys(master).secrets_for(store, "s1", journal_id="J"))
    assert fresh.reveal(out, sealed, "w1") == payload


@pytest.mark.case("X-02")
def test_a_data_key_is_stored_only_wrapped_and_needs_its_master_key():
    master = MasterKey(os.urandom(32))
    store = _Store()
    secrets = _secrets(DataKeys(master), store)
    row = store.rows[("s1", 1)]
    assert row.master_key_id == master.key_id and len(row.wrapped) == 12 + 32 + 16
    with pytest.raises(DataKeyError) as refused:
        asyncio.run(DataKeys(MasterKey(os.urandom(32))).secrets_for(store, "s1", journal_id="J"))
    assert refused.value.code == "WRONG_MASTER_KEY"
    assert secrets.generation == 1


@pytest.mark.case("X-02")
def test_rotation_unwraps_with_a_previous_master_key_and_rewraps_under_the_new():
    old, new = MasterKey(os.urandom(32)), MasterKey(os.urandom(32))
    store = _Store()
    secrets = _secrets(DataKeys(old), store)
    out, sealed = secrets.protect(_payload(args={"pin": "9876"}), DEFAULT_SENSITIVITY, "w")
    rotating = DataKeys(new, [old])
    key_id, wrapped = rotating.rewrapped("J", store.rows[("s1", 1)])
    store.rows[("s1", 1)] = StoredDataKey("s1", 1, key_id, wrapped, "t")
    after = asyncio.run(DataKeys(new).secrets_for(store, "s1", journal_id="J"))
    assert after.reveal(out, sealed, "w")["args"]["pin"] == "9876"


@pytest.mark.case("X-04")
def test_after_erasure_nothing_opens_and_a_late_value_gets_a_fresh_generation():
    master = MasterKey(os.urandom(32))
    store = _Store()
    secrets = _secrets(DataKeys(master), store)
    out, sealed = secrets.protect(_payload(args={"card_number": CARD}), DEFAULT_SENSITIVITY, "w")
    asyncio.run(store.erase_data_keys("s1", by="dpo", reason="request 17"))
    reader = asyncio.run(DataKeys(master).secrets_for(store, "s1", journal_id="J", create=False))
    with pytest.raises(DataErasedError):
        reader.reveal(out, sealed, "w")
    writer = asyncio.run(DataKeys(master).secrets_for(store, "s1", journal_id="J"))
    assert writer.generation == 2 and writer.after_erasure
    late, late_sealed = writer.protect(_payload(result={"token": "tok_9"}), DEFAULT_SENSITIVITY, "l")
    assert late["result"]["token"]["key"] == 2
    assert writer.reveal(late, late_sealed, "l")["result"]["token"] == "tok_9"
    with pytest.raises(DataErasedError):
        writer.reveal(out, sealed, "w")


@pytest.mark.case("X-02")
def test_sealed_texts_are_bound_to_purpose():
    secrets = _secrets(DataKeys(MasterKey(os.urandom(32))))
    box = secrets.seal_text("snapshot", f"prompt with {CARD}")
    assert is_sealed_text(box) and CARD not in box
    assert secrets.open_text("snapshot", box) == f"prompt with {CARD}"
    with pytest.raises(DataKeyError):
        secrets.open_text("approval-args", box)


@pytest.mark.case("X-02")
@pytest.mark.parametrize("text", ["short", "z" * 64, "AAAA"])
def test_a_master_key_is_exactly_32_bytes(text):
    with pytest.raises(ConfigurationError, match="SAGACITY_DATA_KEY"):
        parse_master_key(text)


def test_master_keys_read_from_hex_and_base64():
    raw = os.urandom(32)
    import base64
    assert parse_master_key(raw.hex()) == raw
    assert parse_master_key(base64.b64encode(raw).decode()) == raw
    assert parse_master_key(base64.urlsafe_b64encode(raw).decode().rstrip("=")) == raw
    assert "key_id" in repr(MasterKey(raw)) and raw.hex() not in repr(MasterKey(raw))


def test_luhn():
    assert luhn_valid("79927398713") and not luhn_valid("79927398710")


def test_a_committed_value_is_the_only_shape_masked():
    value = {SENSITIVE_KEY: "0" * 64, "mask": "****"}
    assert masked({"a": [value, {"b": value}], "c": 1}) == {"a": ["****", {"b": "****"}], "c": 1}
    assert masked(value, erased=True) == "[erased]"
