"""A tiny booking system in its own SQLite file: the "outside world" the demo agent changes.

It is deliberately separate from the saga journal: the journal records what the agent did, this
database is what the agent did it *to*. After a failed trip it should hold no live booking and no
captured charge, which the demo checks by querying it.

Every function opens its own short-lived connection, so the system can be called from the worker
threads the Agents SDK runs sync tools in, and from the undo threads compensation uses.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path

__all__ = ["DECLINED_CARD_SUFFIX", "BookingCounts", "BookingSystem", "CardDeclined"]

DECLINED_CARD_SUFFIX = "0002"
"""Cards whose number ends with this are declined (like the classic "card declined" test card)."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS flights (
    id          TEXT PRIMARY KEY,
    destination TEXT NOT NULL,
    date        TEXT NOT NULL,
    status      TEXT NOT NULL CHECK (status IN ('booked', 'cancelled')),
    cancel_key  TEXT
);
CREATE TABLE IF NOT EXISTS hotels (
    id          TEXT PRIMARY KEY,
    city        TEXT NOT NULL,
    nights      INTEGER NOT NULL,
    status      TEXT NOT NULL CHECK (status IN ('booked', 'cancelled')),
    cancel_key  TEXT
);
CREATE TABLE IF NOT EXISTS charges (
    id          TEXT PRIMARY KEY,
    card_last4  TEXT NOT NULL,
    amount_eur  INTEGER NOT NULL,
    status      TEXT NOT NULL CHECK (status IN ('captured', 'declined', 'refunded')),
    refund_key  TEXT
);
"""


class CardDeclined(Exception):
    """The card issuer refused the charge."""


@dataclass(frozen=True)
class BookingCounts:
    """How many rows of each kind the booking system holds."""

    flights_booked: int
    flights_cancelled: int
    hotels_booked: int
    hotels_cancelled: int
    charges_captured: int
    charges_declined: int
    charges_refunded: int

    @property
    def empty(self) -> bool:
        """True when nothing is booked and nothing is charged."""
        return not (self.flights_booked or self.hotels_booked or self.charges_captured)


class BookingSystem:
    """Flights, hotels and card charges in one SQLite file.

    Args:
        path: the database file (created with its tables if missing).
        reset: drop every existing row first (the demo starts from an empty system).
    """

    def __init__(self, path: str | Path, *, reset: bool = False) -> None:
        self.path = str(path)
        with self._db() as db:
            db.executescript(_SCHEMA)
            if reset:
                db.executescript("DELETE FROM flights; DELETE FROM hotels; DELETE FROM charges;")

    @contextmanager
    def _db(self) -> Iterator[sqlite3.Connection]:
        with closing(sqlite3.connect(self.path)) as conn, conn:
            yield conn

    @staticmethod
    def _next_id(db: sqlite3.Connection, table: str, prefix: str) -> str:
        (count,) = db.execute(f"SELECT COUNT(*) FROM {table}").fetchone()  # noqa: S608 - fixed names
        return f"{prefix}-{count + 1:04d}"

    # --- flights ------------------------------------------------------------------------
    def book_flight(self, destination: str, date: str) -> str:
        """Book a seat; returns the flight booking id."""
        with self._db() as db:
            flight_id = self._next_id(db, "flights", "FL")
            db.execute(
                "INSERT INTO flights (id, destination, date, status) VALUES (?, ?, ?, 'booked')",
                (flight_id, destination, date),
            )
        return flight_id

    def cancel_flight(self, flight_id: str, *, key: str | None = None) -> None:
        """Cancel a flight booking. Idempotent: cancelling twice is harmless."""
        with self._db() as db:
            db.execute(
                "UPDATE flights SET status = 'cancelled', cancel_key = ? "
                "WHERE id = ? AND status = 'booked'",
                (key, flight_id),
            )

    # --- hotels -------------------------------------------------------------------------
    def book_hotel(self, city: str, nights: int) -> str:
        """Reserve a room; returns the hotel booking id."""
        with self._db() as db:
            hotel_id = self._next_id(db, "hotels", "HT")
            db.execute(
                "INSERT INTO hotels (id, city, nights, status) VALUES (?, ?, ?, 'booked')",
                (hotel_id, city, nights),
            )
        return hotel_id

    def cancel_hotel(self, hotel_id: str, *, key: str | None = None) -> None:
        """Cancel a hotel booking. Idempotent."""
        with self._db() as db:
            db.execute(
                "UPDATE hotels SET status = 'cancelled', cancel_key = ? "
                "WHERE id = ? AND status = 'booked'",
                (key, hotel_id),
            )

    # --- card charges -------------------------------------------------------------------
    def charge(self, card_number: str, amount_eur: int) -> str:
        """Charge a card; returns the charge id.

        Raises:
            CardDeclined: the card is declined (its number ends with ``0002``). The attempt is
                recorded as a declined charge; no money moved.
        """
        digits = "".join(ch for ch in card_number if ch.isdigit())
        last4 = digits[-4:]
        declined = last4 == DECLINED_CARD_SUFFIX
        with self._db() as db:
            charge_id = self._next_id(db, "charges", "CH")
            db.execute(
                "INSERT INTO charges (id, card_last4, amount_eur, status) VALUES (?, ?, ?, ?)",
                (charge_id, last4, amount_eur, "declined" if declined else "captured"),
            )
        if declined:
            raise CardDeclined(f"card ending {last4} was declined by the issuer ({amount_eur} EUR)")
        return charge_id

    def refund(self, charge_id: str, *, key: str | None = None) -> None:
        """Refund a captured charge. Idempotent."""
        with self._db() as db:
            db.execute(
                "UPDATE charges SET status = 'refunded', refund_key = ? "
                "WHERE id = ? AND status = 'captured'",
                (key, charge_id),
            )

    # --- reporting ----------------------------------------------------------------------
    def counts(self) -> BookingCounts:
        """Count flights, hotels and charges by status."""
        with self._db() as db:

            def count(table: str, status: str) -> int:
                sql = f"SELECT COUNT(*) FROM {table} WHERE status = ?"  # noqa: S608 - fixed names
                return int(db.execute(sql, (status,)).fetchone()[0])

            return BookingCounts(
                flights_booked=count("flights", "booked"),
                flights_cancelled=count("flights", "cancelled"),
                hotels_booked=count("hotels", "booked"),
                hotels_cancelled=count("hotels", "cancelled"),
                charges_captured=count("charges", "captured"),
                charges_declined=count("charges", "declined"),
                charges_refunded=count("charges", "refunded"),
            )
