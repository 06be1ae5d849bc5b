"""The 14 τ-bench airline tools, implemented over :class:`~.store.AirlineStore`.

Every tool is a plain function ``tool(store, **arguments) -> str`` whose output
is formatted like the outputs recorded in ``trajectories-gpt-4o.json``
(``json.dumps`` of the object for lookups and updates).  A refused request
returns a string starting with ``"Error:"`` and changes nothing.

Database-changing tools accept an optional ``record`` callback.  On success
(never on an ``"Error:"`` refusal) they call it exactly once with the
*before-state* an undo needs (see :mod:`.undo`); the tool output itself is not
affected.  The callback is also called by the two irreversible tools
(``cancel_reservation``, ``send_certificate``) so that a journal knows what they
touched, although no undo exists for them.  Each mutating tool runs in one
store transaction and calls ``record`` inside it, so if the callback raises
(e.g. the journal cannot be written) the change is rolled back.

This module does not depend on the saga library: wiring these functions into
``@function_tool`` tools is left to the harness.
"""

from __future__ import annotations

import ast
import copy
import json
import operator
from collections.abc import Callable, Mapping
from typing import Any

from .store import AirlineStore, atomic
from .undo import (
    undo_book_reservation,
    undo_update_reservation_baggages,
    undo_update_reservation_flights,
    undo_update_reservation_passengers,
)

Record = Callable[[dict[str, Any]], None] | None
"""Type of the optional undo-data callback taken by the mutating tools."""

#: Ids that ``book_reservation`` gives new reservations, first free one wins.
NEW_RESERVATION_IDS: tuple[str, ...] = ("HATHAT", "HATHAU", "HATHAV")
#: Ids that ``send_certificate`` gives new certificates, first free one wins.
NEW_CERTIFICATE_IDS: tuple[str, ...] = (
    "certificate_3221322",
    "certificate_3221323",
    "certificate_3221324",
)
#: The benchmark's "now", used as ``created_at`` of new reservations.
NOW = "2024-05-15T15:00:00"
BAG_FEE = 50
INSURANCE_FEE = 30

AIRPORTS: dict[str, str] = {
    "SFO": "San Francisco",
    "JFK": "New York",
    "LAX": "Los Angeles",
    "ORD": "Chicago",
    "DFW": "Dallas",
    "DEN": "Denver",
    "SEA": "Seattle",
    "ATL": "Atlanta",
    "MIA": "Miami",
    "BOS": "Boston",
    "PHX": "Phoenix",
    "IAH": "Houston",
    "LAS": "Las Vegas",
    "MCO": "Orlando",
    "EWR": "Newark",
    "CLT": "Charlotte",
    "MSP": "Minneapolis",
    "DTW": "Detroit",
    "PHL": "Philadelphia",
    "LGA": "LaGuardia",
}


def _emit(record: Record, undo_data: dict[str, Any]) -> None:
    """Pass before-state to the caller's callback, if any."""
    if record is not None:
        record(undo_data)


# ---------------------------------------------------------------------------
# read-only tools
# ---------------------------------------------------------------------------


def get_user_details(store: AirlineStore, user_id: str) -> str:
    """Return a user's profile, payment methods and reservation ids.

    Args:
        store: The airline store.
        user_id: The user id, e.g. ``"sara_doe_496"``.

    Returns:
        ``json.dumps`` of the user, or ``"Error: user not found"``.
    """
    user = store.get_user(user_id)
    return "Error: user not found" if user is None else json.dumps(user)


def get_reservation_details(store: AirlineStore, reservation_id: str) -> str:
    """Return a reservation.

    Args:
        store: The airline store.
        reservation_id: The reservation id, e.g. ``"8JX2WO"``.

    Returns:
        ``json.dumps`` of the reservation, or ``"Error: reservation not found"``.
    """
    reservation = store.get_reservation(reservation_id)
    return "Error: reservation not found" if reservation is None else json.dumps(reservation)


