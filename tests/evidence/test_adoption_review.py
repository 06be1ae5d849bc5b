"""Issue 19, the hostile review of the keyring adoption (A-02): an INSERT-only writer can neither
get its untagged entries listed as "before the keyring" by a second adoption or by an adoption
run after writers already tag (A1), nor void a valid adoption with garbage rows in the reserved
saga (A2). On SQLite and on PostgreSQL under the least-privilege role (the ``db`` fixture)."""

from __future__ import annotations

import sqlite3

import psycopg
import pytest
from click.testing import CliRunner

from sagacity_agents import SagaStatus
from sagacity_agents.backends import Phase
from sagacity_agents.evidence import ChainFault
from sagacity_agents.cli import cli
from sagacity_agents.core.authenticity import ADOPTION_SAGA, adopt_keyring, read_adoption, signing_view
from sagacity_agents.core.signing import Keyring
from sagacity_agents.errors import EvidenceError, SagaStateError
from sagacity_agents.stores import open_journal

from ..sdk.helpers import agent, scripted
from .test_entry_authenticity import (  # noqa: F401 - fixtures: db, keys, far_side, app_role_uri
    CANCELLED, app_role_uri, book_hotel, db, entries, far_side, forge, forged_executed, host,
    in_doubt_saga, keys, refused,
)


async def adopt(db: str, keys) -> list:
    journal = open_journal(db)
    try:
        return await adopt_keyring(journal, Keyring.load(keys, signing_key_id="writer-1"))
    finally:
        await journal.close()


def raw_insert(db: str, **row) -> None:
    """One raw row, as an INSERT-only writer may add it (no chain, no tag)."""
    names = ", ".join(row)
    if "postgresql" in db:
        with psycopg.connect(db, autocommit=True) as conn:
            conn.execute(f"INSERT INTO sagacity_journal ({names}) VALUES ({', '.join(['%s'] * len(row))})",
                         list(row.values()))
        return
    conn = sqlite3.connect(db)
    try:
        conn.execute(f"INSERT INTO sagacity_journal ({names}) VALUES ({', '.join('?' * len(row))})",
                     list(row.values()))
        conn.commit()
    finally:
        conn.close()


def garbage(db: str, seq: int = 99) -> None:
    raw_insert(db, saga_id=ADOPTION_SAGA, seq=seq, phase="KEYRING_ADOPTED", tool=None, call_id=None,
               write_key=f"junk:{seq}", recorded_at="2020-01-01T00:00:00.000000Z", prev_hash="0" * 64,
               hash="ab" * 32, canonical=b"junk")


@pytest.mark.case("A-01")
async def test_a_second_adoption_is_refused_and_launders_nothing(db, keys):
    """After an adoption, a forged untagged EXECUTED in an adopted saga and a fresh untagged
    saga stay BROKEN: a second adoption (the operator re-running it) is refused, nothing written,
    and recovery still refuses the forgery (Bob's booking is not cancelled)."""
    await in_doubt_saga(db, None, "old-1")
    await adopt(db, keys)
    saga = {"sid": "old-1", "run": 2, "intent": 3}
    seq = await forged_executed(db, saga)
    await in_doubt_saga(db, None, "fresh-1")
    before = len(await entries(db, ADOPTION_SAGA))
    with pytest.raises(SagaStateError, match="already adopted"):
        await adopt(db, keys)
    assert len(await entries(db, ADOPTION_SAGA)) == before
    await refused(db, keys, "old-1", seq, ChainFault.UNAUTHENTICATED)
    await refused(db, keys, "fresh-1", 1, ChainFault.UNAUTHENTICATED)


@pytest.mark.case("A-01")
async def test_a_later_adoption_already_in_the_journal_is_ignored(db, keys):
    """A second complete adoption written anyway (by the version that allowed it) does not
    extend the first: the forged EXECUTED it lists stays BROKEN, and the reading says so."""
    await in_doubt_saga(db, None, "old-1")
    await adopt(db, keys)
    seq = await forged_executed(db, {"sid": "old-1", "run": 2, "intent": 3})
    head = (await entries(db, "old-1"))[-1]
    journal = signing_view(open_journal(db), Keyring.load(keys, signing_key_id="writer-1"))
    try:  # what the old adopt_keyring wrote on a second run
        await journal.append(ADOPTION_SAGA, Phase.KEYRING_ADOPTED, write_key="adopt:second:1",
                             payload={"adoption": "second", "part": 1, "parts": 1,
                                      "heads": {"old-1": {"seq": head.seq, "hash": head.hash}}})
    finally:
        await journal.close()
    adoption = read_adoption(await entries(db, ADOPTION_SAGA), Keyring.load(keys, signing_key_id="writer-1"))
    assert adoption.adopted and adoption.adoption_id != "second"
    assert any("adoption second ignored: only the first" in n for n in adoption.notes)
    await refused(db, keys, "old-1", seq, ChainFault.UNAUTHENTICATED)


