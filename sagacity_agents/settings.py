"""Settings shared by the facade and the CLI: where the embedded journal lives by default.

Every setting comes from an argument first, then a ``SAGACITY_*`` environment variable, then the
default here.
"""

from __future__ import annotations

import os

__all__ = ["DB_ENVVAR", "DEFAULT_JOURNAL_PATH", "journal_path"]

DB_ENVVAR = "SAGACITY_DB"
"""Environment variable naming the SQLite journal file."""

DEFAULT_JOURNAL_PATH = "sagacity.db"
"""Journal file (in the current directory) used when neither an argument nor ``SAGACITY_DB``
names one."""


def journal_path(explicit: str | None = None) -> str:
    """The journal path: ``explicit``, else ``$SAGACITY_DB``, else :data:`DEFAULT_JOURNAL_PATH`."""
    return explicit or os.environ.get(DB_ENVVAR) or DEFAULT_JOURNAL_PATH