def list_all_airports(store: AirlineStore) -> str:
    """List the 20 airports (IATA code to city).

    Args:
        store: The airline store (unused; kept for a uniform signature).

    Returns:
        ``json.dumps`` of ``{code: city}``.
    """
    return json.dumps(AIRPORTS)


def _flight_on(flight: Mapping[str, Any], day: Mapping[str, Any], date: str | None) -> dict:
    """Flatten a flight and one of its dates into a search result row."""
    row = {k: v for k, v in flight.items() if k != "dates"}
    row.update(day)
    if date is not None:
        row["date"] = date
    return row


def search_direct_flight(store: AirlineStore, origin: str, destination: str, date: str) -> str:
    """List the direct flights between two airports that are bookable on a date.

    Args:
        store: The airline store.
        origin: Origin IATA code.
        destination: Destination IATA code.
        date: ``YYYY-MM-DD``.

    Returns:
        ``json.dumps`` of a list of flights (flight fields without ``dates``,
        plus that date's ``status``, ``available_seats`` and ``prices``), in
        data-file order.
    """
    results = [
        _flight_on(flight, flight["dates"][date], None)
        for flight in store.find_flights(origin, destination)
        if flight["dates"].get(date, {}).get("status") == "available"
    ]
    return json.dumps(results)


def _second_leg_date(date: str, first_leg: Mapping[str, Any]) -> str:
    """Date of the connecting flight, reproducing the original implementation.

    When the first leg arrives after midnight (its scheduled arrival carries a
    ``+1``) the original computes ``f"2024-05-{day + 1}"``: the month is fixed
    to May and the day is not zero-padded (``2024-05-6``), so next-day
    connections from May 1-8 and May 30 never match a flight date.

    Args:
        date: The first leg's date, ``YYYY-MM-DD``.
        first_leg: The first leg's flight object.

    Returns:
        The second leg's date string.
    """
    if "+1" in first_leg["scheduled_arrival_time_est"]:
        return f"2024-05-{int(date[-2:]) + 1}"
    return date


def search_onestop_flight(store: AirlineStore, origin: str, destination: str, date: str) -> str:
    """List pairs of flights ``origin -> X -> destination`` bookable from a date.

    A pair qualifies when the first leg's scheduled arrival (as text) is not
    after the second leg's scheduled departure and both legs are
    ``available`` on their dates (see :func:`_second_leg_date`).

    Reproduced quirk of the original: the second leg's row carries the
    status, seats and prices of the *first* leg's date (its ``date`` field is
    the second leg's date), which differs only for next-day connections.

    Args:
        store: The airline store.
        origin: Origin IATA code.
        destination: Destination IATA code.
        date: Date of the first leg, ``YYYY-MM-DD``.

    Returns:
        ``json.dumps`` of a list of ``[leg1, leg2]`` pairs, in data-file order.
    """
    seconds = store.find_flights(destination=destination)
    results = []
    for first in store.find_flights(origin=origin):
        for second in seconds:
            if first["destination"] != second["origin"]:
                continue
            if first["scheduled_arrival_time_est"] > second["scheduled_departure_time_est"]:
                continue
            date2 = _second_leg_date(date, first)
            day1, day2 = first["dates"].get(date), second["dates"].get(date2)
            if (
                not day1
                or not day2
                or day1["status"] != "available"
                or day2["status"] != "available"
            ):
                continue
            results.append(
                [_flight_on(first, day1, date), _flight_on(second, second["dates"][date], date2)]
            )
    return json.dumps(results)


_BINARY_OPS: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Pow: operator.pow,
}
_UNARY_OPS: dict[type, Callable[[Any], Any]] = {ast.UAdd: operator.pos, ast.USub: operator.neg}
_MAX_EXPONENT = 1000


