"""``sagacity journal list|show|verify|heads``: list, show, verify and anchor saga journals."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
from rich.table import Table
from rich.text import Text

from ..core.chain import (
    ChainHead,
    VerifyResult,
    heads_from_json,
    heads_of,
    heads_to_json,
    verify_journal,
)
from ..core.entries import JournalEntry
from ..core.authenticity import signing_view
from ..core.evidence import verify_sagas
from ..core.fence import backend_of
from ..core.identity import copied_saga_problem, derivation_of, journal_id_of
from ..core.journal import Journal
from ..core.shown import read_shown, reveal_saga
from ..errors import ConfigurationError, DataKeyError
from ..render import (
    adoption_lines,
    data_text,
    journal_table,
    make_console,
    print_lines,
    printable,
    saga_status,
    status_text,
    trace_lines,
    verify_text,
)
from ..settings import (
    CHECKPOINTS_ENVVAR,
    DECISION_KEYS_ENVVAR,
    KEYRING_ENVVAR,
    evidence_from,
)
from ..stores import redacted_uri
from .audit import keyring_option
from .base import CONTEXT_SETTINGS, UsageFailure, cli, db_option, print_whole, resolve_saga, with_journal

__all__ = ["journal"]


def _journal_line(journal_id: str | None) -> Text:
    """``journal ID``: the journal's id (``core.identity``), or that it has none."""
    return Text.assemble(("journal ", "dim"), journal_id or "(no journal id)")


def _load_heads(path: str) -> dict[str, ChainHead]:
    """The anchored heads in the JSON file at ``path``.

    Raises:
        UsageFailure: the file cannot be read or is not a heads file (exit status 2).
    """
    try:
        data = json.loads(Path(path).read_text("utf-8"))
        return heads_from_json(data)
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise UsageFailure(f"{path} is not a heads file written by `sagacity journal heads`: {exc}") from exc


@cli.group(context_settings=CONTEXT_SETTINGS, short_help="List, show, verify and anchor saga journals.")
def journal() -> None:
    """Read and verify saga journals (read-only; a missing file is an error, never created).

    A journal holds one hash chain per saga: every entry's hash covers its content and the
    previous entry's hash, so an edited, inserted or reordered entry, or one removed from the
    middle, is detected by `verify`. Removing a saga's last entries, or rewriting its tail
    consistently, is only detected against heads exported earlier (`heads`, then
    `verify --heads`). SAGA_ID arguments accept any unique prefix of the id.
    """


@journal.command("list")
@db_option()
def journal_list(db: str) -> None:
    """List the sagas in the journal, oldest first.

    For each saga: its id, how many entries it has, when its first and last entries were
    recorded (UTC), and its status: the final status from SAGA_CLOSED (COMPLETED, COMPENSATED,
    COMPENSATION_FAILED, IN_DOUBT...), or OPEN with the last phase recorded.
    """

    async def load(j: Journal) -> list[tuple[str, list[JournalEntry]]]:
        return [(sid, await j.entries(sid)) for sid in await j.saga_ids()]

    sagas = with_journal(db, load)
    console = make_console()
    if not sagas:
        console.print(f"no sagas in {redacted_uri(db)}")
        return
    table = Table(title=f"{len(sagas)} saga(s) in {redacted_uri(db)}", title_justify="left", header_style="bold")
    table.add_column("saga id", no_wrap=True)
    table.add_column("entries", justify="right")
    table.add_column("first recorded (UTC)", no_wrap=True)
    table.add_column("last recorded (UTC)", no_wrap=True)
    table.add_column("status")
    for sid, entries in sagas:
        first = entries[0].recorded_at.replace("T", " ").rstrip("Z") if entries else ""
        last = entries[-1].recorded_at.replace("T", " ").rstrip("Z") if entries else ""
        table.add_row(data_text(sid), str(len(entries)), data_text(first), data_text(last),
                      status_text(saga_status(entries)))
    print_whole(console, table)  # the ids are typed next (saga show, journal show, recover)


