"""``Sagacity.erase`` end to end: a run of real tools whose arguments and undo data hold a card
number. An open saga refuses the erasure; forced, the erasure leaves a recovery that would need
the erased undo data refusing to undo blind (reported dirty, named), and everything verifies.
A completed saga refuses before its calls' deadlines, then is erased with a reason, forced."""

from __future__ import annotations

import base64

import pytest
from agents import function_tool

from sagacity_agents import CompensationContext, Sagacity, SagaStatus, compensable, record_undo_data
from sagacity_agents.core.data_keys import DataKeys, MasterKey
from sagacity_agents.core.entries import ACCESS_SAGA
from sagacity_agents.errors import DataErasedError, SagaStateError
from tests.sdk.helpers import agent, scripted

from .sagas import CARD

pytestmark = pytest.mark.case("X-04")

MASTER = base64.b64encode(bytes(range(32))).decode()


def _tools(log: list):
    def refund(ctx: CompensationContext) -> None:
        log.append(ctx.undo_data)

    @function_tool
    @compensable(undo=refund)
    def charge(card_number: str, amount: int) -> dict:
        record_undo_data({"card": card_number, "charge_id": "ch_1"})
        return {"charge_id": "ch_1"}

    return charge


async def test_a_forced_erasure_leaves_recovery_refusing_to_undo_without_the_data(journal):
    log: list = []
    sagacity = Sagacity(journal, data_key=MASTER)
    charge = _tools(log)
    script = scripted([("charge", {"card_number": CARD, "amount": 5}, "c1")], "done")
    result = await sagacity.run(agent(script, charge), "pay", close=False)  # kept open
    with pytest.raises(SagaStateError) as refused:
        await sagacity.erase(result.saga_id, by="dpo", reason="gdpr art. 17")
    assert refused.value.code == "OPEN"
    done = await sagacity.erase(result.saga_id, by="dpo", reason="customer asked; ops approved",
                                force=True)
    assert done.forced and done.generations == (1,)

    recovered = await sagacity.recover(result.saga_id, agent(scripted("done"), charge))
    assert log == []  # the undo never ran on masks
    assert recovered.status is SagaStatus.COMPENSATION_FAILED
    (item,) = recovered.report.failed
    assert "erased" in item.detail
    assert all(v.ok for v in await sagacity.verify(result.saga_id))
    assert all(v.ok for v in await sagacity.verify(ACCESS_SAGA))
    intent = (await journal.entries(result.saga_id))[2]
    reader = await DataKeys(MasterKey.from_text(MASTER)).for_saga(journal, result.saga_id,
                                                                  create=False)
    with pytest.raises(DataErasedError):
        reader.reveal(intent.payload, intent.sealed, intent.write_key)


async def test_a_completed_saga_waits_for_its_calls_deadlines_unless_forced(journal):
    sagacity = Sagacity(journal, data_key=MASTER)
    script = scripted([("charge", {"card_number": CARD, "amount": 5}, "c1")], "done")
    result = await sagacity.run(agent(script, _tools([])), "pay")
    assert result.status is SagaStatus.COMPLETED
    with pytest.raises(SagaStateError) as refused:
        await sagacity.erase(result.saga_id, by="dpo", reason="r")
    assert refused.value.code == "BEFORE_DEADLINE"
    done = await sagacity.erase(result.saga_id, by="dpo", reason="the charge was declined at the "
                                "bank; no late outcome can come", force=True)
    assert done.generations == (1,)
    again = await sagacity.erase(result.saga_id, by="dpo", reason="r", force=True)
    assert again.already