def _evaluate(node: ast.AST) -> int | float:
    """Evaluate an arithmetic AST (numbers, ``+ - * / // **``, parentheses).

    Raises:
        ValueError: For any other construct or an exponent that is too large.
        ArithmeticError: For a division by zero or an overflow.
    """
    if isinstance(node, ast.Expression):
        return _evaluate(node.body)
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return node.value
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY_OPS:
        return _UNARY_OPS[type(node.op)](_evaluate(node.operand))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY_OPS:
        left, right = _evaluate(node.left), _evaluate(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > _MAX_EXPONENT:
            raise ValueError("exponent too large")
        return _BINARY_OPS[type(node.op)](left, right)
    raise ValueError("unsupported expression")


def calculate(store: AirlineStore, expression: str) -> str:
    """Evaluate an arithmetic expression (digits, ``+-*/().`` and spaces).

    Unlike the original (which calls ``eval``), the expression is parsed and
    only numbers and arithmetic operators are evaluated.

    Args:
        store: The airline store (unused).
        expression: E.g. ``"(350 - 122) * 2"``.

    Returns:
        ``str(round(float(result), 2))`` (e.g. ``"456.0"``), or an
        ``"Error: ..."`` message.
    """
    if not all(char in "0123456789+-*/(). " for char in expression):
        return "Error: invalid characters in expression"
    try:
        tree = ast.parse(expression, filename="<string>", mode="eval")
        return str(round(float(_evaluate(tree)), 2))
    except (SyntaxError, ValueError, ArithmeticError) as exc:
        return f"Error: {exc}"


def think(store: AirlineStore, thought: str) -> str:
    """Record a thought; no effect.

    Args:
        store: The airline store (unused).
        thought: Free text.

    Returns:
        The empty string.
    """
    return ""


def transfer_to_human_agents(store: AirlineStore, summary: str) -> str:
    """Hand the conversation over to a human agent; no data change.

    Args:
        store: The airline store (unused).
        summary: Summary of the user's issue.

    Returns:
        ``"Transfer successful"``.
    """
    return "Transfer successful"


# ---------------------------------------------------------------------------
# shared helpers for the mutating tools
# ---------------------------------------------------------------------------


def _available_fare(
    store: AirlineStore, flight_number: str, date: str, cabin: str, seats: int
) -> tuple[dict[str, Any] | None, str | None]:
    """Look up a bookable flight-date and check seats.

    Args:
        store: The airline store.
        flight_number: E.g. ``"HAT001"``.
        date: ``YYYY-MM-DD``.
        cabin: ``basic_economy``, ``economy`` or ``business``.
        seats: Number of passengers needing a seat.

    Returns:
        ``(segment, None)`` with ``price``, ``origin``, ``destination`` of the
        segment, or ``(None, "Error: ...")``.
    """
    flight = store.get_flight(flight_number)
    if flight is None:
        return None, f"Error: flight {flight_number} not found"
    day = flight["dates"].get(date)
    if day is None:
        return None, f"Error: flight {flight_number} not found on date {date}"
    if day["status"] != "available":
        return None, f"Error: flight {flight_number} not available on date {date}"
    if day["available_seats"][cabin] < seats:
        return None, f"Error: not enough seats on flight {flight_number}"
    segment = {
        "price": day["prices"][cabin],
        "origin": flight["origin"],
        "destination": flight["destination"],
    }
    return segment, None


def _check_update_payment(
    user: Mapping[str, Any], payment_id: str, amount: int | float
) -> tuple[dict[str, Any] | None, str | None]:
    """Payment rules of the update tools (certificate refused; gift-card balance).

    Args:
        user: The reservation's user.
        payment_id: The payment method id.
        amount: The amount due (may be negative, i.e. a refund).

    Returns:
        ``(payment_method, None)`` or ``(None, "Error: ...")``.
    """
    method = user["payment_methods"].get(payment_id)
    if method is None:
        return None, "Error: payment method not found"
    if method["source"] == "certificate":
        return None, "Error: certificate cannot be used to update reservation"
    if method["source"] == "gift_card" and method["amount"] < amount:
        return None, "Error: gift card balance is not enough"
    return method, None


def _charge_update(
    store: AirlineStore,
    user: dict[str, Any],
    reservation: dict[str, Any],
    payment_id: str,
    amount: int | float,
) -> dict[str, Any]:
    """Apply an update's charge (debit gift card, append history) and save.

    Args:
        store: The airline store.
        user: The reservation's user (modified and saved).
        reservation: The already-updated reservation (modified and saved).
        payment_id: The paying method (validated by :func:`_check_update_payment`).
        amount: Amount due; ``0`` records nothing.

    Returns:
        The payment part of the undo data: ``payment_id``, ``payment_source``,
        ``amount`` and ``history_index`` (index of the appended entry or
        ``None``).
    """
    method = user["payment_methods"][payment_id]
    if method["source"] == "gift_card":
        method["amount"] -= amount
        store.put_user(user["_id"], _strip_id(user))
    history_index = None
    if amount != 0:
        history_index = len(reservation["payment_history"])
        reservation["payment_history"].append({"payment_id": payment_id, "amount": amount})
    store.put_reservation(reservation["reservation_id"], reservation)
    return {
        "payment_id": payment_id,
        "payment_source": method["source"],
        "amount": amount,
        "history_index": history_index,
    }


def _load_user(store: AirlineStore, user_id: str) -> dict[str, Any] | None:
    """Load a user and remember its id under ``_id`` (stripped on save)."""
    user = store.get_user(user_id)
    if user is not None:
        user["_id"] = user_id
    return user


def _strip_id(user: Mapping[str, Any]) -> dict[str, Any]:
    """Return the user without the helper ``_id`` key."""
    return {k: v for k, v in user.items() if k != "_id"}


# ---------------------------------------------------------------------------
# book_reservation
# ---------------------------------------------------------------------------


def _price_booking(
    store: AirlineStore, flights: list[dict[str, Any]], cabin: str, n_passengers: int
) -> tuple[list[dict[str, Any]] | None, int | float, str | None]:
    """Enrich the requested segments with price/origin/destination and sum fares.

    Returns:
        ``(segments, fare_total, None)`` or ``(None, 0, "Error: ...")``.
    """
    segments, total = [], 0
    for requested in flights:
        fare, error = _available_fare(
            store, requested["flight_number"], requested["date"], cabin, n_passengers
        )
        if error:
            return None, 0, error
        segments.append({**copy.deepcopy(requested), **fare})
        total += fare["price"] * n_passengers
    return segments, total, None


def _check_booking_payments(
    user: Mapping[str, Any], payment_methods: list[dict[str, Any]], total_price: int | float
) -> str | None:
    """Payment rules of a booking.

    Returns:
        ``None`` if the payments are acceptable, else an ``"Error: ..."``.
    """
    for payment in payment_methods:
        method = user["payment_methods"].get(payment["payment_id"])
        if method is None:
            return f"Error: payment method {payment['payment_id']} not found"
        if (
            method["source"] in ("gift_card", "certificate")
            and method["amount"] < payment["amount"]
        ):
            return f"Error: not enough balance in payment method {payment['payment_id']}"
    paid = sum(payment["amount"] for payment in payment_methods)
    if paid != total_price:
        return (
            f"Error: payment amount does not add up, total price is {total_price}, but paid {paid}"
        )
    return None


def _apply_booking_payments(
    user: dict[str, Any], payment_methods: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """Debit gift cards and use up certificates.

    Args:
        user: The booking user (modified in place).
        payment_methods: The validated ``{payment_id, amount}`` list.

    Returns:
        The charges as ``{payment_id, amount, source}`` entries.
    """
    charges = []
    for payment in payment_methods:
        payment_id, amount = payment["payment_id"], payment["amount"]
        method = user["payment_methods"].get(payment_id)
        # A certificate listed twice is removed by its first entry.
        source = method["source"] if method else "certificate"
        if source == "gift_card":
            method["amount"] -= amount
        elif source == "certificate":
            user["payment_methods"].pop(payment_id, None)
        charges.append({"payment_id": payment_id, "amount": amount, "source": source})
    return charges


def _new_reservation_id(store: AirlineStore) -> str:
    """Pick the first free id among ``HATHAT``, ``HATHAU``, ``HATHAV``.

    Like the original, the last candidate is used even if taken.
    """
    for candidate in NEW_RESERVATION_IDS[:-1]:
        if not store.has_reservation(candidate):
            return candidate
    return NEW_RESERVATION_IDS[-1]


@atomic
def book_reservation(
    store: AirlineStore,
    user_id: str,
    origin: str,
    destination: str,
    flight_type: str,
    cabin: str,
    flights: list[dict[str, Any]],
    passengers: list[dict[str, Any]],
    payment_methods: list[dict[str, Any]],
    total_baggages: int,
    nonfree_baggages: int,
    insurance: str,
    record: Record = None,
) -> str:
    """Book a new reservation and charge its payment methods.

    Price = Σ cabin price x passengers + 30 x passengers if insured + 50 per
    non-free bag; the payments must add up to it exactly.  A gift card is
    debited by its share; a certificate is used up (removed from the user's
    payment methods, any remainder is lost).  Seat counts are not changed.

    Args:
        store: The airline store.
        user_id: The booking user.
        origin: Origin IATA code.
        destination: Destination IATA code.
        flight_type: ``one_way`` or ``round_trip``.
        cabin: ``basic_economy``, ``economy`` or ``business``.
        flights: ``[{flight_number, date}]``.
        passengers: ``[{first_name, last_name, dob}]``.
        payment_methods: ``[{payment_id, amount}]``.
        total_baggages: Total checked bags.
        nonfree_baggages: Paid checked bags.
        insurance: ``yes`` or ``no``.
        record: Optional callback receiving the undo data on success:
            ``reservation_id``, ``user_id``, ``charges``
            (``[{payment_id, amount, source}]``), ``payment_methods_before``
            (the used methods as they were, incl. certificates used up),
            ``payment_method_order``, ``user_reservations_before`` and
            ``replaced_reservation`` (``None`` unless all three new ids were
            taken and, like the original, ``HATHAV`` was overwritten).

    Returns:
        ``json.dumps`` of the new reservation, or an ``"Error: ..."``.
    """
    user = _load_user(store, user_id)
    if user is None:
        return "Error: user not found"
    segments, fare_total, error = _price_booking(store, flights, cabin, len(passengers))
    if error:
        return error
    total_price = fare_total + (INSURANCE_FEE * len(passengers) if insurance == "yes" else 0)
    total_price += BAG_FEE * nonfree_baggages
    error = _check_booking_payments(user, payment_methods, total_price)
    if error:
        return error

    reservation_id = _new_reservation_id(store)
    undo_data = {
        "reservation_id": reservation_id,
        "user_id": user_id,
        "payment_methods_before": {
            p["payment_id"]: copy.deepcopy(user["payment_methods"][p["payment_id"]])
            for p in payment_methods
        },
        "payment_method_order": list(user["payment_methods"]),
        "user_reservations_before": list(user["reservations"]),
        "replaced_reservation": store.get_reservation(reservation_id),
    }
    undo_data["charges"] = _apply_booking_payments(user, payment_methods)
    reservation = {
        "reservation_id": reservation_id,
        "user_id": user_id,
        "origin": origin,
        "destination": destination,
        "flight_type": flight_type,
        "cabin": cabin,
        "flights": segments,
        "passengers": copy.deepcopy(passengers),
        "payment_history": copy.deepcopy(payment_methods),
        "created_at": NOW,
        "total_baggages": total_baggages,
        "nonfree_baggages": nonfree_baggages,
        "insurance": insurance,
    }
    user["reservations"].append(reservation_id)
    store.put_reservation(reservation_id, reservation)
    store.put_user(user_id, _strip_id(user))
    _emit(record, undo_data)
    return json.dumps(reservation)


# ---------------------------------------------------------------------------
# updates
# ---------------------------------------------------------------------------


def _reprice_flights(
    store: AirlineStore, reservation: Mapping[str, Any], cabin: str, flights: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]] | None, int | float, str | None]:
    """Price a reservation's new itinerary.

    A segment already on the reservation (same flight number and date) keeps
    its old price when the cabin is unchanged; any other segment must be
    available with enough seats and is priced at today's cabin price.

    Returns:
        ``(segments, new_total, None)`` or ``(None, 0, "Error: ...")``; the
        total is per reservation (price x passengers).
    """
    n_passengers = len(reservation["passengers"])
    segments, total = [], 0
    for requested in flights:
        kept = [
            old
            for old in reservation["flights"]
            if old["flight_number"] == requested["flight_number"]
            and old["date"] == requested["date"]
            and cabin == reservation["cabin"]
        ]
        if kept:
            fare = {k: kept[0][k] for k in ("price", "origin", "destination")}
        else:
            fare, error = _available_fare(
                store, requested["flight_number"], requested["date"], cabin, n_passengers
            )
            if error:
                return None, 0, error
        segments.append({**copy.deepcopy(requested), **fare})
        total += fare["price"] * n_passengers
    return segments, total, None


