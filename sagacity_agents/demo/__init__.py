"""The demo behind ``sagacity demo``: a trip-booking agent whose card charge fails.

* :mod:`.booking`: a small SQLite booking system (flights, hotels, charges), the world the
  agent changes;
* :mod:`.trip`: the three tools, declared with their undos, and the agent;
* :mod:`.run`: runs the agent under a saga and prints what happened.

A readable copy-and-adapt entry point lives in ``examples/trip_booking/`` in the repository.
"""

from __future__ import annotations

from .booking import BookingCounts, BookingSystem, CardDeclined
from .run import DEFAULT_DEMO_DB, TripOutcome, main, render, run_trip
from .trip import TRIP_REQUEST, build_agent, scripted_model, trip_tools

__all__ = [
    "DEFAULT_DEMO_DB",
    "TRIP_REQUEST",
    "BookingCounts",
    "BookingSystem",
    "CardDeclined",
    "TripOutcome",
    "build_agent",
    "main",
    "render",
    "run_trip",
    "scripted_model",
    "trip_tools",
]
