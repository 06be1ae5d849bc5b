"""What the sensitive-data acceptance tests share: the secrets, the tools that handle them, and
readers of every byte a backend stores.

The secrets are distinctive strings so that a search of raw bytes (a SQLite file and its -wal,
``pg_dump`` of the test's schema, an audit export, span and log lines) finds them only where a
value leaked; each is searched in every form it could be written in (a card number with and
without its spaces, the CVV with its field name).
"""

from __future__ import annotations

import base64
import inspect
import json
import os
import random
import re
import shutil
import subprocess
import urllib.parse
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from agents import Agent, FunctionTool, function_tool

from sagacity_agents import Sagacity, compensable, read_only, record_undo_data
from sagacity_agents.core.data_keys import DATA_KEY_ENVVAR, DataKeys, MasterKey
from tests.sdk.helpers import scripted

CARD = "4111 1111 1111 1111"
"""A Luhn-valid test card number, under a default name (``card_number``)."""
CVV = "737"
TOKEN = "sk_live_9f8e7d6c5b4a3928170655aa"
"""An API token a tool *returns* (``{"token": ...}`` in its result)."""
PASSWORD = "Tr0ub4dor&3-horse"
"""A password a tool takes and its exception then quotes."""
IBAN = "DE89370400440532013000"
"""A value sensitive only by declaration (``sensitive={"iban"}``): no default name, no Luhn."""
PHRASE = "correct-staple-battery-horse"
"""A result field sensitive only by declaration (``"result.recovery_phrase"``)."""
OTHER_CARD = "5555 5555 5555 4444"
"""Another Luhn-valid card (an approval bound to :data:`CARD` must refuse it)."""

MASTER_TEXT = base64.b64encode(bytes(range(32))).decode()
"""A fixed master key (``SAGACITY_DATA_KEY``) for the runs that store values encrypted."""


def needles(*values: str) -> dict[str, list[bytes]]:
    """Every byte form each secret could take in storage: as given, without spaces or dashes
    (a card number), JSON-escaped, and the CVV beside its field name (``"cvv":"737"`` in RFC 8785
    bytes, ``cvv=737`` in a summary, ``'cvv': '737'`` in a repr)."""
    forms: dict[str, list[bytes]] = {}
    for value in values or (CARD, CVV, TOKEN, PASSWORD, IBAN, PHRASE):
        if value == CVV:
            found = [f'"cvv":"{CVV}"', f'"cvv": "{CVV}"', f"cvv={CVV}", f"'cvv': '{CVV}'",
                     f'\\"cvv\\":\\"{CVV}\\"', f'\\"cvv\\": \\"{CVV}\\"']
        else:
            compact = value.replace(" ", "").replace("-", "") if value[:1].isdigit() else value
            found = sorted({value, compact, json.dumps(value)[1:-1]})
        forms[value] = [f.encode() for f in found]
    return forms


def leaks(data: bytes | str, values: Iterable[str] = ()) -> list[str]:
    """The secrets (by value) whose byte forms occur in ``data``: ``[]`` when none does."""
    raw = data.encode("utf-8", "surrogateescape") if isinstance(data, str) else data
    return [value for value, forms in needles(*values).items() if any(f in raw for f in forms)]


def deterministic_random(seed: int) -> Callable[[int], bytes]:
    """A ``random_bytes`` for :class:`DataKeys`: the same bytes for the same seed (tests only:
    every backend then gets the same data keys and nonces)."""
    source = random.Random(seed)
    return source.randbytes


def data_keys(master: bool, seed: int | None = None) -> DataKeys:
    """The application's data keys: with the fixed master key or none, random or seeded."""
    key = MasterKey.from_text(MASTER_TEXT) if master else None
    if seed is None:
        return DataKeys(key)
    return DataKeys(key, random_bytes=deterministic_random(seed))


def open_sagacity(location: Any, keys: DataKeys | None = None, **options: Any) -> Sagacity:
    """``Sagacity(location, ...)`` with ``keys`` injected (the constructor's data-key argument,
    whatever it is called; without one the process's ``SAGACITY_DATA_KEY`` is what counts)."""
    if keys is not None:
        params = inspect.signature(Sagacity).parameters
        for name in ("data_keys", "data_key", "keys"):
            if name in params:
                options[name] = keys
                break
    return Sagacity(location, **options)


# --- the tools --------------------------------------------------------------------------------


class LoginRefused(Exception):
    """What the login tool raises: its message quotes the password (as careless code does)."""