def _host_keyring(keyring: str | None, key_id: str | None) -> Any:
    """This host's keyring (``None``: none configured), which tags a reveal's access-log entry."""
    try:
        return evidence_from(None, keyring, key_id).keyring
    except ConfigurationError as exc:
        raise UsageFailure(str(exc)) from exc


@journal.command("show")
@click.argument("saga_id")
@db_option()
@click.option("--full", is_flag=True, help="Show whole payloads (as JSON) and whole hashes.")
@click.option("--reveal", is_flag=True,
              help="Show sensitive values in clear: needs SAGACITY_DATA_KEY, --as and --reason, "
              "and is recorded in the access log first (refused when it cannot be).")
@click.option("--as", "by", metavar="NAME", default=None, help="Who reveals (with --reveal; recorded).")
@click.option("--reason", default=None, metavar="TEXT", help="Why (with --reveal; recorded).")
@keyring_option()
def journal_show(saga_id: str, db: str, full: bool, reveal: bool, by: str | None,
                 reason: str | None, keyring: str | None, key_id: str | None) -> None:
    """Show one saga's journal entries as a table.

    Columns: sequence number, phase (INTENT yellow, EXECUTED green, FAILED red, REFUSED magenta,
    COMPENSATING / COMPENSATED cyan / blue, COMPENSATION_FAILED bold red, saga-level entries
    dim), tool, the model's call id, when it was recorded (UTC), a summary of its payload, and
    the start of its hash; for entries written in a traced run, the span that wrote each (the
    traces' ids are listed above the table). SAGA_ID may be any unique prefix of the id.

    Sensitive values (card numbers, passwords, tokens, declared fields) show as their mask
    (`**** **** **** 0002`, `****`), or `[erased]` once the saga's data key was erased. With
    --reveal (the master key in SAGACITY_DATA_KEY, --as NAME, --reason TEXT), a DATA_REVEALED
    entry naming who, why and which values is appended to the journal's access log first; if
    that append fails (a read-only journal, a role without the right) nothing is shown and the
    status is 1. With a keyring (--keyring, $SAGACITY_KEYRING) its signing key tags that entry
    (under key roles, a checkpoint_signer's).
    """
    if reveal and (not by or not reason):
        raise click.UsageError("--reveal needs --as NAME and --reason TEXT (both recorded)")
    if not reveal and (by or reason):
        raise click.UsageError("--as and --reason go with --reveal")

    host = _host_keyring(keyring, key_id) if reveal else None

    async def load(j: Journal) -> tuple[str, list[JournalEntry], str | None]:
        sid = await resolve_saga(j, saga_id)
        if reveal:
            assert by is not None and reason is not None
            shown = (await reveal_saga(signing_view(j, host), sid, by=by, reason=reason)).entries
        else:
            shown = await read_shown(j, sid)
        return sid, shown, await journal_id_of(j)

    try:
        sid, entries, journal_id = with_journal(db, load)
    except DataKeyError as exc:
        raise click.ClickException(f"reveal refused: {exc}") from exc
    console = make_console()
    title = Text.assemble(
        ("saga ", "bold"), printable(sid), "  ", status_text(saga_status(entries)),
        f"  ({len(entries)} entries)",
    )
    console.print(title)
    console.print(_journal_line(journal_id), soft_wrap=True)
    if reveal:
        console.print(Text("sensitive values shown in clear (recorded in the access log)",
                           style="bold red"))
    for line in trace_lines(entries):  # the traces its entries were written in
        console.print(line, soft_wrap=True)
    console.print(journal_table(entries, full=full, width=console.width, revealed=reveal))


