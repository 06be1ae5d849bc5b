"""R-04 h (issue 18): ``sagacity_agents.testing``'s failing journal intercepts batched appends
(``append_many``, PostgreSQL's RUN_ENDED + SAGA_CLOSED and SAGA_OPENED + RUN_STARTED) under the
same fault rules as single appends; before, the wrapper handed them to the wrapped journal
unseen, and fault injection silently did nothing there. On every backend of
``tests/backends.py`` (memory and SQLite have no batches: ``append_each`` appends one by one)."""

from __future__ import annotations

import pytest
from agents import function_tool

from sagacity_agents import Sagacity, SagaStatus, compensable
from sagacity_agents.backends import Phase
from sagacity_agents.core.journal import append_each
from sagacity_agents.errors import JournalWriteError
from sagacity_agents.testing import FaultyJournal, make_failing
from tests.backends import BACKENDS

from ..sdk.helpers import agent, scripted

pytestmark = pytest.mark.case("R-04h")

SAGA = "saga-batch"
SPECS = [
    {"phase": Phase.INTENT, "write_key": "k1", "tool": "t", "call_id": "c1", "payload": {"n": 1}},
    {"phase": Phase.EXECUTED, "write_key": "k2", "tool": "t", "call_id": "c1", "payload": {"n": 2}},
    {"phase": Phase.INTENT, "write_key": "k3", "tool": "t", "call_id": "c2", "payload": {"n": 3}},
]


@pytest.fixture(params=BACKENDS, ids=str)
async def inner(request):
    backend = request.param
    journal = backend.journal(backend.location(request))
    yield journal
    await journal.close()


def count_batches(journal) -> list[int]:
    """Spy on ``journal.append_many`` (when it has one): the sizes of the batches it was given."""
    sizes: list[int] = []
    many = getattr(journal, "append_many", None)
    if many is not None:
        async def spy(*batch):  # (requests) or the loose (saga_id, appends)
            sizes.append(len(batch[-1]))
            return await many(*batch)

        journal.append_many = spy
    return sizes


async def test_a_fault_in_a_batch_stops_it_there(inner):
    """The second entry of a batch of three is chosen to fail: JournalWriteError, the first is
    stored (through the wrapped journal's own batch where it has one), the third is never
    attempted."""
    batches = count_batches(inner)
    faulty = make_failing(inner, phase=Phase.EXECUTED)
    with pytest.raises(JournalWriteError, match="append #2 EXECUTED"):
        await append_each(faulty, SAGA, SPECS)
    assert [e.write_key for e in await inner.entries(SAGA)] == ["k1"]
    assert [a.write_key for a in faulty.attempts] == ["k1", "k2"]
    assert [a.write_key for a in faulty.failures] == ["k2"]
    assert batches in ([], [1])  # PostgreSQL: the entries before the fault went as a batch


async def test_after_write_stores_the_chosen_entry_then_raises(inner):
    """``after_write``: the chosen entry is stored with the ones before it, then the error (a
    lost acknowledgement); a retry of the batch with the same write keys stores the rest once."""
    faulty = make_failing(inner, phase=Phase.EXECUTED, after_write=True, times=1)
    with pytest.raises(JournalWriteError):
        await append_each(faulty, SAGA, SPECS)
    assert [e.write_key for e in await inner.entries(SAGA)] == ["k1", "k2"]
    stored = await append_each(faulty, SAGA, SPECS)
    assert [e.seq for e in stored] == [1, 2, 3]
    assert [e.write_key for e in await inner.entries(SAGA)] == ["k1", "k2", "k3"]


async def test_a_batch_without_fault_is_the_wrapped_journals_batch(inner):
    """No fault chosen: every entry is an attempt, and the whole batch reaches the wrapped
    journal's ``append_many`` in one piece (PostgreSQL), so the batched path is what is tested."""
    batches = count_batches(inner)
    faulty = FaultyJournal(inner, when=lambda attempt: False)
    stored = await append_each(faulty, SAGA, SPECS)
    assert [e.write_key for e in stored] == ["k1", "k2", "k3"]
    assert len(faulty.attempts) == 3 and faulty.failures == []
    assert batches in ([], [3])


async def test_fault_injection_reaches_a_sagas_closing_batch(inner):
    """A saga's RUN_ENDED + SAGA_CLOSED go as one batch where the journal batches (PostgreSQL):
    a fault chosen for SAGA_CLOSED is injected there too (before, the batch went by unseen and
    the saga closed as if nothing had been asked)."""

    @function_tool
    @compensable(undo=lambda ctx: None)
    def book(n: int) -> str:
        return "booked"

    faulty = make_failing(inner, phase=Phase.SAGA_CLOSED, times=1)
    result = await Sagacity(faulty).run(agent(scripted([("book", {"n": 1}, "1")], "ok"), book), "go")
    assert [a.phase for a in faulty.failures] == [Phase.SAGA_CLOSED]
    assert result.status is SagaStatus.COMPLETED  # the saga wrote it again, alone
    closed = [e for e in await inner.entries(result.saga_id) if e.phase is Phase.SAGA_CLOSED]
    assert len(closed) == 1
