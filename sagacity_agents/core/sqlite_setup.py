"""Opening an embedded SQLite file the same way for every store that lives in it."""

from __future__ import annotations

import sqlite3
import time
from importlib import resources

from ..errors import JournalError

__all__ = ["open_sqlite"]


def open_sqlite(path: str, schema: str, *, busy_timeout: float, synchronous: str, what: str) -> sqlite3.Connection:
    """Open ``path`` in WAL mode with ``synchronous`` and apply the package schema file ``schema``.

    Several processes may open a new file at the same instant; switching it to WAL and creating
    tables then contends for the write lock, and SQLite's busy handler does not cover the journal
    mode change. Setup is therefore retried (backoff 10 ms doubling to 200 ms) until
    ``busy_timeout`` seconds have passed.

    Args:
        path: the database file.
        schema: file name under ``sagacity_agents/core/sql/``.
        busy_timeout: seconds to wait for other writers (also set as SQLite's busy timeout).
        synchronous: the ``synchronous`` pragma value (already validated).
        what: what is being opened, for the error message.

    Raises:
        JournalError: the file cannot be opened or initialised in time.
    """
    script = resources.files("sagacity_agents.core").joinpath(f"sql/{schema}").read_text("utf-8")
    deadline = time.monotonic() + busy_timeout
    delay = 0.01
    while True:
        conn = None
        try:
            conn = sqlite3.connect(path, timeout=busy_timeout, isolation_level=None, check_same_thread=True)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute(f"PRAGMA synchronous={synchronous}")
            conn.execute(f"PRAGMA busy_timeout={int(busy_timeout * 1000)}")
            conn.executescript(script)
            return conn
        except sqlite3.OperationalError as exc:
            if conn is not None:
                conn.close()
            if "locked" in str(exc) and time.monotonic() < deadline:
                time.sleep(delay)
                delay = min(delay * 2, 0.2)
                continue
            raise JournalError(f"cannot open {what} {path!r}: {exc}") from exc
        except sqlite3.Error as exc:
            if conn is not None:
                conn.close()
            raise JournalError(f"cannot open {what} {path!r}: {exc}") from exc