def payment_tools(undone: list[dict[str, Any]]) -> list[FunctionTool]:
    """Tools with NO ``sensitive=`` declaration: a card charge (card number and CVV in its
    arguments), a token fetch (the token in its result) and a login whose exception quotes the
    password. ``undone`` collects the undo data each undo received."""

    def refund(ctx: Any) -> None:
        undone.append(dict(ctx.undo_data))

    @function_tool
    @compensable(undo=refund, scope="sensitive-tests")
    def charge_card(card_number: str, cvv: str, amount_eur: int) -> str:
        """Charge a card."""
        record_undo_data({"charge_id": "ch_0001", "amount_eur": amount_eur})
        return f"charged {amount_eur} EUR (ch_0001)"

    @function_tool
    @read_only
    def fetch_api_token(service: str) -> dict[str, str]:
        """Get an API token for a service."""
        return {"service": service, "token": TOKEN}

    @function_tool
    @read_only
    def login(user: str, password: str) -> str:
        """Log a user in."""
        raise LoginRefused(f"login refused for {user}: password {password!r} is wrong")

    return [charge_card, fetch_api_token, login]


def declared_tools(undone: list[dict[str, Any]]) -> list[FunctionTool]:
    """A tool that declares what is sensitive (``sensitive={"iban", "result.recovery_phrase"}``):
    neither is a default name nor a card number."""

    def close_account(ctx: Any) -> None:
        undone.append(dict(ctx.undo_data))

    @function_tool
    @compensable(undo=close_account, scope="sensitive-tests",
                 sensitive={"iban", "result.recovery_phrase"})
    def open_account(holder: str, iban: str) -> dict[str, str]:
        """Open an account."""
        record_undo_data({"account_id": "AC-1"})
        return {"account_id": "AC-1", "recovery_phrase": PHRASE}

    return [open_account]


def charge_and_ship(refund: Callable[[Any], None], *, scope: str,
                    sensitive: set[str] | None = None) -> list[FunctionTool]:
    """A charge that records the card number in its undo data (``{"card", "charge_id"}``),
    refunded by ``refund``, and a shipping step that always fails: the saga undoes the charge."""
    declared = {} if sensitive is None else {"sensitive": sensitive}

    @function_tool
    @compensable(undo=refund, scope=scope, **declared)
    def charge_card(card_number: str, amount_eur: int) -> str:
        """Charge a card."""
        record_undo_data({"card": card_number, "charge_id": "ch_9"})
        return "charged"

    @function_tool
    @compensable(undo=lambda ctx: None, scope=scope)
    def ship(order: str) -> str:
        """Ship an order."""
        raise RuntimeError("warehouse closed")

    return [charge_card, ship]


def payment_agent(undone: list[dict[str, Any]]) -> Agent[Any]:
    """Charge (card + CVV), fetch a token, open an account (declared), then a login that fails
    quoting the password: the saga fails and undoes the account and the charge."""
    model = scripted(
        [("charge_card", {"card_number": CARD, "cvv": CVV, "amount_eur": 120}, "c_charge")],
        [("fetch_api_token", {"service": "payments"}, "c_token")],
        [("open_account", {"holder": "Alice Martin", "iban": IBAN}, "c_account")],
        [("login", {"user": "alice", "password": PASSWORD}, "c_login")],
        "All done.",
    )
    return Agent(name="payments", model=model,
                 tools=[*payment_tools(undone), *declared_tools(undone)])


# --- every stored byte ------------------------------------------------------------------------


def sqlite_files(path: str | Path) -> bytes:
    """The raw bytes of a SQLite database and of its -wal and -shm files (those present)."""
    out = b""
    for suffix in ("", "-wal", "-shm", "-journal"):
        file = Path(f"{path}{suffix}")
        if file.exists():
            out += file.read_bytes()
    return out


def pg_dump(uri: str) -> bytes:
    """``pg_dump`` (data and schema) of the schema ``uri``'s search path names: every row the
    server returns for it, as text."""
    exe = shutil.which("pg_dump")
    assert exe, "pg_dump is needed to read what PostgreSQL stores"
    parts = urllib.parse.urlsplit(uri)
    query = urllib.parse.parse_qs(parts.query)
    options = query.get("options", [""])[0]
    schema = options.split("search_path=", 1)[1].split()[0] if "search_path=" in options else None
    assert schema, f"no schema in {uri}"
    plain = parts._replace(query="").geturl()
    done = subprocess.run([exe, "--no-owner", "-n", schema, "-d", plain], capture_output=True,
                          check=False, timeout=120, env={**os.environ, "PGCONNECT_TIMEOUT": "5"})
    assert done.returncode == 0, done.stderr.decode()
    # bytea columns (the entries' canonical bytes, sealed values, wrapped keys) are dumped as
    # hex ("\\x7b22..." in COPY's text format): decoded and appended, so a search sees them.
    decoded = [bytes.fromhex(run.decode()) for run in _BYTEA.findall(done.stdout)]
    return done.stdout + b"\n" + b"\n".join(decoded)