@journal.command("verify", short_help="Re-verify hash chains; exit 1 if one is broken.")
@click.argument("saga_id", required=False)
@db_option()
@click.option(
    "--heads",
    "heads_file",
    type=click.Path(exists=True, dir_okay=False),
    metavar="FILE",
    help="Also check each saga against the head `sagacity journal heads` exported to FILE: it "
    "must still have an entry at that seq with exactly that hash (else truncated, head "
    "mismatch or missing saga).",
)
@click.option("--checkpoints", "checkpoints", envvar=CHECKPOINTS_ENVVAR, show_envvar=True, metavar="DIR|URI",
              default=None,
              help="Also check each saga against its newest signed checkpoint in DIR or the "
              "postgresql:// URI's checkpoint table (needs --keyring).")
@click.option("--keyring", "keyring", envvar=KEYRING_ENVVAR, show_envvar=True, metavar="DIR",
              type=click.Path(file_okay=False), default=None,
              help="Verify checkpoint and decision signatures with the KEY_ID.pub files in DIR; "
              "every APPROVED entry must then carry a valid decision signature.")
@click.option("--decision-keys", "decision_keys", envvar=DECISION_KEYS_ENVVAR, show_envvar=True,
              metavar="ID,ID", default=None,
              help="Only these key ids may sign decisions (with --keyring).")
def journal_verify(saga_id: str | None, db: str, heads_file: str | None, checkpoints: str | None,
                   keyring: str | None, decision_keys: str | None) -> None:
    """Re-verify the hash chain of one saga, or of every saga in the journal.

    Re-hashes every entry's stored bytes, checks each link to the previous entry, the sequence
    numbers, and that the indexed columns match the hashed content. Prints one `verify: ok` line
    per intact saga; for a broken chain, prints the saga, the first bad sequence number, the
    fault and its detail, and exits with status 1.

    The chain alone cannot show that a saga's last entries (or all of them) were removed, or
    that its tail was rewritten consistently. With --heads FILE, every saga listed in FILE must
    still hold an entry at the listed seq with exactly the listed hash; a saga missing from the
    journal, a missing seq (truncated) or another hash (rewritten) exits with status 1. Sagas
    newer than FILE are verified without an anchor.

    With --checkpoints and --keyring (docs/threat-model.md), each saga is also checked against
    its newest signed checkpoint (a truncated tail, a deleted close, a re-sealed rewrite, a
    deleted saga) and every APPROVED entry must carry a valid decision signature.
    """
    heads = _load_heads(heads_file) if heads_file is not None else None
    evidence = None
    if checkpoints or keyring:
        try:
            evidence = evidence_from(checkpoints, keyring, decision_keys=decision_keys)
        except ConfigurationError as exc:
            raise UsageFailure(str(exc)) from exc

    async def check(j: Journal) -> tuple[list[VerifyResult], Any, str | None]:
        sid = await resolve_saga(j, saga_id, also=list(heads or ())) if saga_id is not None else None
        if sid is not None and heads is not None and sid not in heads:
            raise UsageFailure(f"{heads_file} lists no head for saga {printable(sid)}")
        found = await verify_sagas(j, sid, heads=heads, evidence=evidence)
        return found, (await evidence.adoption(j) if evidence is not None else None), await journal_id_of(j)

    results, adoption, journal_id = with_journal(db, check, closing=[evidence.checkpoints] if evidence else [])
    console = make_console(highlight=False)
    for note in adoption_lines(adoption):
        console.print(data_text(note))
    if not results:
        console.print(f"verify: no sagas in {redacted_uri(db)}")
        return
    print_lines(console, (verify_text(result) for result in results))
    console.print(_journal_line(journal_id), soft_wrap=True)
    broken = [r for r in results if not r.ok]
    if heads is not None:
        anchored = sum(1 for r in results if r.anchor is not None)
        console.print(f"checked {anchored} saga(s) against the heads in {heads_file}")
    if broken:
        console.print(Text(f"{len(broken)} of {len(results)} saga chain(s) BROKEN", style="bold red"))
        raise SystemExit(1)