def _reservation_and_user(
    store: AirlineStore, reservation_id: str
) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """Load a reservation and its user (``(None, None)`` if unknown)."""
    reservation = store.get_reservation(reservation_id)
    if reservation is None:
        return None, None
    return reservation, _load_user(store, reservation["user_id"])


@atomic
def update_reservation_flights(
    store: AirlineStore,
    reservation_id: str,
    cabin: str,
    flights: list[dict[str, Any]],
    payment_id: str,
    record: Record = None,
) -> str:
    """Replace a reservation's flights (and possibly change cabin), paying the difference.

    The amount due is the new total minus the old total and may be negative
    (a refund).  A certificate cannot pay; a gift card needs a balance of at
    least the amount and is debited by it.  The reservation's ``cabin``
    field is left unchanged (as in the original implementation); a non-zero
    amount is appended to ``payment_history``.

    Args:
        store: The airline store.
        reservation_id: The reservation to change.
        cabin: Cabin of the new itinerary.
        flights: The entire new itinerary ``[{flight_number, date}]``.
        payment_id: Payment method for the difference (or refund).
        record: Optional callback receiving the undo data on success:
            ``reservation_id``, ``user_id``, ``status_before``,
            ``flights_before``, ``cabin_before``, ``payment_id``,
            ``payment_source``, ``amount``, ``history_index``.

    Returns:
        ``json.dumps`` of the updated reservation, or an ``"Error: ..."``.
    """
    reservation, user = _reservation_and_user(store, reservation_id)
    if reservation is None:
        return "Error: reservation not found"
    segments, new_total, error = _reprice_flights(store, reservation, cabin, flights)
    if error:
        return error
    amount = new_total - sum(f["price"] for f in reservation["flights"]) * len(
        reservation["passengers"]
    )
    _, error = _check_update_payment(user, payment_id, amount)
    if error:
        return error
    undo_data = {
        "reservation_id": reservation_id,
        "user_id": reservation["user_id"],
        "status_before": reservation.get("status"),
        "flights_before": copy.deepcopy(reservation["flights"]),
        "cabin_before": reservation["cabin"],
    }
    reservation["flights"] = segments
    undo_data.update(_charge_update(store, user, reservation, payment_id, amount))
    _emit(record, undo_data)
    return json.dumps(reservation)


