"""The access log (``core.access_log``): DATA_REVEALED and DATA_ERASED live only in the reserved
saga ``sagacity.access``, on every backend; it verifies like any saga; under key roles only a
checkpoint signer's key may tag them; no run writes them (the journal refuses them elsewhere,
``verify`` reports a forged one); a reveal whose entry cannot be written raises (the caller
shows nothing)."""

from __future__ import annotations

import pytest

from sagacity_agents.core.access_log import ACCESS_SAGA, erasures, record_access, reveals
from sagacity_agents.core.authenticity import role_fault, signing_view
from sagacity_agents.core.chain import ChainFault
from sagacity_agents.core.entries import JournalEntry, Phase, seal_entry
from sagacity_agents.core.evidence import Evidence, verify_sagas
from sagacity_agents.core.identity import check_saga_id
from sagacity_agents.core.journal import AppendRequest
from sagacity_agents.core.key_roles import KeyRoles, Role, tag_roles
from sagacity_agents.core.keyring_events import grant_roles
from sagacity_agents.core.signing import Keyring, generate_key
from sagacity_agents.core.structure import structure_problem
from sagacity_agents.backends import InMemoryJournal
from sagacity_agents.errors import JournalWriteError
from sagacity_agents.testing import make_failing
from tests.test_backend_contracts import backend, location  # noqa: F401 - the fixtures: each backend

pytestmark = pytest.mark.case("X-04")

ERASED = {"saga_id": "s1", "by": "dpo", "reason": "request 7", "forced": False, "generations": [1]}
REVEALED = {"saga_id": "s1", "by": "alice", "reason": "dispute 12", "paths": ["/args/card_number"],
            "tool": "charge"}


@pytest.fixture
async def journal(backend, location):
    journal = backend.journal(location)
    yield journal
    await journal.close()


async def test_reveals_and_erasures_are_entries_of_the_access_saga_and_verify(journal):
    first = await record_access(journal, Phase.DATA_REVEALED, REVEALED)
    erased = await record_access(journal, Phase.DATA_ERASED, ERASED)
    again = await record_access(journal, "DATA_ERASED", {**ERASED, "reason": "again"})
    other = await record_access(journal, Phase.DATA_REVEALED, {**REVEALED, "saga_id": "s2"})
    assert [e.saga_id for e in (first, erased, again, other)] == [ACCESS_SAGA] * 4
    assert (first.phase, erased.phase, again.phase) == (Phase.DATA_REVEALED, Phase.DATA_ERASED, Phase.DATA_ERASED)
    assert first.payload == REVEALED and erased.payload == ERASED
    assert len({e.write_key for e in (first, erased, again, other)}) == 4
    assert await erasures(journal) == {"s1": again}
    assert await reveals(journal) == [first, other]
    assert await reveals(journal, "s2") == [other]
    results = await verify_sagas(journal, evidence=Evidence())
    assert [(r.saga_id, r.ok, r.entries) for r in results] == [(ACCESS_SAGA, True, 4)]


async def test_no_run_writes_an_access_phase_elsewhere_and_verify_reports_a_forged_one(journal):
    """The journal's append refuses DATA_REVEALED / DATA_ERASED outside the access saga; a
    writer that builds the request by hand (what an INSERT-only attacker can store) gets a saga
    that fails ``verify`` (structure), and so does the access saga holding another phase."""
    with pytest.raises(ValueError, match="only in the access log"):
        await journal.append("s1", Phase.DATA_ERASED, write_key="e", payload=ERASED)
    with pytest.raises(ValueError, match="only in the access log"):
        AppendRequest.build("s1", Phase.DATA_REVEALED, write_key="r", payload=REVEALED)
    with pytest.raises(ValueError):
        check_saga_id(ACCESS_SAGA)
    await journal.append("s1", Phase.SAGA_OPENED, write_key="o", payload={"metadata": {}})
    await journal.append(AppendRequest("s1", Phase.DATA_ERASED, "forged", payload=ERASED))
    await journal.append(AppendRequest(ACCESS_SAGA, Phase.INTENT, "forged", tool="t", call_id="c", payload={}))
    results = {r.saga_id: r for r in await verify_sagas(journal, evidence=Evidence())}
    assert (results["s1"].ok, results["s1"].bad_seq, results["s1"].fault) == (False, 2, ChainFault.STRUCTURE)
    assert "outside the access log" in results["s1"].detail
    assert (results[ACCESS_SAGA].ok, results[ACCESS_SAGA].fault) == (False, ChainFault.STRUCTURE)
    assert "holds DATA_REVEALED and DATA_ERASED only" in results[ACCESS_SAGA].detail


