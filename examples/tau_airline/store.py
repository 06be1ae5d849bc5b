"""SQLite-backed store for the τ-bench airline domain.

The airline data (users, reservations, flights) lives in JSON files outside the
repository (by default ``../shared/tau-airline/data`` next to the repository
root).  :class:`AirlineStore` loads those files into a SQLite database (a fresh
``:memory:`` database or a fresh file per replay) with one row per object: the
object's id, its position in the source file (so iteration order matches the
JSON order, which the search tools' outputs depend on) and the object as JSON
text.

The JSON files are parsed once per process and data directory into a template
in-memory database; every new store is a page-level copy of it (SQLite backup
API), so creating a fresh store per replay takes about a millisecond.
"""

from __future__ import annotations

import functools
import json
import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

__all__ = [
    "AirlineStore",
    "DataNotFoundError",
    "atomic",
    "default_data_dir",
    "resolve_data_dir",
]

#: The three object kinds of the domain, i.e. the three tables of the store.
KINDS: tuple[str, ...] = ("users", "reservations", "flights")

_TEMPLATES: dict[Path, sqlite3.Connection] = {}
_TEMPLATES_LOCK = threading.Lock()


class DataNotFoundError(FileNotFoundError):
    """Raised when the τ-bench airline data directory cannot be found."""


def default_data_dir() -> Path:
    """Return the conventional location of the shared τ-bench airline data.

    The data sits next to the repository: ``<repo>/../shared/tau-airline``,
    where ``<repo>`` is derived from this file's location
    (``<repo>/examples/tau_airline/store.py``).

    Returns:
        The path (which may not exist).
    """
    return Path(__file__).resolve().parents[2].parent / "shared" / "tau-airline"


def resolve_data_dir(path: str | Path | None = None) -> Path:
    """Resolve and validate a τ-bench airline data directory.

    Args:
        path: The directory holding ``data/{users,reservations,flights}.json``
            (the ``tau-airline`` folder), or the ``data`` folder itself.
            ``None`` means :func:`default_data_dir`.

    Returns:
        The resolved ``tau-airline`` folder (the parent of ``data``).

    Raises:
        DataNotFoundError: If the JSON files are not there.
    """
    base = Path(path).expanduser().resolve() if path is not None else default_data_dir()
    if (base / "users.json").is_file() and not (base / "data").is_dir():
        base = base.parent
    missing = [k for k in KINDS if not (base / "data" / f"{k}.json").is_file()]
    if missing:
        raise DataNotFoundError(
            f"τ-bench airline data not found in {base} "
            f"(missing data/{', data/'.join(m + '.json' for m in missing)})"
        )
    return base


def _create_schema(conn: sqlite3.Connection) -> None:
    """Create one ``(id, seq, doc)`` table per object kind.

    Args:
        conn: An empty database.
    """
    for kind in KINDS:
        conn.execute(
            f"CREATE TABLE {kind} (id TEXT PRIMARY KEY, seq INTEGER NOT NULL, doc TEXT NOT NULL)"
        )


def _template(data_dir: Path) -> sqlite3.Connection:
    """Return an in-memory database loaded from the JSON files (built once per folder).

    New stores are copies of it made with SQLite's backup API, so the JSON
    files are parsed only once per process.

    Args:
        data_dir: A directory accepted by :func:`resolve_data_dir`.

    Returns:
        The template connection (never written to after loading).
    """
    with _TEMPLATES_LOCK:
        conn = _TEMPLATES.get(data_dir)
        if conn is None:
            conn = sqlite3.connect(":memory:", check_same_thread=False)
            _create_schema(conn)
            for kind in KINDS:
                with open(data_dir / "data" / f"{kind}.json", encoding="utf-8") as fh:
                    objects: dict[str, Any] = json.load(fh)
                conn.executemany(
                    f"INSERT INTO {kind} VALUES (?, ?, ?)",
                    ((key, seq, json.dumps(obj)) for seq, (key, obj) in enumerate(objects.items())),
                )
            conn.commit()
            _TEMPLATES[data_dir] = conn
        return conn


def atomic(function: Callable[..., Any]) -> Callable[..., Any]:
    """Decorate a function whose first argument is a store to run in one transaction.

    Args:
        function: ``function(store, ...)``.

    Returns:
        The wrapped function: all its writes are committed together, or rolled
        back together if it raises.
    """

    @functools.wraps(function)
    def wrapper(store: AirlineStore, *args: Any, **kwargs: Any) -> Any:
        with store.transaction():
            return function(store, *args, **kwargs)

    return wrapper


