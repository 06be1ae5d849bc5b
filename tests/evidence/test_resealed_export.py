"""An export re-sealed without the private keys: an entry edited, every hash after it and the
head recomputed with the documented hash rule, checkpoints dropped, and the tags left stale,
stripped, or stripped with the keys. The stand-alone verifier of docs/audit-format.md and
`sagacity audit verify` check signatures by default when the export carries keys, so each
fails; an export stripped of its keys too proves only its own consistency, and fails once the
auditor pins the keys."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from sagacity_agents.cli import cli
from sagacity_agents.core.canonical import canonical_bytes, parse_json

from .test_audit_export import export, populated, run_doc_verifier  # noqa: F401 - the fixture


def reseal(path: Path, saga_id: str, seq: int, *, tags: str, keys: bool = True) -> None:
    """Edit entry ``seq`` of ``saga_id`` (its payload gets another customer's undo data), re-link
    every later entry and the head as a writer with the file (no private key) would, drop the
    saga's checkpoints; ``tags``: "stale" (left as they were) or "stripped"; ``keys``: whether
    the key records stay."""
    records = [json.loads(line) for line in path.read_text().splitlines()]
    prev, out = "0" * 64, []
    for rec in records:
        if rec.get("saga_id") != saga_id or rec["type"] == "checkpoint":
            if rec["type"] != "checkpoint" and (keys or rec["type"] != "key"):
                out.append(rec)
            continue
        if rec["type"] == "head":
            out.append({**rec, "hash": prev})
            continue
        entry = parse_json(base64.b64decode(rec["canonical"]))
        if entry["seq"] == seq:
            entry["payload"] = {**entry["payload"], "undo_data": {"booking_id": "b-bob"}}
        entry["prev_hash"] = prev
        data = canonical_bytes(entry)
        prev = hashlib.sha256(data).hexdigest()
        rec = {**rec, "canonical": base64.b64encode(data).decode(), "hash": prev, "prev_hash": entry["prev_hash"]}
        if tags == "stripped":
            rec.pop("tag", None)
            rec.pop("tag_key", None)
        out.append(rec)
    path.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in out))


def audit_verify(path: Path, *args: str):
    return CliRunner().invoke(cli, ["audit", "verify", str(path), *args])


@pytest.mark.parametrize("tags, bad", [("stale", "edited"), ("stripped", 1)])
def test_a_resealed_export_that_carries_keys_fails_both_verifiers(populated, tmp_path, tags, bad):  # noqa: F811
    db, cps, keys, (done, paused) = populated
    out = tmp_path / "audit.jsonl"
    export(db, cps, out, "--keyring", keys)
    assert run_doc_verifier(out) == (0, {done: None, paused: None})
    ok = audit_verify(out)
    assert ok.exit_code == 0 and "key(s) the export carries (auditor-1)" in ok.output, ok.output
    reseal(out, done, 4, tags=tags)
    expected = 4 if bad == "edited" else bad
    assert run_doc_verifier(out) == (1, {done: expected, paused: None})
    ours = audit_verify(out)
    assert ours.exit_code == 1 and f"BROKEN  saga {done}  at seq {expected}:" in ours.output, ours.output


def test_a_resealed_export_stripped_of_its_keys_fails_once_the_keys_are_pinned(populated, tmp_path):  # noqa: F811
    """With tags and keys gone the export proves only its consistency (said so); with the
    auditor's own keyring both verifiers refuse it from seq 1."""
    db, cps, keys, (done, paused) = populated
    out = tmp_path / "audit.jsonl"
    export(db, cps, out, "--keyring", keys)
    reseal(out, done, 4, tags="stripped", keys=False)
    assert run_doc_verifier(out) == (0, {done: None, paused: None})
    unpinned = audit_verify(out)
    assert unpinned.exit_code == 0 and "signatures not checked" in unpinned.output, unpinned.output
    assert run_doc_verifier(out, keys) == (1, {done: 1, paused: None})
    pinned = audit_verify(out, "--keyring", keys)
    assert pinned.exit_code == 1 and f"BROKEN  saga {done}  at seq 1:" in pinned.output, pinned.output


def test_keys_the_export_carries_are_replaced_by_the_pinned_ones(populated, tmp_path):  # noqa: F811
    """A re-sealer who makes a key of its own, re-tags every entry and puts its public key in
    the export passes a verifier that trusts the export's keys; pinned keys refuse it."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ed25519

    from sagacity_agents.core.authenticity import tag_statement, unlinked_bytes
    from sagacity_agents.core.identity import bound_tag_statement

    db, cps, keys, (done, paused) = populated
    out = tmp_path / "audit.jsonl"
    export(db, cps, out, done, "--keyring", keys)
    reseal(out, done, 4, tags="stale")
    mallory = ed25519.Ed25519PrivateKey.generate()
    records, header, first = [], {}, {}
    for rec in (json.loads(line) for line in out.read_text().splitlines()):
        if rec["type"] == "sagacity.audit.v1":
            header = rec
        elif rec["type"] == "key":
            raw = mallory.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
            rec["public_key"] = base64.b64encode(raw).decode()
        elif rec["type"] == "entry":
            data = base64.b64decode(rec["canonical"])
            unlinked = unlinked_bytes(data, rec["seq"], rec["prev_hash"])
            first.setdefault(rec["saga_id"], rec)
            opened = json.loads(base64.b64decode(first[rec["saga_id"]]["canonical"]))
            statement = (bound_tag_statement(unlinked, rec["tag_key"], header["journal_id"],
                                             "" if rec["seq"] == 1 else first[rec["saga_id"]]["hash"])
                         if opened["payload"].get("derivation") == 2 else tag_statement(unlinked, rec["tag_key"]))
            rec["tag"] = base64.b64encode(mallory.sign(statement)).decode()
        records.append(rec)
    out.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in records))
    assert run_doc_verifier(out) == (0, {done: None})
    assert run_doc_verifier(out, keys) == (1, {done: 1})
    assert audit_verify(out, "--keyring", keys).exit_code == 1
