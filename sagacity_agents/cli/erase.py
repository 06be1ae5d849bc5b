"""``sagacity saga erase`` (one saga, or every closed saga older than a retention period) and
``sagacity journal rewrap-keys`` (master-key rotation): the commands that act on the sagas'
data keys (``core.erasure``, ``core.data_keys``). Neither loads the Agents SDK.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Sequence
from typing import Any

import click
from rich.text import Text

from ..core.authenticity import signing_view
from ..core.data_keys import DATA_KEY_ENVVAR, PREVIOUS_DATA_KEYS_ENVVAR, DataKeys, DataKeyStore
from ..core.erasure import Erasure, erase, erasure_refusal
from ..core.evidence import Evidence
from ..core.fence import backend_of
from ..core.identity import RESERVED_PREFIX, journal_id_of
from ..core.journal import Journal, capabilities_of, utc_now
from ..core.ledger import is_closed
from ..errors import ConfigurationError, DataKeyError, SagacityError, SagaStateError
from ..render import data_text, make_console
from ..settings import evidence_from
from .audit import keyring_option
from .base import UsageFailure, db_option, resolve_saga, with_journal
from .journal import journal as journal_group
from .saga import saga

__all__ = ["older_than_seconds"]

_PERIOD = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([dhm])\s*$")
_UNIT_SECONDS = {"d": 86400, "h": 3600, "m": 60}


def older_than_seconds(text: str) -> float:
    """Seconds a retention period names: ``30d``, ``12h``, ``90m`` (days, hours, minutes).

    Raises:
        click.BadParameter: any other text, or zero.
    """
    match = _PERIOD.match(text or "")
    if match is None or float(match.group(1)) <= 0:
        raise click.BadParameter(f"{text!r}: give a period such as 30d, 12h or 90m",
                                 param_hint="--older-than")
    return float(match.group(1)) * _UNIT_SECONDS[match.group(2)]


def _closed_before(entries: Sequence[Any], cutoff: dt.datetime) -> bool:
    """Whether the saga is closed and its SAGA_CLOSED was recorded before ``cutoff``."""
    if not is_closed(entries):
        return False
    try:
        closed = dt.datetime.strptime(entries[-1].recorded_at, "%Y-%m-%dT%H:%M:%S.%fZ")
    except (TypeError, ValueError):
        return False
    return closed.replace(tzinfo=dt.timezone.utc) < cutoff


async def _retention_candidates(journal: Journal, seconds: float,
                                now: dt.datetime) -> list[tuple[str, list[Any]]]:
    """Every saga (reserved ones aside) closed more than ``seconds`` before ``now`` whose
    data key is still stored, oldest id order, with its entries."""
    store = backend_of(journal)
    cutoff = now - dt.timedelta(seconds=seconds)
    found = []
    for saga_id in await journal.saga_ids():
        if saga_id.startswith(RESERVED_PREFIX):
            continue
        entries = await journal.entries(saga_id)
        if not _closed_before(entries, cutoff):
            continue
        if any(row.wrapped is not None for row in await store.data_keys(saga_id)):
            found.append((saga_id, entries))
    return found


def _print_erasure(console: Any, done: Erasure) -> None:
    if done.already:
        console.print(Text.assemble("saga ", data_text(done.saga_id),
                                    ": already erased (no data key left)"), soft_wrap=True)
    elif not done.stored:
        console.print(Text.assemble("saga ", data_text(done.saga_id), ": no data key stored (its "
                                    "sensitive values were never stored: nothing to erase)"),
                      soft_wrap=True)
    else:
        gens = ", ".join(str(g) for g in done.generations)
        seq = f" (DATA_ERASED seq {done.entry.seq})" if done.entry is not None else ""
        console.print(Text.assemble(
            "erased saga ", data_text(done.saga_id), f": data key generation {gens} destroyed"
            + (", forced" if done.forced else "") + seq), soft_wrap=True)


def _host(keyring: str | None, key_id: str | None) -> Evidence:
    """This host's evidence: its keyring signs the DATA_ERASED entry and verifies the saga."""
    try:
        return evidence_from(None, keyring, key_id)
    except ConfigurationError as exc:
        raise UsageFailure(str(exc)) from exc


@saga.command("erase")
@click.argument("saga_id", required=False)
@click.option("--as", "by", required=True, help="Who erases (journaled in the access log).")
@click.option("--reason", required=True, help="Why (journaled; with --force, why the rules are overridden).")
@click.option("--force", is_flag=True,
              help="Erase although the saga may still need its data (open, awaiting approval, in "
                   "doubt, reopened, dirty, before a call's deadline): journaled forced.")
@click.option("--older-than", "older_than", default=None, metavar="PERIOD",
              help="Instead of SAGA_ID: every saga closed more than PERIOD ago (30d, 12h, 90m).")
