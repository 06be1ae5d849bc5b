"""Declarations and undo data: ``sensitive=`` leaves the model's JSON schema unchanged; a
compensatable tool whose undo data holds a declared sensitive value is refused without a master
key (naming ``SAGACITY_DATA_KEY``); with one, the undo gets the clear value back from its
encrypted copy while no stored byte holds it; without one, an undo that meets an undeclared
sensitive value gets its mask."""

from __future__ import annotations

import pytest
from agents import function_tool

from sagacity_agents import SagaStatus, compensable
from sagacity_agents.backends import Phase
from sagacity_agents.core.sensitive import is_committed
from sagacity_agents.errors import ConfigurationError

from .helpers import CARD, charge_and_ship, data_keys, leaks, open_sagacity, stored_bytes
from tests.sdk.helpers import agent, scripted


def _schema(**declaration):
    @function_tool
    @compensable(undo=lambda ctx: None, scope="sensitive-schema", **declaration)
    def charge_card(card_number: str, cvv: str, amount_eur: int) -> str:
        """Charge a card."""
        return "ok"

    return charge_card.params_json_schema


@pytest.mark.case("X-01")
def test_declaring_sensitive_fields_leaves_the_model_schema_unchanged():
    assert _schema(sensitive={"card_number", "cvv"}) == _schema()


@pytest.mark.case("X-01")
def test_sensitive_undo_data_without_a_master_key_is_refused_at_declaration(without_master):
    with pytest.raises(ConfigurationError, match="SAGACITY_DATA_KEY"):
        @compensable(undo=lambda ctx: None, scope="sensitive-refused",
                     sensitive={"undo_data.card_number"})
        def charge_card(card_number: str, amount_eur: int) -> str:
            return "ok"


def _charging_agent(undone: list, sensitive: set[str] | None):
    """Charge (undo data: the card number and the charge id), then a step that fails: the
    charge is refunded with the undo data it recorded."""
    model = scripted([("charge_card", {"card_number": CARD, "amount_eur": 50}, "c1")],
                     [("ship", {"order": "o-1"}, "c2")], "done")
    tools = charge_and_ship(lambda ctx: undone.append(dict(ctx.undo_data)), scope="sensitive-undo",
                            sensitive=sensitive)
    return agent(model, *tools)


@pytest.mark.case("X-02")
async def test_compensation_decrypts_the_undo_data_it_needs(place, with_master):
    """Declared ``undo_data.card``: journaled committed and sealed; the refund gets the clear
    card number; no stored byte holds it."""
    undone: list = []
    s = open_sagacity(place.sagacity_location(), data_keys(True))
    try:
        result = await s.run(_charging_agent(undone, {"undo_data.card"}), "charge and ship")
        assert result.status is SagaStatus.COMPENSATED, result.exception
        assert undone == [{"card": CARD, "charge_id": "ch_9"}]
        entries = await s.journal.entries(result.saga_id)
        executed = next(e for e in entries if e.phase is Phase.EXECUTED and e.tool == "charge_card")
        assert is_committed(executed.payload["undo_data"]["card"])
        assert executed.sealed is not None
        assert leaks(await stored_bytes(place.name, place.location, s.journal, s.approvals)) == []
        for verified in await s.verify(result.saga_id):
            assert verified.ok, verified
    finally:
        await s.aclose()


@pytest.mark.case("X-02")
async def test_without_a_master_key_an_undo_gets_the_mask(place, without_master):
    """Undeclared undo data under a default name (``card``) without a master key: committed and
    not stored, so the undo gets the mask (it cannot get what was never kept)."""
    undone: list = []
    s = open_sagacity(place.sagacity_location(), data_keys(False))
    try:
        result = await s.run(_charging_agent(undone, None), "charge and ship")
        assert result.status is SagaStatus.COMPENSATED, result.exception
        assert undone == [{"card": "**** **** **** 1111", "charge_id": "ch_9"}]
        assert leaks(await stored_bytes(place.name, place.location, s.journal, s.approvals)) == []
    finally:
        await s.aclose()