@atomic
def update_reservation_baggages(
    store: AirlineStore,
    reservation_id: str,
    total_baggages: int,
    nonfree_baggages: int,
    payment_id: str,
    record: Record = None,
) -> str:
    """Set a reservation's bag counts, charging 50 per added non-free bag.

    Args:
        store: The airline store.
        reservation_id: The reservation to change.
        total_baggages: New total checked bags.
        nonfree_baggages: New paid checked bags.
        payment_id: Payment method (certificates refused; gift card balance
            must cover the charge).
        record: Optional callback receiving the undo data on success:
            ``reservation_id``, ``user_id``, ``status_before``,
            ``total_baggages_before``, ``nonfree_baggages_before``,
            ``payment_id``, ``payment_source``, ``amount``, ``history_index``.

    Returns:
        ``json.dumps`` of the updated reservation, or an ``"Error: ..."``.
    """
    reservation, user = _reservation_and_user(store, reservation_id)
    if reservation is None:
        return "Error: reservation not found"
    amount = BAG_FEE * max(0, nonfree_baggages - reservation["nonfree_baggages"])
    _, error = _check_update_payment(user, payment_id, amount)
    if error:
        return error
    undo_data = {
        "reservation_id": reservation_id,
        "user_id": reservation["user_id"],
        "status_before": reservation.get("status"),
        "total_baggages_before": reservation["total_baggages"],
        "nonfree_baggages_before": reservation["nonfree_baggages"],
    }
    reservation["total_baggages"] = total_baggages
    reservation["nonfree_baggages"] = nonfree_baggages
    undo_data.update(_charge_update(store, user, reservation, payment_id, amount))
    _emit(record, undo_data)
    return json.dumps(reservation)


