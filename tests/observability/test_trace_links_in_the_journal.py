"""Issue 23, point 2: the trace link inside the hashed payload, on every backend (same bytes,
same hashes, no column), a retry from another span being the same write, an edited link
breaking the chain, and entries without a link (written before it, or outside a trace)
verifying as before."""

from __future__ import annotations

import pytest

from sagacity_agents.backends import Phase
from sagacity_agents.core import observe
from sagacity_agents.core.chain import verify_entries
from sagacity_agents.core.entries import GENESIS_HASH, seal_entry
from sagacity_agents.errors import JournalWriteError
from sagacity_agents.testing import DEFAULT_START, FrozenClock
from tests.backends import BACKENDS

pytestmark = pytest.mark.case("O-23")

LINK_A = {"trace_id": "trace_" + "a" * 32, "span_id": "span_" + "1" * 24}
LINK_B = {"trace_id": "trace_" + "b" * 32, "span_id": "span_" + "2" * 24}


@pytest.fixture
def link():
    """A trace-id source the test sets: ``link["now"]`` is what entries get."""
    current: dict = {"now": None}
    source = lambda: current["now"]
    observe.add_link_source(source)
    yield current
    observe.remove_link_source(source)


@pytest.fixture(params=BACKENDS, ids=str)
def journal(request):
    backend = request.param
    journal = backend.journal(backend.location(request), clock=FrozenClock())
    return journal  # closed by each test, on its own event loop


async def _close(journal) -> None:
    await journal.close()


async def test_link_inside_the_payload_same_bytes_on_every_backend(journal, link):
    link["now"] = LINK_A
    try:
        first = await journal.append("s1", Phase.SAGA_OPENED, write_key="open", payload={"metadata": {}})
        link["now"] = None
        second = await journal.append("s1", Phase.RUN_STARTED, write_key="run", payload={"holder": "h"})
        stored = await journal.entries("s1")
    finally:
        await _close(journal)
    assert first.payload["trace"] == LINK_A and "trace" not in second.payload
    assert [e.canonical for e in stored] == [first.canonical, second.canonical]
    # the bytes every backend stores: the chain's rule applied to the payload with its link
    expected = seal_entry(saga_id="s1", seq=1, phase=Phase.SAGA_OPENED, tool=None, call_id=None,
                          write_key="open", payload={"metadata": {}, "trace": LINK_A},
                          recorded_at=DEFAULT_START, prev_hash=GENESIS_HASH)
    assert (first.canonical, first.hash) == (expected.canonical, expected.hash)
    assert verify_entries("s1", stored).ok


async def test_retry_from_another_span_is_the_same_write(journal, link):
    try:
        link["now"] = LINK_A
        stored = await journal.append("s1", Phase.SAGA_OPENED, write_key="open", payload={"metadata": {}})
        link["now"] = LINK_B  # settle() retrying after the call's span ended, say
        again = await journal.append("s1", Phase.SAGA_OPENED, write_key="open", payload={"metadata": {}})
        with pytest.raises(JournalWriteError):  # still one logical write per key
            await journal.append("s1", Phase.SAGA_OPENED, write_key="open", payload={"metadata": {"x": 1}})
        entries = await journal.entries("s1")
    finally:
        await _close(journal)
    assert again == stored and again.payload["trace"] == LINK_A and len(entries) == 1


async def test_an_edited_trace_link_breaks_the_chain(tmp_path, link):
    from sagacity_agents.backends import SqliteJournal
    from tests.backends import BACKENDS as every

    (sqlite,) = [b for b in every if b.name == "sqlite"]
    location = str(tmp_path / "j.db")
    journal = SqliteJournal(location)
    link["now"] = None
    await journal.append("s1", Phase.SAGA_OPENED, write_key="old", payload={"metadata": {}})
    link["now"] = LINK_A
    entry = await journal.append("s1", Phase.RUN_STARTED, write_key="run", payload={"holder": "h"})
    assert verify_entries("s1", await journal.entries("s1")).ok  # an entry without a link verifies too
    # an operator with database access points the entry at another trace
    sqlite.tamper(location, journal).set_canonical(
        "s1", entry.seq, entry.canonical.replace(b"a" * 32, b"c" * 32))
    result = verify_entries("s1", await journal.entries("s1"))
    await journal.close()
    assert not result.ok and result.bad_seq == entry.seq