@journal.command("heads", short_help="Export each chain's head (seq and hash) as JSON.")
@click.argument("saga_id", required=False)
@db_option()
@click.option(
    "--out",
    "out",
    type=click.Path(dir_okay=False, writable=True),
    metavar="FILE",
    help="Write the JSON to FILE instead of standard output.",
)
def journal_heads(saga_id: str | None, db: str, out: str | None) -> None:
    """Export the head of each saga's chain (or of SAGA_ID's) as JSON: an anchor.

    Output: {"SAGA_ID": {"seq": N, "hash": H}, ...}, the last entry of every chain. Keep it
    where the journal's writers cannot change it (a WORM bucket, a ticket, a signed commit);
    later, `sagacity journal verify --heads FILE` detects what the chain alone cannot: removed
    last entries, a removed saga, a consistently rewritten tail. The chains are verified first;
    if one is broken nothing is exported and the status is 1.
    """

    async def check(j: Journal) -> list[VerifyResult]:
        sid = await resolve_saga(j, saga_id) if saga_id is not None else None
        return await verify_journal(j, sid)

    results = with_journal(db, check)
    broken = [r for r in results if not r.ok]
    if broken:
        console = make_console(highlight=False, stderr=True)
        for result in broken:
            console.print(verify_text(result))
        console.print(Text(f"{len(broken)} saga chain(s) BROKEN: no heads exported", style="bold red"))
        raise SystemExit(1)
    heads = heads_of(results)
    document = json.dumps(heads_to_json(heads), indent=2, ensure_ascii=True) + "\n"
    if out is None:
        click.echo(document, nl=False)
        return
    try:
        Path(out).write_text(document, "utf-8")
    except OSError as exc:
        raise click.ClickException(f"cannot write {out}: {exc}") from exc
    make_console(highlight=False).print(f"wrote the heads of {len(heads)} saga(s) to {out}")


@journal.command("new-id", short_help="Give a copied journal an id of its own.")
@db_option()
@click.option("--yes", is_flag=True,
              help="Confirm: the sagas opened under the old id fail verification from then on.")
def journal_new_id(db: str, yes: bool) -> None:
    """Give the journal a new random id: for a copy (a restored backup, a cloned database, a
    staging copy of production) that is to become another journal.

    Every journal has a random id, made with it; sagas opened since journal ids exist record it
    in their SAGA_OPENED, and their idempotency keys and entry tags are bound to it, so the same
    saga id in two journals never shares a key with a far side that deduplicates on it. A copy
    keeps the original's id until it gets its own here. From then on, every saga the copy holds
    that was opened under the old id FAILS `journal verify` ("other journal", naming both ids)
    and is never resumed, recovered or closed here: that is the point (it belongs to the
    original). Sagas opened before journal ids are not affected. Without --yes nothing is
    changed and the command says what it would do. Needs a role that may write the journal's
    id (on PostgreSQL, UPDATE on sagacity_journal_meta: the tables' owner, not the
    application's role).
    """

    async def work(j: Journal) -> tuple[str | None, str | None, int]:
        backend = backend_of(j)
        old = await journal_id_of(backend)
        bound = sum(1 for summary in await backend.saga_summaries()  # first entries only
                    if derivation_of([summary.first], old).binds
                    and copied_saga_problem([summary.first], old) is None)
        if not yes:
            return old, None, bound
        try:
            assign = backend.assign_journal_id
        except AttributeError:
            raise UsageFailure(f"the journal at {redacted_uri(db)} cannot be given a new id") from None
        return old, await assign(), bound

    old, new, bound = with_journal(db, work)
    console = make_console(highlight=False)
    if new is None:
        raise UsageFailure(
            f"journal {old}: giving it a new id makes the {bound} saga(s) opened under {old} fail "
            "verification here (they belong to the journal it was copied from); nothing changed: "
            "pass --yes to go on")
    console.print(f"journal {old} -> {new}: {bound} saga(s) opened under {old} now fail verification here")
