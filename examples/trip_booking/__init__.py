"""Trip booking: a flight, a hotel, and a card charge that is declined.

Run it with ``python -m examples.trip_booking`` (from the repository root) or ``sagacity demo``.

The implementation ships inside the package, in :mod:`sagacity_agents.demo`, so that
``sagacity demo`` works from an installed wheel; the modules here are the example's entry points:

* :mod:`.booking_system`: the SQLite booking system the agent changes (flights, hotels, charges);
* :mod:`.agent`: the three tools with their undos, and the agent;
* :mod:`.run_demo`: runs the agent under a saga and prints what happened.
"""