def _entry(saga_id: str, seq: int, phase: Phase, payload) -> JournalEntry:
    return seal_entry(saga_id=saga_id, seq=seq, phase=phase, tool=None, call_id=None, write_key=f"k{seq}",
                      payload=payload, recorded_at="2026-01-01T00:00:00.000000Z", prev_hash="0" * 64)


@pytest.mark.parametrize("payload, words", [
    ({**ERASED, "fence": 1}, "fenced entry in the access log"),
    ({**ERASED, "late": True}, "fenced entry in the access log"),
    ({"by": "x"}, "naming no saga"),
    ("garbage", "naming no saga"),
])
def test_the_access_saga_holds_unfenced_entries_naming_a_saga(payload, words):
    good = _entry(ACCESS_SAGA, 1, Phase.DATA_ERASED, ERASED)
    assert structure_problem([good]) is None and structure_problem([good], ACCESS_SAGA) is None
    seq, why = structure_problem([good, _entry(ACCESS_SAGA, 2, Phase.DATA_REVEALED, payload)])
    assert seq == 2 and words in why


def test_an_access_phase_is_judged_by_the_saga_it_is_in():
    erased = _entry("s1", 1, Phase.DATA_ERASED, ERASED)
    assert structure_problem([erased])[0] == 1
    assert structure_problem([erased], ACCESS_SAGA) is None  # the rows' fields: the id given
    opened = _entry(ACCESS_SAGA, 1, Phase.SAGA_OPENED, {})
    assert "in the access log" in structure_problem([opened])[1]


def test_only_a_checkpoint_signer_may_tag_the_access_log():
    roles = KeyRoles({"w": frozenset({Role.RUN_WRITER}), "c": frozenset({Role.CHECKPOINT_SIGNER}),
                      "d": frozenset({Role.DECISION_MAKER})}, None, frozenset({"root"}))
    for phase in (Phase.DATA_REVEALED, Phase.DATA_ERASED):
        entry = _entry(ACCESS_SAGA, 1, phase, ERASED)
        assert tag_roles(entry) == {Role.CHECKPOINT_SIGNER}
        tagged = {k: JournalEntry(**{**{f: getattr(entry, f) for f in entry.__slots__}, "tag_key": k, "tag": "t"})
                  for k in ("w", "c", "d", "root")}
        assert role_fault(tagged["c"], roles) is None
        for key in ("w", "d", "root"):
            assert "needed: checkpoint_signer" in role_fault(tagged[key], roles)
    default = KeyRoles(None, None, frozenset({"root"}))  # no KEY_ROLES: every key signs checkpoints
    assert role_fault(JournalEntry(**{**{f: getattr(entry, f) for f in entry.__slots__}, "tag_key": "w",
                                      "tag": "t"}), default) is None


@pytest.fixture
def keys(tmp_path):
    root = tmp_path / "keys"
    for key_id in ("writer-1", "auditor-1", "root"):
        generate_key(root, key_id)
    (root / "ADMINS").write_text("root\n", "utf-8")
    return root


async def test_under_key_roles_the_access_log_verifies_only_when_a_checkpoint_signer_tagged_it(journal, keys):
    def ring(key_id: str) -> Keyring:
        return Keyring.load(keys, signing_key_id=key_id)

    evidence = Evidence(keyring=ring("writer-1"))
    await record_access(signing_view(journal, ring("writer-1")), Phase.DATA_REVEALED, REVEALED)
    result = await evidence.verify(journal, ACCESS_SAGA)
    assert result.ok, result.detail  # the default roles: every key is a checkpoint signer
    for key_id, roles in (("writer-1", ["run_writer"]), ("auditor-1", ["checkpoint_signer"])):
        await grant_roles(journal, ring("root"), key_id, roles, reason="set up")
    entry = await record_access(signing_view(journal, ring("auditor-1")), Phase.DATA_ERASED, ERASED)
    assert entry.tag_key == "auditor-1"
    result = await Evidence(keyring=ring("writer-1")).verify(journal, ACCESS_SAGA)
    assert not result.ok and result.bad_seq == 1 and "needed: checkpoint_signer" in result.detail
    assert "writer-1" in result.detail


async def test_a_reveal_whose_entry_cannot_be_written_raises_and_a_bad_one_is_refused():
    failing = make_failing(InMemoryJournal(), saga_id=ACCESS_SAGA)
    with pytest.raises(JournalWriteError):
        await record_access(failing, Phase.DATA_REVEALED, REVEALED)
    journal = InMemoryJournal()
    with pytest.raises(ValueError, match="DATA_REVEALED and DATA_ERASED"):
        await record_access(journal, Phase.INTENT, REVEALED)
    for missing in ("saga_id", "by", "reason"):
        with pytest.raises(ValueError, match=missing):
            await record_access(journal, Phase.DATA_REVEALED, {**REVEALED, missing: " "})
    assert await journal.entries(ACCESS_SAGA) == []