class AirlineStore:
    """Airline database (users, reservations, flights) kept in SQLite.

    Each object is stored as JSON text keyed by its id.  Reads return fresh
    ``dict`` copies; writes go through :meth:`put_user`,
    :meth:`put_reservation` and :meth:`delete_reservation`.

    Args:
        data_dir: The ``tau-airline`` data folder (see :func:`resolve_data_dir`);
            ``None`` uses :func:`default_data_dir`.
        db_path: SQLite database location: ``":memory:"`` (default) or a file
            path.  A file that already exists is replaced, so every store
            starts from the JSON data.

    Raises:
        DataNotFoundError: If the data folder is missing.
    """

    def __init__(self, data_dir: str | Path | None = None, db_path: str | Path = ":memory:"):
        self.data_dir = resolve_data_dir(data_dir)
        self.db_path = str(db_path)
        if self.db_path != ":memory:":
            Path(self.db_path).unlink(missing_ok=True)
        self._conn = sqlite3.connect(self.db_path, isolation_level=None, check_same_thread=False)
        self._lock = threading.RLock()
        template = _template(self.data_dir)
        with _TEMPLATES_LOCK:
            template.backup(self._conn)

    # -- setup -----------------------------------------------------------------

    def close(self) -> None:
        """Close the SQLite connection."""
        self._conn.close()

    def __enter__(self) -> AirlineStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """Run a block of reads/writes atomically (nested use joins the outer block).

        The block also holds the store's lock, so transactions from several
        threads do not interleave.

        Yields:
            Nothing; commits on normal exit, rolls back on an exception.
        """
        with self._lock:
            if self._conn.in_transaction:
                yield
                return
            self._conn.execute("BEGIN")
            try:
                yield
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")

    # -- generic row access ----------------------------------------------------

    def _get(self, kind: str, key: str) -> dict[str, Any] | None:
        row = self._conn.execute(f"SELECT doc FROM {kind} WHERE id = ?", (key,)).fetchone()
        return None if row is None else json.loads(row[0])

    def _put(self, kind: str, key: str, doc: dict[str, Any]) -> None:
        # Keep the position of an existing row; new rows go to the end.
        self._conn.execute(
            f"INSERT INTO {kind} (id, seq, doc) VALUES "
            f"(?, (SELECT COALESCE(MAX(seq), -1) + 1 FROM {kind}), ?) "
            f"ON CONFLICT(id) DO UPDATE SET doc = excluded.doc",
            (key, json.dumps(doc)),
        )

    def _all(self, kind: str) -> dict[str, dict[str, Any]]:
        rows = self._conn.execute(f"SELECT id, doc FROM {kind} ORDER BY seq")
        return {key: json.loads(doc) for key, doc in rows}

    # -- users -----------------------------------------------------------------

    def get_user(self, user_id: str) -> dict[str, Any] | None:
        """Return a copy of a user, or ``None`` if unknown.

        Args:
            user_id: The user id, e.g. ``"mia_li_3668"``.

        Returns:
            The user object (as in ``users.json``) or ``None``.
        """
        return self._get("users", user_id)

    def put_user(self, user_id: str, user: dict[str, Any]) -> None:
        """Insert or replace a user.

        Args:
            user_id: The user id.
            user: The full user object.
        """
        self._put("users", user_id, user)

    # -- reservations ----------------------------------------------------------

    def get_reservation(self, reservation_id: str) -> dict[str, Any] | None:
        """Return a copy of a reservation, or ``None`` if unknown.

        Args:
            reservation_id: The reservation id, e.g. ``"4WQ150"``.

        Returns:
            The reservation object or ``None``.
        """
        return self._get("reservations", reservation_id)

    def has_reservation(self, reservation_id: str) -> bool:
        """Tell whether a reservation id is taken.

        Args:
            reservation_id: The reservation id.

        Returns:
            ``True`` if a reservation with that id exists.
        """
        row = self._conn.execute(
            "SELECT 1 FROM reservations WHERE id = ?", (reservation_id,)
        ).fetchone()
        return row is not None

    def put_reservation(self, reservation_id: str, reservation: dict[str, Any]) -> None:
        """Insert or replace a reservation.

        Args:
            reservation_id: The reservation id.
            reservation: The full reservation object.
        """
        self._put("reservations", reservation_id, reservation)

    def delete_reservation(self, reservation_id: str) -> bool:
        """Delete a reservation (used by the undo of a booking).

        Args:
            reservation_id: The reservation id.

        Returns:
            ``True`` if a row was deleted.
        """
        cur = self._conn.execute("DELETE FROM reservations WHERE id = ?", (reservation_id,))
        return cur.rowcount > 0

    # -- flights (read-only for the tools) -------------------------------------

    def get_flight(self, flight_number: str) -> dict[str, Any] | None:
        """Return a copy of a flight, or ``None`` if unknown.

        Args:
            flight_number: The flight number, e.g. ``"HAT001"``.

        Returns:
            The flight object (with its per-date ``dates`` map) or ``None``.
        """
        return self._get("flights", flight_number)

    def all_flights(self) -> list[dict[str, Any]]:
        """Return all flights in data-file order.

        Returns:
            A list of flight objects.
        """
        return self.find_flights()

    def find_flights(
        self, origin: str | None = None, destination: str | None = None
    ) -> list[dict[str, Any]]:
        """Return the flights with a given origin and/or destination, in data-file order.

        The filter runs inside SQLite, so only matching rows are parsed.

        Args:
            origin: Origin IATA code, or ``None`` for any.
            destination: Destination IATA code, or ``None`` for any.

        Returns:
            A list of flight objects.
        """
        query, params = "SELECT doc FROM flights WHERE 1", []
        for key, value in (("origin", origin), ("destination", destination)):
            if value is not None:
                query += f" AND json_extract(doc, '$.{key}') = ?"
                params.append(value)
        rows = self._conn.execute(query + " ORDER BY seq", params)
        return [json.loads(doc) for (doc,) in rows]

    # -- snapshots -------------------------------------------------------------

    def snapshot(self) -> dict[str, dict[str, dict[str, Any]]]:
        """Return plain-dict copies of the mutable part of the database.

        Returns:
            ``{"users": {id: user}, "reservations": {id: reservation}}``.
        """
        return {"users": self._all("users"), "reservations": self._all("reservations")}