_BYTEA = re.compile(rb"\\\\?x((?:[0-9a-f]{2})+)")


def object_bytes(obj: Any) -> bytes:
    """Every ``str`` and ``bytes`` reachable from ``obj`` (an in-memory journal or store):
    what such a backend "stores". Functions, modules, classes and locks are not walked."""
    seen: set[int] = set()
    out: list[bytes] = []
    stack = [obj]
    while stack:
        item = stack.pop()
        if id(item) in seen or item is None or isinstance(item, (int, float, bool)):
            continue
        seen.add(id(item))
        if isinstance(item, str):
            out.append(item.encode("utf-8", "surrogateescape"))
        elif isinstance(item, (bytes, bytearray, memoryview)):
            out.append(bytes(item))
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, (list, tuple, set, frozenset)):
            stack.extend(item)
        elif inspect.isroutine(item) or inspect.ismodule(item) or inspect.isclass(item):
            continue
        else:
            stack.extend(_attributes(item))
    return b"\n".join(out)


def _attributes(item: Any) -> list[Any]:
    values: list[Any] = []
    if hasattr(item, "__dict__"):
        values.extend(vars(item).values())
    for cls in type(item).__mro__:
        for name in getattr(cls, "__slots__", ()):
            if hasattr(item, name):
                values.append(getattr(item, name))
    return values


async def stored_bytes(backend_name: str, location: str, journal: Any, approvals: Any = None) -> bytes:
    """Every byte ``journal``'s backend holds at ``location`` now (the journal still open: a
    SQLite -wal is read as it stands)."""
    if backend_name == "sqlite":
        return sqlite_files(location)
    if backend_name == "postgres":
        return pg_dump(location)
    backend = getattr(journal, "backend", journal)
    return object_bytes(backend) + object_bytes(approvals)


async def audit_text(journal: Any, saga_ids: list[str] | None = None) -> str:
    """An audit export of ``journal``, with each entry's base64 ``canonical`` decoded and
    appended (an export carries the entries' bytes in base64)."""
    import io

    from sagacity_agents.core.audit import export_audit

    out = io.StringIO()
    await export_audit(journal, out, saga_ids)
    text = out.getvalue()
    decoded = [base64.b64decode(json.loads(line)["canonical"]).decode("utf-8", "replace")
               for line in text.splitlines() if '"canonical"' in line]
    return text + "\n".join(decoded)


def span_text(collected: Any) -> str:
    """Every span of ours (``saga.*``) the SDK's trace got, exported as JSON."""
    return "\n".join(json.dumps(span.export(), default=str) for span in collected.ours())


def otel_text(exporter: Any) -> str:
    """Every OpenTelemetry span of this library: names, attributes, events, statuses."""
    parts = []
    for span in exporter.get_finished_spans():
        parts.append(json.dumps({
            "name": span.name, "attributes": dict(span.attributes or {}),
            "status": span.status.description,
            "events": [(e.name, dict(e.attributes or {})) for e in span.events],
        }, default=str))
    return "\n".join(parts)


def log_text(records: Iterable[Any]) -> str:
    """The library's log lines (loggers under ``sagacity_agents``), formatted, with exception
    text."""
    import logging

    formatter = logging.Formatter("%(name)s %(levelname)s %(message)s")
    return "\n".join(formatter.format(r) for r in records if r.name.startswith("sagacity"))


__all__ = [
    "CARD", "CVV", "DATA_KEY_ENVVAR", "IBAN", "MASTER_TEXT", "OTHER_CARD", "PASSWORD", "PHRASE",
    "TOKEN", "LoginRefused", "audit_text", "charge_and_ship", "data_keys", "declared_tools", "deterministic_random",
    "leaks", "log_text", "needles", "object_bytes", "open_sagacity", "otel_text", "payment_agent",
    "payment_tools", "pg_dump", "span_text", "sqlite_files", "stored_bytes",
]
