"""A journal's optional capabilities are read once per object, as small protocols; a writer's
view takes its backend's and forwards nothing else; a backend takes one ``AppendRequest``."""

from __future__ import annotations

import pytest

from sagacity_agents.backends import InMemoryJournal, Phase, SqliteJournal
from sagacity_agents.core.fence import FencedJournal, JournalView
from sagacity_agents.core.journal import AppendRequest, Capabilities, capabilities_of
from sagacity_agents.testing import make_failing


async def test_each_backend_says_what_it_can(tmp_path):
    sqlite = SqliteJournal(tmp_path / "j.db")
    try:
        assert capabilities_of(InMemoryJournal()) == Capabilities(
            sync_append=True, entries_many=True, tail_read=True, identified=True, data_keys=True)
        assert capabilities_of(sqlite) == Capabilities(
            sync_append=True, batch_append=True, rows_read=True, entries_many=True,
            durable_outcomes=False, tail_read=True, identified=True, data_keys=True)
    finally:
        await sqlite.close()


def test_a_subclass_that_changes_append_has_no_blocking_append_of_its_own():
    class Counting(InMemoryJournal):
        async def append(self, request, **fields):  # type: ignore[override]
            return await super().append(request, **fields)

    assert not capabilities_of(Counting()).sync_append
    assert not capabilities_of(make_failing(InMemoryJournal())).sync_append


def test_a_view_has_its_backends_capabilities_and_forwards_nothing_else():
    backend = InMemoryJournal()
    fenced = FencedJournal(JournalView(backend), "s", lambda: None, lambda lost: None)
    assert fenced.backend is backend and fenced.capabilities == capabilities_of(backend)
    assert capabilities_of(fenced) is fenced.capabilities
    with pytest.raises(AttributeError):
        fenced._chains  # noqa: B018 - a backend's own attribute is not read through the view
    with pytest.raises(TypeError, match="no blocking append"):
        FencedJournal(make_failing(backend), "s", lambda: None, lambda lost: None).append_sync(
            "s", Phase.SAGA_OPENED, write_key="o")


async def test_a_backend_takes_one_request_built_once():
    journal = InMemoryJournal()
    request = AppendRequest.build("s", Phase.SAGA_OPENED, write_key="o", payload={"metadata": {}})
    entry = await journal.append(request)
    assert await journal.append("s", Phase.SAGA_OPENED, write_key="o", payload={"metadata": {}}) == entry
    with pytest.raises(TypeError):
        await journal.append(request, Phase.INTENT)


async def test_a_saga_fenced_journal_is_refused_as_another_writers_journal():
    """Another view over a saga's fenced view would write without the lease's token (a writer
    outside the run passing the run's fence): refused, with the way out named."""
    fenced = FencedJournal(InMemoryJournal(), "s", lambda: 1, lambda lost: None)
    with pytest.raises(TypeError, match="fenced journal"):
        JournalView(fenced)
    with pytest.raises(TypeError, match="fenced journal"):
        FencedJournal(fenced, "s", lambda: 1, lambda lost: None)