@atomic
def update_reservation_passengers(
    store: AirlineStore,
    reservation_id: str,
    passengers: list[dict[str, Any]],
    record: Record = None,
) -> str:
    """Replace a reservation's passengers (the count must stay the same).

    Args:
        store: The airline store.
        reservation_id: The reservation to change.
        passengers: ``[{first_name, last_name, dob}]``.
        record: Optional callback receiving the undo data on success:
            ``reservation_id``, ``user_id``, ``status_before``,
            ``passengers_before``.

    Returns:
        ``json.dumps`` of the updated reservation, or an ``"Error: ..."``.
    """
    reservation = store.get_reservation(reservation_id)
    if reservation is None:
        return "Error: reservation not found"
    if len(passengers) != len(reservation["passengers"]):
        return "Error: number of passengers does not match"
    undo_data = {
        "reservation_id": reservation_id,
        "user_id": reservation["user_id"],
        "status_before": reservation.get("status"),
        "passengers_before": copy.deepcopy(reservation["passengers"]),
    }
    reservation["passengers"] = copy.deepcopy(passengers)
    store.put_reservation(reservation_id, reservation)
    _emit(record, undo_data)
    return json.dumps(reservation)


# ---------------------------------------------------------------------------
# irreversible tools
# ---------------------------------------------------------------------------


