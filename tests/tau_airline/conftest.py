"""Fixtures for the τ-bench airline domain tests.

The airline data is not part of the repository.  When it is missing the tests
are skipped, except under CI (the ``CI`` environment variable is set), where a
missing data folder is a failure.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

_REPO_ROOT = Path(__file__).resolve().parents[2]
if str(_REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(_REPO_ROOT))

from examples.tau_airline.store import DataNotFoundError, resolve_data_dir  # noqa: E402


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """The τ-bench airline data folder (skip, or fail under CI, if missing)."""
    try:
        return resolve_data_dir()
    except DataNotFoundError as exc:
        if "CI" in os.environ:
            pytest.fail(f"CI is set but the τ-bench airline data is missing: {exc}")
        pytest.skip(f"τ-bench airline data not available: {exc}")
