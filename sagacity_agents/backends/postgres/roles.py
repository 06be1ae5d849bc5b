"""The least-privilege GRANTs for the application's role, filled in for a role and a schema.

The GRANTs ship as psql scripts (``sql/app_role.sql`` for the journal's tables,
``sql/checkpoint_role.sql`` for the signed-checkpoint schema, ``sql/eraser_role.sql`` for the
role that may erase data keys) whose role and schema are the psql
variables ``:"app_role"`` and ``:"schema"``: ``psql -v app_role=ROLE -v schema=SCHEMA -f FILE``
runs them as they are. :func:`grant_statements` fills the same variables in (quoted identifiers,
as psql quotes them), for ``sagacity db grant ROLE`` to print or apply. A variable cannot collide
with a table's name, as the former placeholder ``sagacity_app`` did with
``sagacity_approval_requests`` under a plain search-and-replace.
"""

from __future__ import annotations

import re
import urllib.parse
from importlib import resources

__all__ = ["grant_statements", "quote_identifier", "schema_of_uri"]

_FILES = {"app": "sql/app_role.sql", "checkpoints": "sql/checkpoint_role.sql",
          "eraser": "sql/eraser_role.sql"}
_VARIABLE = re.compile(r':"(app_role|schema)"')


def quote_identifier(name: str) -> str:
    """``name`` as a PostgreSQL quoted identifier (``"name"``, inner quotes doubled), as psql's
    ``:"variable"`` writes it.

    Raises:
        ValueError: an empty name, or one holding a NUL character.
    """
    if not name or "\x00" in name:
        raise ValueError(f"not a usable PostgreSQL identifier: {name!r}")
    return '"' + name.replace('"', '""') + '"'


def grant_statements(role: str, schema: str, *, checkpoints: bool = False,
                     eraser: bool = False) -> list[str]:
    """The GRANT statements of the shipped script, for ``role`` on the tables in ``schema``.

    Args:
        role: the application's role (any name: it is quoted).
        schema: the schema holding the tables: the journal's (often ``public``), or, with
            ``checkpoints``, the checkpoint schema (default ``sagacity_checkpoints``).
        checkpoints: the signed-checkpoint schema's GRANTs instead of the journal's.
        eraser: the eraser role's GRANTs (``sql/eraser_role.sql``: it may delete and rewrap
            the sagas' data keys) instead of the application's.

    Returns:
        One statement per item, each ending with ``;``, in the script's order.

    Raises:
        ValueError: an empty role or schema name, or both ``checkpoints`` and ``eraser``.
    """
    if checkpoints and eraser:
        raise ValueError("--checkpoints and --eraser grant on different schemas: choose one")
    values = {"app_role": quote_identifier(role), "schema": quote_identifier(schema)}
    which = "checkpoints" if checkpoints else "eraser" if eraser else "app"
    script = resources.files("sagacity_agents.backends.postgres").joinpath(_FILES[which])
    lines = [line for line in script.read_text("utf-8").splitlines()
             if line.strip() and not line.lstrip().startswith("--")]
    return [_VARIABLE.sub(lambda m: values[m.group(1)], line) for line in lines]


def schema_of_uri(uri: str) -> str | None:
    """The first schema a ``postgresql://`` URI's ``options=-csearch_path=...`` names (what the
    application's tables are found in), or ``None`` when it names none."""
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(uri).query)
    for options in query.get("options", []):
        match = re.search(r"-c\s*search_path\s*=\s*([^\s,]+)", options)
        if match:
            return match.group(1).strip('"')
    return None
