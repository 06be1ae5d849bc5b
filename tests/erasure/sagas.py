"""Sagas written by hand for the erasure tests: each in one of the states erasure refuses or
allows, with a card number in an INTENT's arguments and a token in its result, committed and
sealed under the saga's data key (a master key the tests fix)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from sagacity_agents.core.authenticity import signing_view
from sagacity_agents.core.data_keys import DataKeys, MasterKey
from sagacity_agents.core.entries import Phase
from sagacity_agents.core.fence import JournalView
from sagacity_agents.core.identity import journal_id_of, opening_payload

MASTER = MasterKey(bytes(range(32)))
NEW_MASTER = MasterKey(bytes(range(32, 64)))
CARD = "4000 0000 0000 0002"
TOKEN = "tok_live_abcdef123456"
LATE_TOKEN = "tok_late_987654321"
FAR = dt.datetime(2100, 1, 1, tzinfo=dt.timezone.utc)
"""A clock past every deadline of the sagas written here."""

SHAPES = ("closed", "open", "awaiting", "in_doubt", "dirty", "reopened", "stalled")


def keys() -> DataKeys:
    """This process's data keys under the tests' master key."""
    return DataKeys(MASTER)


async def writer(journal: Any, data_keys: DataKeys, saga_id: str, keyring: Any = None) -> JournalView:
    """A writer's view of ``journal`` whose appends to ``saga_id`` commit and seal its values."""
    view = signing_view(journal, keyring) if keyring is not None else JournalView(journal)
    view.secrets[saga_id] = await data_keys.for_saga(journal, saga_id)
    view.data_keys = data_keys
    return view


async def write_saga(journal: Any, data_keys: DataKeys, saga_id: str, shape: str = "closed",
                     keyring: Any = None) -> dict[str, Any]:
    """Write ``saga_id`` in ``shape`` (:data:`SHAPES`); returns the view and the seqs.

    ``stalled``: run r1 wrote an INTENT and stalled; a recovery (r2) took over, a human answered
    "not run" and it closed: r1's late outcome may still land.
    """
    view = await writer(journal, data_keys, saga_id, keyring)
    opened = opening_payload({}, await journal_id_of(journal))
    await view.append(saga_id, Phase.SAGA_OPENED, write_key="open", payload=opened)
    r1 = await view.append(saga_id, Phase.RUN_STARTED, write_key="run1",
                           payload={"holder": "a", "lease_seconds": 30})
    intent = await view.append(saga_id, Phase.INTENT, write_key="i1", tool="pay", call_id="c1",
                               fence=r1.seq, payload={"args": {"card_number": CARD, "amount": 5},
                                                      "deadline_seconds": 60})
    seqs: dict[str, Any] = {"view": view, "r1": r1.seq, "intent": intent.seq}
    if shape in ("in_doubt", "stalled"):
        if shape == "in_doubt":
            await view.append(saga_id, Phase.RUN_ENDED, write_key="end1", fence=r1.seq,
                              payload={"holder": "a", "status": "IN_DOUBT"})
            return seqs
        r2 = await view.append(saga_id, Phase.RUN_STARTED, write_key="run2",
                               payload={"holder": "b", "lease_seconds": 30, "agent": "recover"})
        await view.append(saga_id, Phase.RESOLVED, write_key="resolve", tool="pay", call_id="c1",
                          payload={"target_seq": intent.seq, "target": "call", "answer": "not_run",
                                   "resolver": "ops", "reason": "checked"})
        close = await view.append(saga_id, Phase.SAGA_CLOSED, write_key="close", fence=r2.seq,
                                  payload={"status": "COMPENSATED"})
        return {**seqs, "r2": r2.seq, "close": close.seq}
    executed = await view.append(saga_id, Phase.EXECUTED, write_key="e1", tool="pay", call_id="c1",
                                 fence=r1.seq, payload={"intent_seq": intent.seq,
                                                        "result": {"token": TOKEN}})
    seqs["executed"] = executed.seq
    if shape == "open":
        return seqs
    status = {"awaiting": "AWAITING_APPROVAL"}.get(shape, "COMPLETED")
    await view.append(saga_id, Phase.RUN_ENDED, write_key="end1", fence=r1.seq,
                      payload={"holder": "a", "status": status})
    if shape == "awaiting":
        return seqs
    closing: dict[str, Any] = {"status": "COMPLETED"}
    if shape == "dirty":
        closing = {"status": "COMPENSATED", "report": {"failed": [
            {"seq": executed.seq, "tool": "pay", "call_id": "c1", "detail": "undo raised"}]}}
    close = await view.append(saga_id, Phase.SAGA_CLOSED, write_key="close", payload=closing)
    seqs["close"] = close.seq
    if shape == "reopened":
        late = await view.append(saga_id, Phase.EXECUTED, write_key="e-late", tool="pay",
                                 call_id="c1", fence=r1.seq, late=True,
                                 payload={"intent_seq": intent.seq, "result": {"token": TOKEN}})
        seqs["late"] = late.seq
    return seqs
