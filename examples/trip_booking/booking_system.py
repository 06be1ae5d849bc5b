"""The booking system the trip agent changes: a small SQLite database, separate from the journal.

Tables ``flights``, ``hotels`` and ``charges``, each with a ``status`` column; cards ending in
``0002`` are declined. Source: ``sagacity_agents/demo/booking.py``.
"""

from sagacity_agents.demo.booking import DECLINED_CARD_SUFFIX, BookingCounts, BookingSystem, CardDeclined

__all__ = ["DECLINED_CARD_SUFFIX", "BookingCounts", "BookingSystem", "CardDeclined"]
