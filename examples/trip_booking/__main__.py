"""``python -m examples.trip_booking``: run the trip-booking demo."""

import sys

from .run_demo import run

sys.exit(run())
