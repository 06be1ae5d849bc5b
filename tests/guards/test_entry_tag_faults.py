"""T-02, entry tags and signed RESOLVED (core.authenticity): each fault reached alone."""

from __future__ import annotations

import dataclasses

import pytest

from sagacity_agents.backends import InMemoryJournal, Phase
from sagacity_agents.core import authenticity
from sagacity_agents.core.authenticity import (
    ADOPTION_SAGA,
    Adoption,
    TagCache,
    authenticity_fault,
    signing_view,
    untagged_after_tagged,
)
from sagacity_agents.core.chain import ChainFault, ChainHead
from sagacity_agents.core.signing import Keyring, generate_key

from .support import SAGA

pytestmark = pytest.mark.case("T-02")


@pytest.fixture
def keyring(tmp_path):
    generate_key(tmp_path / "keys", "writer-1")
    return Keyring.load(tmp_path / "keys")


async def saga(keyring, untagged_first: int = 0, tagged: int = 2, saga_id: str = SAGA, resolved=None):
    """``untagged_first`` entries written before the keyring, then ``tagged`` tagged ones."""
    journal = InMemoryJournal()
    for n in range(untagged_first):
        await journal.append(saga_id, Phase.SAGA_OPENED if n == 0 else Phase.INTENT, write_key=f"u{n}")
    signed = signing_view(journal, keyring)
    for n in range(tagged):
        await signed.append(saga_id, Phase.INTENT, write_key=f"t{n}")
    if resolved is not None:
        await signed.append(saga_id, Phase.RESOLVED, write_key="r", payload=resolved)
    return await journal.entries(saga_id)


def adopted(head_seq: int, entries, saga_id: str = SAGA) -> Adoption:
    return Adoption({saga_id: (ChainHead(head_seq, entries[head_seq - 1].hash),)}, "adoption-1")


async def test_a_tag_verifies_once_and_is_cached(keyring):
    entries = await saga(keyring)
    cache = TagCache()
    assert cache.check(entries[0], keyring) is None
    assert cache.check(entries[0], Keyring({})) is None  # verified already: the hash binds it


async def test_a_tag_by_an_unknown_key_or_that_does_not_verify_is_named(keyring):
    entries = await saga(keyring)
    assert "unknown key 'writer-9'" in TagCache().check(dataclasses.replace(entries[0], tag_key="writer-9"), keyring)
    swapped = dataclasses.replace(entries[0], tag=entries[1].tag)
    assert "does not verify" in TagCache().check(swapped, keyring)
    assert "does not verify" in TagCache().check(dataclasses.replace(entries[0], tag="@@not base64"), keyring)
    # Characters outside base64 are refused, not skipped over to a valid signature.
    assert "does not verify" in TagCache().check(dataclasses.replace(entries[0], tag="@@" + entries[0].tag), keyring)
    with pytest.raises(AssertionError):  # only a tagged entry is checked (the caller sorts them)
        TagCache().check(dataclasses.replace(entries[0], tag=None), keyring)


async def test_the_tag_cache_is_bounded(keyring, monkeypatch):
    monkeypatch.setattr(authenticity, "_CACHE_LIMIT", 2)
    entries = await saga(keyring, tagged=3)
    cache = TagCache()
    sizes = []
    for entry in entries:
        assert cache.check(entry, keyring) is None
        sizes.append(len(cache._seen))
    assert sizes == [1, 2, 1]  # full at two: cleared, then the third added


async def test_an_untagged_entry_without_adoption_is_unauthenticated(keyring):
    entries = await saga(keyring, untagged_first=1)
    fault, before = authenticity_fault(SAGA, entries, keyring, None, TagCache())
    assert fault[:2] == (1, ChainFault.UNAUTHENTICATED) and before == 0
    assert fault[2] == "SAGA_OPENED carries no tag (no keyring adoption lists it)"
    for half in ({"tag_key": None}, {"tag": None}):  # half a tag is no tag
        forged = [entries[0], dataclasses.replace(entries[1], **half)]
        fault, _ = authenticity_fault(SAGA, forged, keyring, adopted(1, forged), TagCache())
        assert fault[:2] == (2, ChainFault.UNAUTHENTICATED), half