@pytest.mark.case("A-01")
async def test_an_untagged_entry_after_a_tagged_one_is_never_adopted(db, keys):
    """Writers already tag (README step 3) and the forger appends an untagged EXECUTED to a
    tagged saga before the adoption: the adoption refuses, naming it, and writes nothing; the
    forgery stays refused."""
    saga = await in_doubt_saga(db, keys, "new-1")
    seq = await forged_executed(db, saga)
    with pytest.raises(EvidenceError, match=f"seq {seq} carries no tag but follows a tagged entry"):
        await adopt(db, keys)
    assert await entries(db, ADOPTION_SAGA) == []
    await refused(db, keys, "new-1", seq, ChainFault.UNAUTHENTICATED)


@pytest.mark.case("A-01")
def test_the_cli_says_what_it_adopted_and_refuses_a_second_adoption(tmp_path, keys, monkeypatch):
    """``audit adopt-keyring``: the first run names the adoption and the sagas listed; the
    second exits 1, "keyring NOT adopted ... already adopted", nothing written."""
    import asyncio  # noqa: PLC0415

    db = str(tmp_path / "cli.db")
    asyncio.run(in_doubt_saga(db, None, "old-1"))
    monkeypatch.setenv("SAGACITY_SIGNING_KEY_ID", "writer-1")
    first = CliRunner().invoke(cli, ["audit", "adopt-keyring", "--keyring", str(keys), "--db", db])
    assert first.exit_code == 0 and "keyring adopted (adoption " in first.output
    assert "1 saga(s) listed" in first.output
    second = CliRunner().invoke(cli, ["audit", "adopt-keyring", "--keyring", str(keys), "--db", db])
    assert second.exit_code == 1 and "keyring NOT adopted" in second.output
    assert "already adopted" in second.output
    assert len(asyncio.run(entries(db, ADOPTION_SAGA))) == 1


@pytest.mark.case("A-02")
async def test_garbage_in_the_reserved_saga_does_not_void_the_adoption(db, keys):
    """A raw garbage row in ``sagacity.keyring`` breaks that saga's chain (reported BROKEN
    there) but the signed adoption still counts: the old saga is "before the keyring" and is
    recovered; the garbage is named in the adoption's notes; re-adopting is refused."""
    await in_doubt_saga(db, None, "old-1")
    await adopt(db, keys)
    garbage(db)
    s = host(db, keys)
    try:
        results = {r.saga_id: r for r in await s.verify()}
        assert results["old-1"].ok and results["old-1"].unauthenticated == 3
        assert not results[ADOPTION_SAGA].ok
        adoption = await s.evidence.adoption(s.journal)
        assert adoption.adopted and any(f"{ADOPTION_SAGA} seq 99 ignored" in n for n in adoption.notes)
        assert (await s.recover("old-1", agent(scripted(), book_hotel))).status is SagaStatus.IN_DOUBT
    finally:
        await s.aclose()
    with pytest.raises(SagaStateError, match="already adopted"):
        await adopt(db, keys)
    assert CANCELLED == []


@pytest.mark.case("A-02")
def test_journal_verify_says_which_adoption_counts_and_what_was_ignored(tmp_path, keys, monkeypatch):
    """``journal verify --keyring`` names the adoption that counts, every ignored row (the
    garbage, an untagged fake adoption) and the count before the keyring."""
    import asyncio  # noqa: PLC0415

    monkeypatch.setenv("SAGACITY_SIGNING_KEY_ID", "writer-1")
    db = str(tmp_path / "v.db")
    asyncio.run(in_doubt_saga(db, None, "old-1"))
    asyncio.run(adopt(db, keys))
    asyncio.run(forge(db, ADOPTION_SAGA, Phase.KEYRING_ADOPTED, "adopt:fake:1",
                      payload={"adoption": "fake", "part": 1, "parts": 1, "heads": {}}))
    garbage(db)
    out = CliRunner().invoke(cli, ["journal", "verify", "--keyring", str(keys), "--db", db]).output
    assert "keyring adoption " in out and "1 saga(s) listed as written before the keyring" in out
    assert f"{ADOPTION_SAGA} seq 2 ignored: KEYRING_ADOPTED without a tag" in out
    assert f"{ADOPTION_SAGA} seq 99 ignored" in out
    assert "saga old-1  3 entries" in out and "3 unauthenticated, before the keyring" in out


@pytest.mark.case("A-02")
def test_without_any_adoption_that_counts_verify_says_so(tmp_path, keys, monkeypatch):
    """Only a forged (untagged) adoption: "none counts", and the old saga is BROKEN."""
    import asyncio  # noqa: PLC0415

    monkeypatch.setenv("SAGACITY_SIGNING_KEY_ID", "writer-1")
    db = str(tmp_path / "n.db")
    asyncio.run(in_doubt_saga(db, None, "old-1"))
    asyncio.run(forge(db, ADOPTION_SAGA, Phase.KEYRING_ADOPTED, "adopt:fake:1",
                      payload={"adoption": "fake", "part": 1, "parts": 1, "heads": {}}))
    result = CliRunner().invoke(cli, ["journal", "verify", "--keyring", str(keys), "--db", db])
    assert result.exit_code == 1 and "keyring adoption: none counts" in result.output