@atomic
def cancel_reservation(store: AirlineStore, reservation_id: str, record: Record = None) -> str:
    """Cancel a whole reservation (irreversible).

    Appends one refund (negated amount) per existing payment-history entry
    and sets ``status`` to ``cancelled``; balances are not credited (refunds
    "take 5 to 7 business days").  Like the original, cancelling an already
    cancelled reservation appends refunds again.

    Args:
        store: The airline store.
        reservation_id: The reservation to cancel.
        record: Optional callback receiving, on success, what the call
            touched (for the journal; there is no undo): ``reservation_id``,
            ``user_id``, ``status_before``, ``refunds``.

    Returns:
        ``json.dumps`` of the cancelled reservation, or
        ``"Error: reservation not found"``.
    """
    reservation = store.get_reservation(reservation_id)
    if reservation is None:
        return "Error: reservation not found"
    refunds = [
        {"payment_id": p["payment_id"], "amount": -p["amount"]}
        for p in reservation["payment_history"]
    ]
    status_before = reservation.get("status")
    reservation["payment_history"].extend(refunds)
    reservation["status"] = "cancelled"
    store.put_reservation(reservation_id, reservation)
    _emit(
        record,
        {
            "reservation_id": reservation_id,
            "user_id": reservation["user_id"],
            "status_before": status_before,
            "refunds": copy.deepcopy(refunds),
        },
    )
    return json.dumps(reservation)


