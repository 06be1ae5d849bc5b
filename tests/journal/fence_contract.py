"""The fence (issue 18, R-01), part of the journal contract every backend passes.

An append with ``fence=n`` is written only while RUN_STARTED ``n`` is the saga's newest, checked
under the backend's append lock with the insert; a late outcome under a lost lease is written and
marked. ``TestJournalContract`` in ``tests/test_backend_contracts.py`` runs these on each backend
of ``tests/backends.py``.
"""

from __future__ import annotations

import asyncio

import pytest

from sagacity_agents.core.chain import verify_entries
from sagacity_agents.core.entries import Phase
from sagacity_agents.core.journal import append_each
from sagacity_agents.errors import JournalConflictError, LeaseLostError, SagaStateError

SAGA = "fenced"


async def run_started(journal, holder: str) -> int:
    """Take the saga's lease as ``holder`` (what ``core.lease.acquire_lease`` writes); its seq."""
    entries = await journal.entries(SAGA)
    entry = await journal.append(
        SAGA, Phase.RUN_STARTED, write_key=f"run:{holder}",
        payload={"holder": holder, "lease_seconds": 30.0, "agent": "a", "took_over": None},
        expected_seq=entries[-1].seq if entries else 0,
    )
    return entry.seq


class FenceContract:
    """R-01 on one backend: the ``journal`` fixture is a fresh journal."""

    @pytest.mark.case("R-01")
    async def test_fenced_append_under_the_current_lease_carries_its_token(self, journal):
        first = await run_started(journal, "a")
        entry = await journal.append(SAGA, Phase.INTENT, write_key="i1", tool="t",
                                     payload={"args": {}}, fence=first)
        assert entry.payload == {"args": {}, "fence": first}
        stored = (await journal.entries(SAGA))[-1]
        assert stored.payload["fence"] == first and stored.hash == entry.hash

    @pytest.mark.case("R-01")
    async def test_append_under_a_lease_taken_over_is_refused_and_writes_nothing(self, journal):
        first = await run_started(journal, "a")
        await journal.append(SAGA, Phase.INTENT, write_key="i1", payload={}, fence=first)
        second = await run_started(journal, "b")
        for phase in (Phase.INTENT, Phase.EXECUTED, Phase.SAGA_FAILED, Phase.COMPENSATING,
                      Phase.RUN_ENDED, Phase.SAGA_CLOSED):
            payload = {"claimant": "x"} if phase is Phase.COMPENSATING else {}
            with pytest.raises(LeaseLostError) as lost:
                await journal.append(SAGA, phase, write_key=f"stale-{phase.value}",
                                     payload=payload, fence=first)
            assert (lost.value.fence, lost.value.current) == (first, second)
            assert isinstance(lost.value, SagaStateError) and isinstance(lost.value, JournalConflictError)
        assert [e.seq for e in await journal.entries(SAGA)] == [1, 2, 3]
        # the new holder writes on
        await journal.append(SAGA, Phase.INTENT, write_key="i2", payload={}, fence=second)

    @pytest.mark.case("R-01")
    async def test_a_fence_that_names_no_run_started_is_refused(self, journal):
        await run_started(journal, "a")
        await journal.append(SAGA, Phase.INTENT, write_key="i1", payload={})
        with pytest.raises(LeaseLostError):
            await journal.append(SAGA, Phase.INTENT, write_key="i2", payload={}, fence=2)
        with pytest.raises(LeaseLostError):
            await journal.append("no-run-yet", Phase.INTENT, write_key="i", payload={}, fence=1)

    @pytest.mark.case("R-01")
    async def test_a_retry_of_a_stored_fenced_write_returns_it_after_a_takeover(self, journal):
        first = await run_started(journal, "a")
        stored = await journal.append(SAGA, Phase.INTENT, write_key="i1", payload={}, fence=first)
        await run_started(journal, "b")
        again = await journal.append(SAGA, Phase.INTENT, write_key="i1", payload={}, fence=first)
        assert again == stored

    @pytest.mark.case("R-01")
    async def test_late_outcome_is_written_and_marked(self, journal):
        first = await run_started(journal, "a")
        intent = await journal.append(SAGA, Phase.INTENT, write_key="i1", tool="t", payload={},
                                      fence=first)
        await run_started(journal, "b")
        late = await journal.append(SAGA, Phase.EXECUTED, write_key="o1", tool="t",
                                    payload={"intent_seq": intent.seq}, fence=first, late=True)
        assert late.payload == {"intent_seq": intent.seq, "fence": first, "late": True}
        assert verify_entries(SAGA, await journal.entries(SAGA)).ok

    @pytest.mark.case("R-01")
    @pytest.mark.parametrize("kwargs", [
        {"phase": Phase.INTENT, "fence": 1, "late": True},  # only outcomes may be late
        {"phase": Phase.EXECUTED, "late": True},  # late needs the lost lease's fence
        {"phase": Phase.EXECUTED, "fence": 0},
        {"phase": Phase.EXECUTED, "fence": True},
        {"phase": Phase.EXECUTED, "fence": 1, "payload": [1]},  # the token needs a mapping
        {"phase": Phase.EXECUTED, "fence": 1, "payload": {"fence": 9}},  # the journal's keys
    ])
    async def test_malformed_fences_are_refused_before_anything_is_written(self, journal, kwargs):
        await run_started(journal, "a")
        with pytest.raises(ValueError):
            await journal.append(SAGA, write_key="bad", **{"payload": {}, **kwargs})
        assert len(await journal.entries(SAGA)) == 1

    @pytest.mark.case("R-01")
    async def test_a_batch_stops_at_its_first_fenced_append_under_a_lost_lease(self, journal):
        first = await run_started(journal, "a")
        await run_started(journal, "b")
        with pytest.raises(LeaseLostError):
            await append_each(journal, SAGA, [
                {"phase": Phase.RUN_ENDED, "write_key": "end", "payload": {}, "fence": first},
                {"phase": Phase.SAGA_CLOSED, "write_key": "close", "payload": {}, "fence": first},
            ])
        assert [e.phase for e in await journal.entries(SAGA)] == [Phase.RUN_STARTED] * 2

    @pytest.mark.case("R-01")
    async def test_takeover_racing_fenced_appends_never_interleave(self, journal):
        """A takeover and a stream of appends under the old lease, at once: every stored entry
        of the old holder precedes the takeover's RUN_STARTED, every refused one is missing."""
        first = await run_started(journal, "a")

        async def old_holder() -> None:
            for i in range(30):
                try:
                    await journal.append(SAGA, Phase.LEASE_RENEWED, write_key=f"r{i}",
                                         payload={"holder": "a"}, fence=first)
                except LeaseLostError:
                    return
                await asyncio.sleep(0)

        async def taker() -> None:
            await asyncio.sleep(0.005)
            for _ in range(50):
                try:
                    await run_started(journal, "b")
                    return
                except JournalConflictError:
                    await asyncio.sleep(0)

        await asyncio.gather(old_holder(), taker())
        entries = await journal.entries(SAGA)
        taken = next(e.seq for e in entries if e.phase is Phase.RUN_STARTED and e.seq != first)
        assert all(e.seq < taken for e in entries if e.payload.get("fence") == first)

    @pytest.mark.case("R-01")
    async def test_a_stale_holder_learns_of_the_takeover_even_after_the_close(self, journal):
        """The fence is checked before the close rule: a stalled run whose saga another run took
        over and closed is told it lost its lease (it then stops), not only that it is closed."""
        first = await run_started(journal, "a")
        second = await run_started(journal, "b")
        await journal.append(SAGA, Phase.SAGA_CLOSED, write_key="close", payload={}, fence=second)
        with pytest.raises(LeaseLostError):
            await journal.append(SAGA, Phase.RUN_ENDED, write_key="end-a", payload={}, fence=first)
        from sagacity_agents.errors import JournalClosedError

        with pytest.raises(JournalClosedError):  # a late outcome is refused by the close
            await journal.append(SAGA, Phase.EXECUTED, write_key="o", payload={"intent_seq": 1},
                                 fence=first, late=True)
