"""When a saga's data key may be erased (``core.erasure.erasure_refusal``, the guard): refused
while the saga may still need its values (open, awaiting approval, in doubt, reopened, closed
dirty, a call before its deadline), each rule alone; ``force`` with a reason overrides, journaled
``forced: true``. A refused erasure writes nothing and erases nothing. On every backend."""

from __future__ import annotations


import pytest

from sagacity_agents.core.authenticity import signing_view
from sagacity_agents.core.entries import ACCESS_SAGA, Phase
from sagacity_agents.core.erasure import erase, erasure_refusal
from sagacity_agents.core.evidence import Evidence
from sagacity_agents.core.fence import JournalView
from sagacity_agents.core.journal import utc_now
from sagacity_agents.core.keyring_events import grant_roles
from sagacity_agents.core.signing import Keyring, generate_key
from sagacity_agents.errors import ConfigurationError, JournalWriteError, SagaStateError

from .sagas import FAR, keys, write_saga

pytestmark = pytest.mark.case("X-04")




async def _live(journal, saga_id):
    return [row.generation for row in await journal.data_keys(saga_id) if row.wrapped is not None]


@pytest.mark.parametrize("shape, code", [
    ("open", "OPEN"), ("awaiting", "AWAITING_APPROVAL"), ("in_doubt", "IN_DOUBT"),
    ("dirty", "DIRTY"), ("reopened", "REOPENED"),
])
async def test_each_state_that_may_still_need_the_data_refuses_alone(journal, shape, code):
    data_keys = keys()
    await write_saga(journal, data_keys, "s", shape)
    with pytest.raises(SagaStateError) as refused:
        await erase(journal, data_keys, "s", by="dpo", reason="gdpr art. 17", now=FAR)
    assert refused.value.code == code
    assert await _live(journal, "s") == [1]  # nothing erased
    assert await journal.entries(ACCESS_SAGA) == []  # nothing written

    done = await erase(journal, data_keys, "s", by="dpo", reason="customer asked; ops checked",
                       force=True, now=FAR)
    assert done.forced and done.generations == (1,)
    (logged,) = await journal.entries(ACCESS_SAGA)
    assert logged.phase is Phase.DATA_ERASED
    assert logged.payload == {"saga_id": "s", "by": "dpo", "reason": "customer asked; ops checked",
                              "forced": True, "generations": [1]}
    assert await _live(journal, "s") == []


async def test_a_call_before_its_deadline_refuses_until_it_has_passed(journal):
    data_keys = keys()
    seqs = await write_saga(journal, data_keys, "s", "closed")
    entries = await journal.entries("s")
    refusal = erasure_refusal("s", entries, utc_now())
    assert refusal is not None and refusal.code == "BEFORE_DEADLINE"
    assert f"call at seq {seqs['intent']}" in str(refusal) and "deadline 60 s" in str(refusal)
    with pytest.raises(SagaStateError, match="before its deadline"):
        await erase(journal, data_keys, "s", by="dpo", reason="r")
    assert erasure_refusal("s", entries, FAR) is None
    done = await erase(journal, data_keys, "s", by="dpo", reason="r", now=FAR)
    assert done.generations == (1,) and not done.forced
    (logged,) = await journal.entries(ACCESS_SAGA)
    assert logged.payload["forced"] is False


async def test_erasing_again_says_it_was_erased_and_writes_nothing(journal):
    data_keys = keys()
    await write_saga(journal, data_keys, "s", "closed")
    await erase(journal, data_keys, "s", by="dpo", reason="r", now=FAR)
    again = await erase(journal, data_keys, "s", by="dpo", reason="r", now=FAR)
    assert again.already and again.stored and again.generations == () and again.entry is None
    assert len(await journal.entries(ACCESS_SAGA)) == 1


async def test_an_unknown_saga_and_a_missing_reason_are_refused(journal):
    with pytest.raises(SagaStateError) as refused:
        await erase(journal, keys(), "nope", by="dpo", reason="r", now=FAR)
    assert refused.value.code == "UNKNOWN_SAGA"
    for by, reason in (("", "r"), ("dpo", " ")):
        with pytest.raises(ValueError, match="who erases"):
            await erase(journal, keys(), "nope", by=by, reason=reason, now=FAR)


class _ReadOnly(JournalView):
    """A journal this host may read but not write (a read-only file or role)."""

    async def append(self, saga_id, phase, **fields):
        raise JournalWriteError("attempt to write a readonly database")


async def test_no_access_log_entry_no_erasure(journal):
    """The DATA_ERASED entry is written first: on a read-only journal nothing is erased."""
    data_keys = keys()
    await write_saga(journal, data_keys, "s", "closed")
    with pytest.raises(JournalWriteError):
        await erase(_ReadOnly(journal), data_keys, "s", by="dpo", reason="r", now=FAR)
    assert await _live(journal, "s") == [1]


def test_the_guard_refuses_an_empty_saga_and_allows_a_clean_closed_one():
    assert erasure_refusal("s", [], FAR).code == "UNKNOWN_SAGA"


async def test_under_key_roles_only_a_checkpoint_signer_erases(journal, tmp_path):
    """The access log is tagged by a checkpoint signer only (``core.key_roles``): a host whose key
    is not one is refused before anything is written or erased."""
    root = tmp_path / "keys"
    for key_id in ("writer-1", "auditor-1", "root"):
        generate_key(root, key_id)
    (root / "ADMINS").write_text("root\n", "utf-8")

    def ring(key_id):
        return Keyring.load(root, signing_key_id=key_id)

    for key_id, roles in (("writer-1", ["run_writer"]), ("auditor-1", ["checkpoint_signer"])):
        await grant_roles(journal, ring("root"), key_id, roles, reason="set up")
    data_keys = keys()
    await write_saga(journal, data_keys, "s", "closed", keyring=ring("writer-1"))
    writer = Evidence(keyring=ring("writer-1"))
    with pytest.raises(ConfigurationError, match="not a checkpoint_signer"):
        await erase(signing_view(journal, ring("writer-1")), data_keys, "s", by="dpo", reason="r",
                    now=FAR, evidence=writer)
    assert await _live(journal, "s") == [1] and await journal.entries(ACCESS_SAGA) == []
    auditor = Evidence(keyring=ring("auditor-1"))
    done = await erase(signing_view(journal, ring("auditor-1")), data_keys, "s", by="dpo",
                       reason="r", now=FAR, evidence=auditor)
    assert done.entry.tag_key == "auditor-1"
    assert (await writer.verify(journal, ACCESS_SAGA)).ok
    assert (await writer.verify(journal, "s")).ok
