"""psycopg on demand, and the URIs handed to it: what ``setup`` (pools) and ``migrations`` share.

psycopg 3 and psycopg_pool are the ``postgres`` extra: :func:`load_drivers` imports them when a
database is first used or migrated, never when a module is imported, and a missing install is a
:class:`ConfigurationError` naming ``pip install 'sagacity-agents[postgres]'``. A URI is
recognized (:func:`is_postgres_uri`), checked without connecting (:func:`check_conninfo`) and shown
without its password (:func:`redacted_uri`).
"""

from __future__ import annotations

import re
from typing import Any

from ...errors import ConfigurationError

__all__ = ["INSTALL_HINT", "check_conninfo", "is_postgres_uri", "load_drivers", "redacted_uri"]

INSTALL_HINT = "pip install 'sagacity-agents[postgres]' (from a checkout: pip install '.[postgres]')"
"""The command that installs the PostgreSQL backend's dependencies (psycopg 3, psycopg_pool)."""


def is_postgres_uri(location: object) -> bool:
    """Return whether ``location`` (a journal argument) names a PostgreSQL database:
    a string starting with ``postgresql://`` or ``postgres://``."""
    return isinstance(location, str) and location.startswith(("postgresql://", "postgres://"))


def load_drivers() -> tuple[Any, Any]:
    """Import psycopg and psycopg_pool.

    Raises:
        ConfigurationError: the ``postgres`` extra is not installed.
    """
    try:
        import psycopg
        import psycopg_pool
    except ImportError as exc:
        raise ConfigurationError(
            f"the PostgreSQL backend requires the 'postgres' extra: {INSTALL_HINT}"
        ) from exc
    return psycopg, psycopg_pool


def check_conninfo(psycopg: Any, conninfo: str) -> None:
    """Refuse a URI libpq cannot parse, at once (not after a pool's connect timeout).

    Raises:
        ConfigurationError: libpq's own reason (with any password removed), or a port that is
            not a number from 1 to 65535.
    """
    try:
        params = psycopg.conninfo.conninfo_to_dict(conninfo)
    except psycopg.Error as exc:
        reason = str(exc).strip().replace(conninfo, redacted_uri(conninfo))
        raise ConfigurationError(f"not a valid PostgreSQL URI {redacted_uri(conninfo)!r}: {reason}") from exc
    for port in str(params.get("port") or "").split(","):
        if port and not (port.isdigit() and 1 <= int(port) <= 65535):
            raise ConfigurationError(
                f"not a valid PostgreSQL URI {redacted_uri(conninfo)!r}: invalid port {port!r}"
            )


def redacted_uri(location: str) -> str:
    """``location`` as it may be shown or logged: a PostgreSQL URI without its password (in the
    user info or a ``password=`` query parameter); anything else unchanged."""
    if not is_postgres_uri(location):
        return location
    scheme, _, rest = location.partition("://")
    end = len(rest)
    for stop in "/?#":  # the authority ends at the first of these
        if stop in rest:
            end = min(end, rest.index(stop))
    authority, tail = rest[:end], rest[end:]
    userinfo, at, hosts = authority.rpartition("@")
    if at:
        authority = f"{userinfo.split(':', 1)[0]}@{hosts}"
    tail = re.sub(r"([?&])password=[^&#]*", r"\1password=***", tail)
    return f"{scheme}://{authority}{tail}"