async def test_untagged_entries_up_to_the_adopted_head_count_as_before_the_keyring(keyring):
    entries = await saga(keyring, untagged_first=2)
    assert authenticity_fault(SAGA, entries, keyring, adopted(2, entries), TagCache()) == (None, 2)
    fault, before = authenticity_fault(SAGA, entries, keyring, adopted(1, entries), TagCache())
    assert fault[:2] == (2, ChainFault.UNAUTHENTICATED) and before == 1
    assert "after the keyring's adoption" in fault[2]
    not_counted = Adoption(adopted(1, entries).heads, None)
    fault, _ = authenticity_fault(SAGA, entries, keyring, not_counted, TagCache())
    assert fault[:2] == (2, ChainFault.UNAUTHENTICATED) and "no keyring adoption lists it" in fault[2]


async def test_the_adoption_saga_itself_has_nothing_before_the_keyring(keyring):
    entries = await saga(keyring, untagged_first=1, saga_id=ADOPTION_SAGA)
    fault, _ = authenticity_fault(ADOPTION_SAGA, entries, keyring, adopted(1, entries, ADOPTION_SAGA), TagCache())
    assert fault[:2] == (1, ChainFault.UNAUTHENTICATED)


async def test_an_adopted_head_the_chain_no_longer_holds_is_a_fault(keyring):
    entries = await saga(keyring, untagged_first=2)
    moved = Adoption({SAGA: (ChainHead(2, entries[0].hash),)}, "adoption-1")
    fault, before = authenticity_fault(SAGA, entries, keyring, moved, TagCache())
    assert fault[:2] == (2, ChainFault.HEAD_MISMATCH) and fault[2].startswith("keyring adoption: ")
    assert before == 0


async def test_a_bad_tag_is_a_bad_signature(keyring):
    entries = await saga(keyring)
    forged = [entries[0], dataclasses.replace(entries[1], tag=entries[0].tag)]
    fault, before = authenticity_fault(SAGA, forged, keyring, None, TagCache())
    assert fault[:2] == (2, ChainFault.BAD_SIGNATURE) and before == 0


async def test_an_unsigned_resolved_is_a_bad_signature_unless_before_the_keyring(keyring):
    entries = await saga(keyring, resolved={"target": "call", "target_seq": 1, "answer": "ran"})
    fault, _ = authenticity_fault(SAGA, entries, keyring, None, TagCache())
    assert fault[:2] == (3, ChainFault.BAD_SIGNATURE) and "carries no signature" in fault[2]
    journal = InMemoryJournal()
    await journal.append(SAGA, Phase.RESOLVED, write_key="r", payload={"target": "call", "answer": "ran"})
    await signing_view(journal, keyring).append(SAGA, Phase.INTENT, write_key="t")
    early = await journal.entries(SAGA)
    assert authenticity_fault(SAGA, early, keyring, adopted(1, early), TagCache()) == (None, 1)


async def test_an_untagged_entry_after_a_tagged_one_is_found(keyring):
    entries = await saga(keyring, untagged_first=1, tagged=1)
    assert untagged_after_tagged(entries) is None
    journal = InMemoryJournal()
    await signing_view(journal, keyring).append(SAGA, Phase.INTENT, write_key="t")
    await journal.append(SAGA, Phase.INTENT, write_key="u1")
    await journal.append(SAGA, Phase.INTENT, write_key="u2")
    later = await journal.entries(SAGA)
    assert untagged_after_tagged(later) is later[1]
    for half in ({"tag": "x"}, {"tag_key": "writer-1"}):  # half a tag is no tag
        forged = [later[0], dataclasses.replace(later[1], **half), later[2]]
        assert untagged_after_tagged(forged) is forged[1]
    assert untagged_after_tagged([dataclasses.replace(later[0], tag=None), *later[1:]]) is None
