"""Fast checks of the τ-bench airline domain (store, tools, undos, invariants).

A handful of recorded conversations is replayed: their tool outputs must agree
with the recordings (up to documented data differences) and compensating any
prefix of them must leave the business invariants intact.  The full runs are
``python -m examples.tau_airline.crosscheck`` and ``... .undo_check``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from examples.tau_airline.crosscheck import crosscheck
from examples.tau_airline.invariants import check_invariants
from examples.tau_airline.recordings import Conversation, load_conversations
from examples.tau_airline.store import AirlineStore
from examples.tau_airline.tools import (
    book_reservation,
    calculate,
    call_tool,
    cancel_reservation,
    update_reservation_baggages,
)
from examples.tau_airline.undo import undo_book_reservation, undo_update_reservation_baggages
from examples.tau_airline.undo_check import check_conversation

#: (task, trial): why the conversation is in the subset.
SUBSET = {
    (0, 0): "refused booking, then certificate + card booking",
    (3, 0): "one-stop searches, five refused flight updates",
    (4, 2): "booking with a gift card, then a bag update on the new reservation",
    (11, 1): "booking that uses up a 500 certificate for part of the price",
    (15, 0): "refused flight update of GV1N64, then GV1N64 cancelled (nothing to undo)",
    (17, 1): "one-stop outputs that depend on the original's date quirks",
    (34, 0): "flight update of XEHM4B, then XEHM4B and 59XX6W cancelled",
    (37, 0): "send_certificate",
}


@pytest.fixture(scope="module")
def subset(data_dir: Path) -> list[Conversation]:
    by_key = {(c.task_id, c.trial): c for c in load_conversations(data_dir)}
    return [by_key[key] for key in SUBSET]


@pytest.fixture()
def store(data_dir: Path) -> AirlineStore:
    with AirlineStore(data_dir) as fresh:
        yield fresh


def test_crosscheck_agrees_on_subset(data_dir: Path, subset: list[Conversation]) -> None:
    report = crosscheck(data_dir, subset)
    assert report.total == sum(len(c.calls) for c in subset) > 50
    assert report.unexplained == []
    # The only difference is the address key renamed in the shared data.
    assert {c.verdict for c in report.comparisons if not c.agrees} <= {"address-field-renamed"}
    assert all(c.agrees for c in report.comparisons if c.tool != "get_user_details")
    assert report.onestop_quirk_dependent  # task 17 trial 1 exercises the quirks


def test_undo_check_has_no_violations(data_dir: Path, subset: list[Conversation]) -> None:
    cases = [case for conversation in subset for case in check_conversation(conversation, data_dir)]
    assert len(cases) >= 10
    assert [(c.conversation, c.last_position, v) for c in cases for v in c.violations] == []
    assert all(case.users_identical for case in cases)
    kept_updates = [
        description
        for case in cases
        if case.conversation == "task 34 trial 0" and case.kept
        for _, description in case.compensated
    ]
    assert kept_updates and all("kept" in d for d in kept_updates)


def test_refusal_changes_nothing_and_records_nothing(store: AirlineStore) -> None:
    before = store.snapshot()
    records: list[dict] = []
    output = call_tool(
        store,
        "update_reservation_baggages",
        {"reservation_id": "NOPE00", "total_baggages": 1, "nonfree_baggages": 1, "payment_id": "x"},
        record=records.append,
    )
    assert output == "Error: reservation not found"
    assert records == []
    assert store.snapshot() == before


def test_malformed_arguments_become_errors(store: AirlineStore) -> None:
    output = call_tool(store, "book_reservation", {"user_id": "mia_li_3668"})
    assert output.startswith("Error:")


def test_calculate() -> None:
    assert calculate(None, "(350 - 122) * 2") == "456.0"
    assert calculate(None, "10 / 3") == "3.33"
    assert calculate(None, "1 / 0") == "Error: division by zero"
    assert calculate(None, "__import__('os')") == "Error: invalid characters in expression"


def _book_with_certificate(store: AirlineStore, records: list[dict]) -> str:
    """Book HATHAT for mia_li_3668 (255 fare + one 50 bag): 250 by certificate, 55 by card."""
    return book_reservation(
        store,
        "mia_li_3668",
        "JFK",
        "SEA",
        "one_way",
        "economy",
        [
            {"flight_number": "HAT136", "date": "2024-05-20"},
            {"flight_number": "HAT039", "date": "2024-05-20"},
        ],
        [{"first_name": "Mia", "last_name": "Li", "dob": "1990-04-05"}],
        [
            {"payment_id": "certificate_7504069", "amount": 250},
            {"payment_id": "credit_card_4421486", "amount": 55},
        ],
        3,
        1,
        "no",
        record=records.append,
    )


def test_booking_undo_restores_certificate_and_user(store: AirlineStore) -> None:
    before = store.snapshot()
    records: list[dict] = []
    result = _book_with_certificate(store, records)
    assert json.loads(result)["reservation_id"] == "HATHAT"
    assert len(records) == 1
    violations = check_invariants(before, store.snapshot())
    assert any(v.startswith("[1]") for v in violations)  # the certificate is gone
    assert any(v.startswith("[3]") for v in violations)  # HATHAT is active
    undo_book_reservation(store, {}, result, records[0])
    after = store.snapshot()
    assert check_invariants(before, after) == []
    assert after["users"]["mia_li_3668"] == before["users"]["mia_li_3668"]


def test_undo_after_approved_cancel_pays_nothing_twice(store: AirlineStore) -> None:
    records: list[dict] = []
    booked = _book_with_certificate(store, records)
    bags = update_reservation_baggages(
        store, "HATHAT", 2, 2, "credit_card_4421486", record=records.append
    )
    assert json.loads(bags)["payment_history"][-1] == {
        "payment_id": "credit_card_4421486",
        "amount": 50,
    }
    cancel_reservation(store, "HATHAT")
    settled = store.snapshot()
    assert "kept" in undo_update_reservation_baggages(store, {}, bags, records[1])
    assert "kept" in undo_book_reservation(store, {}, booked, records[0])
    assert store.snapshot() == settled  # no refund entry, no balance credited twice