@click.option("--dry-run", is_flag=True, help="With --older-than: list what would be erased or refused.")
@keyring_option()
@db_option()
def saga_erase(saga_id: str | None, by: str, reason: str, force: bool, older_than: str | None,
               dry_run: bool, keyring: str | None, key_id: str | None, db: str) -> None:
    """Destroy a saga's data key: its sensitive values become unrecoverable for good, master key
    or not; the chain, the tags and `journal verify` still pass, and `journal show` prints
    [erased]. Written to the access log first (DATA_ERASED, signed by --keyring's key): on a
    read-only journal nothing is erased. On PostgreSQL the connection needs the eraser role
    (`sagacity db grant --eraser ROLE`).

    Refused (exit 1) while the saga is open, awaiting approval, in doubt, reopened or closed
    dirty, or while one of its calls is before its deadline (a late outcome may still land),
    unless --force. With --older-than PERIOD, every saga closed more than PERIOD ago is erased;
    each refused one is reported and skipped, and the exit status is 1 if any was.
    """
    if (saga_id is None) == (older_than is None):
        raise click.UsageError("give a SAGA_ID or --older-than PERIOD (not both)")
    if dry_run and older_than is None:
        raise click.UsageError("--dry-run goes with --older-than")
    if force and older_than is not None:
        raise click.UsageError("--force erases one saga at a time (give its SAGA_ID)")
    evidence = _host(keyring, key_id)
    console = make_console(highlight=False)
    if saga_id is not None:
        _erase_one(console, db, saga_id, by, reason, force, evidence)
        return
    seconds = older_than_seconds(older_than or "")
    refused = with_journal(db, lambda j: _retention(console, j, (seconds, older_than or ""), by,
                                                    reason, dry_run, evidence))
    if refused:
        raise SystemExit(1)


def _erase_one(console: Any, db: str, saga_id: str, by: str, reason: str, force: bool,
               evidence: Evidence) -> None:
    async def work(journal: Journal) -> Erasure:
        _needs_store(journal)
        sid = await resolve_saga(journal, saga_id)
        return await erase(signing_view(journal, evidence.keyring), None, sid, by=by,
                           reason=reason, force=force, evidence=evidence)

    try:
        done = with_journal(db, work)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc
    except SagacityError as exc:
        code = f" [{exc.code}]" if getattr(exc, "code", None) else ""
        raise click.ClickException(f"refused{code}: {exc}") from exc
    _print_erasure(console, done)


def _needs_store(journal: Journal) -> None:
    if not isinstance(journal, DataKeyStore):
        raise UsageFailure(f"{journal!r} keeps no data keys: nothing to erase")


async def _retention(console: Any, journal: Journal, period: tuple[float, str], by: str,
                     reason: str, dry_run: bool, evidence: Evidence) -> int:
    """Erase (or list) every saga closed more than ``period`` (seconds, as given) ago; the
    number refused."""
    seconds, given = period
    _needs_store(journal)
    now = utc_now()
    writer = signing_view(journal, evidence.keyring)
    refused = 0
    candidates = await _retention_candidates(journal, seconds, now)
    for saga_id, entries in candidates:
        if dry_run:
            problem = erasure_refusal(saga_id, entries, now)
            verdict = "would erase" if problem is None else f"would refuse [{problem.code}]: {problem}"
            refused += problem is not None
            console.print(Text.assemble(data_text(saga_id), f"  {verdict}"), soft_wrap=True)
            continue
        try:
            done = await erase(writer, None, saga_id, by=by, reason=reason, evidence=evidence,
                               now=now)
        except SagaStateError as exc:
            refused += 1
            console.print(Text.assemble("skipped ", data_text(saga_id), f": refused [{exc.code}]: {exc}"),
                          soft_wrap=True)
            continue
        _print_erasure(console, done)
    what = "to erase" if dry_run else "erased or refused"
    console.print(f"{len(candidates)} saga(s) closed more than {given} ago with a data key {what}; "
                  f"{refused} refused", soft_wrap=True)
    return refused


@journal_group.command("rewrap-keys")
@db_option()
def journal_rewrap_keys(db: str) -> None:
    """Rotate the master key: every stored data key is unwrapped with the key that wrapped it
    ($SAGACITY_DATA_KEY or one of $SAGACITY_DATA_KEY_PREVIOUS) and wrapped again with
    $SAGACITY_DATA_KEY, in one transaction (all or none). Erased keys stay erased. Once it
    succeeded, drop the old key from $SAGACITY_DATA_KEY_PREVIOUS: it opens nothing left.
    """
    try:
        keys = DataKeys.from_env()
    except ConfigurationError as exc:
        raise UsageFailure(str(exc)) from exc
    if keys.master is None:
        raise UsageFailure(f"set {DATA_KEY_ENVVAR} to the new master key (and "
                           f"{PREVIOUS_DATA_KEYS_ENVVAR} to the old ones)")

    async def work(opened: Journal) -> int:
        if not capabilities_of(opened).data_keys:  # the store's full set, rewrap included
            raise UsageFailure(f"{opened!r} keeps no data keys: nothing to rewrap")
        journal_id = await journal_id_of(opened) or ""
        return await opened.rewrap_data_keys(  # type: ignore[attr-defined, no-any-return]
            lambda row: keys.rewrapped(journal_id, row))

    try:
        count = with_journal(db, work)
    except DataKeyError as exc:
        raise click.ClickException(f"nothing rewrapped: {exc}") from exc
    make_console(highlight=False).print(
        f"{count} data key(s) rewrapped under master key {keys.master.key_id}", soft_wrap=True)
