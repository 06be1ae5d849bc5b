"""``sagacity audit``: export a journal for auditors, verify an export, sign checkpoints, make keys.

Registered on the ``sagacity`` group when :mod:`sagacity_agents.cli` is imported (as every
command module is). Only the core is imported: no Agents SDK.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
from rich.text import Text

from .base import CONTEXT_SETTINGS, UsageFailure, resolve_saga, cli, db_option, with_journal
from ..core.audit import export_audit, export_key_ids, verify_export
from ..core.journal import Journal
from ..core.signing import ADMINS_FILE, generate_key
from ..errors import ConfigurationError, SagacityError
from ..render import make_console, printable, verify_text
from ..settings import (
    CHECKPOINTS_ENVVAR,
    DECISION_KEYS_ENVVAR,
    KEYRING_ENVVAR,
    SIGNING_KEY_ENVVAR,
    checkpoint_store_at,
    evidence_from,
)
from ..stores import redacted_uri

__all__ = ["audit", "checkpoints_option", "keyring_option"]


def checkpoints_option(required: bool = False) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``--checkpoints DIR|URI``: the signed-checkpoint directory or ``postgresql://`` URI
    (``$SAGACITY_CHECKPOINTS``)."""
    return click.option("--checkpoints", "checkpoints", envvar=CHECKPOINTS_ENVVAR, show_envvar=True,
                        required=required, metavar="DIR|URI",
                        help="Signed-checkpoint directory, or postgresql:// URI of the checkpoint table.")