@atomic
def send_certificate(
    store: AirlineStore, user_id: str, amount: int | float, record: Record = None
) -> str:
    """Give a user a travel certificate (irreversible).

    The certificate gets the first free id among ``certificate_3221322``,
    ``certificate_3221323`` and ``certificate_3221324``.

    Args:
        store: The airline store.
        user_id: The receiving user.
        amount: Certificate amount in dollars.
        record: Optional callback receiving, on success, ``user_id``,
            ``payment_id`` and ``amount`` (for the journal; there is no undo).

    Returns:
        ``"Certificate <id> added to user <user_id> with amount <amount>."``,
        ``"Error: user not found"``, or (where the original returned
        nothing) an error when all three ids are taken.
    """
    user = store.get_user(user_id)
    if user is None:
        return "Error: user not found"
    payment_id = next((c for c in NEW_CERTIFICATE_IDS if c not in user["payment_methods"]), None)
    if payment_id is None:
        return f"Error: user {user_id} already has certificates {', '.join(NEW_CERTIFICATE_IDS)}"
    user["payment_methods"][payment_id] = {
        "source": "certificate",
        "amount": amount,
        "id": payment_id,
    }
    store.put_user(user_id, user)
    _emit(record, {"user_id": user_id, "payment_id": payment_id, "amount": amount})
    return f"Certificate {payment_id} added to user {user_id} with amount {amount}."


# ---------------------------------------------------------------------------
# registry and dispatch
# ---------------------------------------------------------------------------

ToolFunction = Callable[..., str]

#: All 14 tools by name.
TOOLS: dict[str, ToolFunction] = {
    fn.__name__: fn
    for fn in (
        book_reservation,
        calculate,
        cancel_reservation,
        get_reservation_details,
        get_user_details,
        list_all_airports,
        search_direct_flight,
        search_onestop_flight,
        send_certificate,
        think,
        transfer_to_human_agents,
        update_reservation_baggages,
        update_reservation_flights,
        update_reservation_passengers,
    )
}

#: Tools whose undo is defined: ``undo(store, args, result, undo_data) -> str``.
COMPENSATIONS: dict[str, Callable[..., str]] = {
    "book_reservation": undo_book_reservation,
    "update_reservation_flights": undo_update_reservation_flights,
    "update_reservation_baggages": undo_update_reservation_baggages,
    "update_reservation_passengers": undo_update_reservation_passengers,
}
#: Database-changing tools that cannot be compensated (need human approval).
IRREVERSIBLE: frozenset[str] = frozenset({"cancel_reservation", "send_certificate"})
#: All database-changing tools (they take a ``record`` callback).
MUTATING: frozenset[str] = frozenset(COMPENSATIONS) | IRREVERSIBLE


def is_refusal(output: str) -> bool:
    """Tell whether a tool output is a refusal (``"Error: ..."``, no effect).

    Args:
        output: A tool's return value.

    Returns:
        ``True`` for a refusal.
    """
    return isinstance(output, str) and output.startswith("Error:")


def call_tool(
    store: AirlineStore, name: str, arguments: Mapping[str, Any], record: Record = None
) -> str:
    """Run a tool by name, atomically, the way the τ-bench environment does.

    Exceptions raised by malformed arguments (a missing key, a wrong type)
    become ``"Error: <exception>"`` outputs, as in the original environment,
    and the transaction is rolled back so a refused call changes nothing.

    Args:
        store: The airline store.
        name: One of :data:`TOOLS`.
        arguments: The tool arguments (parsed JSON).
        record: Undo-data callback, passed to mutating tools only.

    Returns:
        The tool output.
    """
    tool = TOOLS.get(name)
    if tool is None:
        return f"Error: unknown tool {name}"
    kwargs = dict(arguments)
    if name in MUTATING:
        kwargs["record"] = record
    try:
        with store.transaction():
            return tool(store, **kwargs)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
        return f"Error: {exc}"
