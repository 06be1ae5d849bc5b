"""Run the trip-booking demo: ``python -m examples.trip_booking [--db PATH] [--real-model]``.

The same as ``sagacity demo``. ``main(db_path, real_model)`` runs the agent under a saga, prints
the story with rich, and returns a :class:`~sagacity_agents.demo.TripOutcome`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from sagacity_agents.demo import DEFAULT_DEMO_DB, TripOutcome
from sagacity_agents.demo import main as _demo_main
from sagacity_agents.errors import ConfigurationError

__all__ = ["main", "run"]


def main(db_path: str | Path = DEFAULT_DEMO_DB, real_model: bool = False) -> TripOutcome:
    """Run the demo with its journal at ``db_path`` (and its booking system next to it)."""
    return _demo_main(db_path, real_model)


def run(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="python -m examples.trip_booking",
        description="Run the trip-booking demo (the same as `sagacity demo`).",
    )
    parser.add_argument("--db", default=DEFAULT_DEMO_DB, help=f"journal file (default {DEFAULT_DEMO_DB})")
    parser.add_argument("--real-model", action="store_true", help="use a real OpenAI model")
    args = parser.parse_args(argv)
    try:
        main(args.db, args.real_model)
    except ConfigurationError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(run())