def keyring_option(required: bool = False) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``--keyring DIR`` (``$SAGACITY_KEYRING``) and ``--key-id ID`` (``$SAGACITY_SIGNING_KEY_ID``)."""

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        fn = click.option("--key-id", "key_id", envvar=SIGNING_KEY_ENVVAR, show_envvar=True, default=None,
                          metavar="ID", help="Which private key of the keyring signs (when it holds several).")(fn)
        return click.option("--keyring", "keyring", envvar=KEYRING_ENVVAR, show_envvar=True,
                            required=required, metavar="DIR", type=click.Path(file_okay=False),
                            help="Keyring directory: KEY_ID.pub files verify, a KEY_ID.key file signs.")(fn)

    return decorate


def _evidence(checkpoints: str | None, keyring: str | None, key_id: str | None,
              decision_keys: str | None = None) -> Any:
    try:
        return evidence_from(checkpoints, keyring, key_id, decision_keys)
    except ConfigurationError as exc:
        raise UsageFailure(str(exc)) from exc


@cli.group(context_settings=CONTEXT_SETTINGS, short_help="Export, verify and sign journals for audit.")
def audit() -> None:
    """Audit: JSON Lines exports anyone can re-verify, signed checkpoints, signing keys.

    \b
      sagacity audit keygen writer-2026 --keyring keys/     make an Ed25519 key pair
      sagacity audit checkpoint SAGA_ID                      sign a saga's head now
      sagacity audit export --out audit.jsonl                entries, heads, checkpoints
      sagacity audit verify audit.jsonl --keyring keys/      re-check an export

    The format and a stand-alone verifier are in docs/audit-format.md.
    """


@audit.command("export")
@click.argument("saga_ids", nargs=-1)
@click.option("--out", "out", required=True, type=click.Path(dir_okay=False, writable=True), metavar="FILE",
              help="Where to write the JSON Lines.")
@db_option()
@checkpoints_option()
@keyring_option()
def audit_export(saga_ids: tuple[str, ...], out: str, db: str, checkpoints: str | None,
                 keyring: str | None, key_id: str | None) -> None:
    """Write SAGA_IDS (default: every saga) as JSON Lines: each entry's stored canonical bytes
    (base64) with its hash and link, each saga's head, and its signed checkpoints. With
    --keyring, also its public keys and the keyring's saga (adoption, roles, revocations):
    verifiers then check every signature by default."""
    try:
        store = checkpoint_store_at(checkpoints) if checkpoints else None
    except ConfigurationError as exc:
        raise UsageFailure(str(exc)) from exc
    ring = _evidence(None, keyring, key_id).keyring if keyring else None

    async def work(j: Journal) -> int:
        ids = [await resolve_saga(j, s) for s in saga_ids] if saga_ids else None
        try:
            with open(out, "w", encoding="utf-8") as fh:
                return await export_audit(j, fh, ids, store, ring)
        except OSError as exc:
            raise click.ClickException(f"cannot write {out}: {exc}") from exc
        except ValueError as exc:  # a damaged checkpoint file: say which, no traceback
            raise click.ClickException(f"cannot export the checkpoints in {redacted_uri(str(checkpoints))}: {exc}") from exc

    count = with_journal(db, work, closing=[store])
    make_console(highlight=False).print(f"exported {count} entries to {out}")


@audit.command("verify")
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@keyring_option()
@click.option("--decision-keys", "decision_keys", envvar=DECISION_KEYS_ENVVAR, show_envvar=True,
              metavar="ID,ID", default=None,
              help="Only these key ids may sign decisions (with --keyring), as journal verify checks.")
def audit_verify(file: str, keyring: str | None, key_id: str | None, decision_keys: str | None) -> None:
    """Re-verify an export: every hash and link, each chain against its exported head and its
    checkpoints; with keys also every tag, checkpoint, decision and resolution signature and
    each key's role and validity. The keys are those of --keyring (pinned) or, by default, the
    ones the export carries. Exit 1 if any saga fails."""
    evidence = _evidence(None, keyring, key_id, decision_keys)
    try:
        carried = export_key_ids(file)
        results = verify_export(file, evidence.keyring, evidence.decision_keys)
    except ValueError as exc:
        raise UsageFailure(f"{file} is not an audit export: {exc}") from exc
    console = make_console(highlight=False)
    for result in results:
        console.print(verify_text(result))
    broken = [r for r in results if not r.ok]
    if keyring is None and carried:
        console.print(f"signatures checked with the {len(carried)} key(s) the export carries "
                      f"({', '.join(map(printable, carried))}); pin them with --keyring: whoever "
                      "re-seals an export can replace them too")
    elif keyring is None:
        console.print("signatures not checked (no key in the export, no --keyring): this proves "
                      "only that the chains are consistent, which anyone can re-seal")
    if broken:
        console.print(Text(f"{len(broken)} of {len(results)} saga(s) BROKEN", style="bold red"))
        raise SystemExit(1)


@audit.command("checkpoint")
@click.argument("saga_ids", nargs=-1)
@db_option()
@checkpoints_option(required=True)
@keyring_option(required=True)
def audit_checkpoint(saga_ids: tuple[str, ...], db: str, checkpoints: str, keyring: str, key_id: str | None) -> None:
    """Sign the current head of SAGA_IDS (default: every saga) and store the checkpoints.
    Each saga is verified first: a saga that does not verify is not signed (exit 1)."""
    evidence = _evidence(checkpoints, keyring, key_id)
    if not evidence.signs_checkpoints:
        raise UsageFailure(f"the keyring {keyring} holds no private key to sign with")

    async def work(j: Journal) -> list[str]:
        ids = [await resolve_saga(j, s) for s in saga_ids] if saga_ids else await j.saga_ids()
        lines = []
        for sid in ids:
            try:
                cp = await evidence.checkpoint(j, sid)
                lines.append(f"{printable(sid)}: signed seq {cp.seq} hash {cp.hash} (key {cp.key_id})"
                             if cp else f"{printable(sid)}: no entries")
            except SagacityError as exc:
                lines.append(f"!{exc}")
        return lines

    console = make_console(highlight=False)
    failed = False
    for line in with_journal(db, work, closing=[evidence.checkpoints]):
        failed |= line.startswith("!")
        console.print(Text(line.lstrip("!"), style="bold red" if line.startswith("!") else ""))
    if failed:
        raise SystemExit(1)


@audit.command("keygen")
@click.argument("key_id")
@click.option("--keyring", "keyring", required=True, envvar=KEYRING_ENVVAR, show_envvar=True,
              metavar="DIR", type=click.Path(file_okay=False), help="Keyring directory (created if missing).")
@click.option("--admin", "admin", is_flag=True,
              help="A keyring-admin key: named in the keyring's ADMINS file; move its .key offline.")
def audit_keygen(key_id: str, keyring: str, admin: bool) -> None:
    """Make an Ed25519 key pair KEY_ID.key (private, mode 0600) and KEY_ID.pub in the keyring.

    To rotate: make a new pair, move the old .key away, keep the old .pub (it verifies what the
    old key signed); revoke the old key if it may be in other hands (`audit keys revoke`)."""
    try:
        private, public = generate_key(keyring, key_id)
        if admin:
            with open(Path(keyring) / ADMINS_FILE, "a", encoding="utf-8") as fh:
                fh.write(f"{key_id}\n")
    except (ConfigurationError, OSError) as exc:
        raise UsageFailure(str(exc)) from exc
    make_console(highlight=False).print(
        f"wrote {private} and {public}" + (f"; {key_id} is a keyring admin (ADMINS): keep "
                                           f"{private} offline" if admin else ""))



@audit.command("adopt-keyring")
@db_option()
@keyring_option(required=True)
def audit_adopt_keyring(db: str, keyring: str, key_id: str | None) -> None:
    """Adopt the keyring on a journal that already holds entries: verify every
    saga, then journal a signed marker listing every saga's head. Under the keyring, untagged
    entries up to those heads are then "unauthenticated, before the keyring"; any other untagged
    entry, in any saga, is BROKEN. Run it once every writer has the keyring, and once only:
    exit 1, nothing written, when a saga does not verify, holds an untagged entry after a tagged
    one, or the keyring is already adopted on this journal."""
    from ..core.authenticity import adopt_keyring  # noqa: PLC0415

    evidence = _evidence(None, keyring, key_id)
    if evidence.keyring is None or not evidence.keyring.can_sign:
        raise UsageFailure(f"the keyring {keyring} holds no private key to sign the marker with")

    async def work(j: Journal) -> tuple[str, int]:
        written = await adopt_keyring(j, evidence.keyring)
        return (written[0].payload["adoption"],
                sum(len(e.payload.get("heads") or {}) for e in written))

    console = make_console(highlight=False)
    try:
        adoption, count = with_journal(db, work)
    except SagacityError as exc:
        console.print(Text(f"keyring NOT adopted: {exc}", style="bold red"))
        raise SystemExit(1) from exc
    console.print(f"keyring adopted (adoption {adoption}, key {evidence.keyring.signing_key[0]}): "
                  f"{count} saga(s) listed; their untagged entries up to the listed heads are "
                  "\"before the keyring\", every other untagged entry is BROKEN under it")


@audit.group("keys", context_settings=CONTEXT_SETTINGS, short_help="Key roles and revocation.")
def audit_keys() -> None:
    """Each keyring key's roles and validity, journaled as keyring events signed by a
    keyring-admin key (docs/threat-model.md, "Key roles").

    \b
      sagacity audit keys list --keyring keys/
      sagacity audit keys role writer-2026 --role run_writer --reason "agent host" \\
          --keyring keys/ --key-id root-admin
      sagacity audit keys revoke writer-2025 --reason "laptop stolen" \\
          --keyring keys/ --key-id root-admin

    Roles: run_writer (run entries), decision_maker (APPROVED, REJECTED, RESOLVED),
    checkpoint_signer, keyring_admin (keyring events). Admins are named in the keyring
    directory's ADMINS file (`audit keygen ID --admin`). Without any role event, every key is a
    run writer and checkpoint signer, and a decision maker when --decision-keys names it (any
    key when it is not given)."""


def _admin_keyring(keyring: str, key_id: str | None) -> Any:
    evidence = _evidence(None, keyring, key_id)
    if evidence.keyring is None or not evidence.keyring.can_sign:
        raise UsageFailure(f"the keyring {keyring} holds no private key: a keyring event is signed "
                           "by a keyring-admin key (--key-id)")
    return evidence.keyring


def _keyring_event(db: str, write: Callable[[Journal], Any]) -> Any:
    try:
        return with_journal(db, write)
    except ConfigurationError as exc:
        raise UsageFailure(str(exc)) from exc


@audit_keys.command("list")
@db_option()
@keyring_option(required=True)
@click.option("--decision-keys", "decision_keys", envvar=DECISION_KEYS_ENVVAR, show_envvar=True,
              metavar="ID,ID", default=None, help="The decision_keys setting, as verify reads it.")
def audit_keys_list(db: str, keyring: str, key_id: str | None, decision_keys: str | None) -> None:
    """Every key of the keyring: its roles, valid from, revoked at (and why), and the keyring
    events that were ignored."""
    from ..core.keyring_events import journal_key_roles  # noqa: PLC0415

    evidence = _evidence(None, keyring, key_id, decision_keys)

    async def work(j: Journal) -> Any:
        return await journal_key_roles(j, evidence.keyring, evidence.decision_keys)

    roles = with_journal(db, work)
    console = make_console(highlight=False)
    console.print("roles: " + ("from keyring events" if roles.explicit is not None else
                               "the default (no keyring event): every key a run writer and checkpoint "
                               "signer; decision makers as decision_keys says"))
    for kid in sorted(evidence.keyring.verify_keys):
        names = ", ".join(sorted(r.value for r in roles.roles_of(kid))) or "no role"
        rev = roles.revoked.get(kid)
        line = (f"{printable(kid)}: {names}; valid from {roles.valid_from.get(kid, '-')}; "
                + (f"REVOKED at {rev.revoked_at} ({printable(rev.reason)})" if rev else "not revoked"))
        console.print(Text(line, style="red" if rev else ""))
    for note in roles.notes:
        console.print(Text(printable(note), style="yellow"))


@audit_keys.command("role")
@click.argument("target")
@click.option("--role", "roles", multiple=True, metavar="ROLE",
              type=click.Choice(["run_writer", "decision_maker", "checkpoint_signer", "keyring_admin"]),
              help="A role TARGET has from now on (repeat for several; none: no role).")
@click.option("--reason", "reason", default="", help="Why, kept in the event.")
@db_option()
@keyring_option(required=True)
def audit_keys_role(target: str, roles: tuple[str, ...], reason: str, db: str, keyring: str,
                    key_id: str | None) -> None:
    """Give TARGET exactly the roles --role names (a KEY_ROLES event signed by the admin key
    --key-id). From the first such event roles are explicit: a key no event names has none."""
    from ..core.keyring_events import grant_roles  # noqa: PLC0415

    admin = _admin_keyring(keyring, key_id)
    entry = _keyring_event(db, lambda j: grant_roles(j, admin, target, roles, reason=reason))
    make_console(highlight=False).print(
        f"key {printable(target)}: roles {', '.join(roles) or 'none'} (keyring event seq {entry.seq}, "
        f"signed by {admin.signing_key[0]})")


@audit_keys.command("revoke")
@click.argument("target")
@click.option("--reason", "reason", required=True, help="Why (printed with every refusal).")
@click.option("--at", "revoked_at", default=None, metavar="STAMP",
              help="Revoked from this UTC time (YYYY-MM-DDTHH:MM:SS.ffffffZ), e.g. when it was stolen; default now.")
@db_option()
@keyring_option(required=True)
def audit_keys_revoke(target: str, reason: str, revoked_at: str | None, db: str, keyring: str,
                      key_id: str | None) -> None:
    """Revoke TARGET (a KEY_REVOKED event signed by the admin key --key-id). In each saga, its
    tags and signatures after the newest signed checkpoint dated before the revocation are then
    refused; what such a checkpoint covers stays valid. Sign checkpoints first
    (`sagacity audit checkpoint`)."""
    from ..core.keyring_events import revoke_key  # noqa: PLC0415

    admin = _admin_keyring(keyring, key_id)
    entry = _keyring_event(db, lambda j: revoke_key(j, admin, target, reason=reason, revoked_at=revoked_at))
    make_console(highlight=False).print(
        f"key {printable(target)} REVOKED at {entry.payload['revoked_at']} (keyring event seq {entry.seq}, "
        f"signed by {admin.signing_key[0]})")
