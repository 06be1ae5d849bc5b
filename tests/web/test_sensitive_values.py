"""The inbox's saga page (its timeline and entries) and its JSON API show a saga's sensitive
values as their masks (``[erased]`` once the saga's data key is erased), never the values: a
card number, a token in a result, a password quoted in an exception, with no declaration."""

from __future__ import annotations

import pytest

from sagacity_agents.stores import open_journal
from tests.sensitive.test_display import CARD, assert_clean, write_saga
from tests.web.support import client

pytestmark = pytest.mark.case("X-03")


async def test_saga_page_and_api_show_masks(db, serve):
    journal = open_journal(db)
    try:
        await write_saga(journal)
        await write_saga(journal, saga_id="gone")
        await journal.erase_data_keys("gone", by="dpo", reason="request 9")
    finally:
        await journal.close()
    server = serve(db)
    async with client(server) as alice:
        for path in ("/sagas/s", "/api/sagas/s/entries", "/api/sagas/s", "/api/sagas", "/sagas/gone",
                     "/api/sagas/gone/entries"):
            response = await alice.get(path)
            assert response.status_code == 200, (path, response.text)
            assert_clean(response.text)
        entries = (await alice.get("/api/sagas/s/entries")).json()
        assert entries[1]["payload"]["args"]["card_number"] == "**** **** **** " + CARD[-4:]
        gone = (await alice.get("/api/sagas/gone/entries")).json()
        assert gone[1]["payload"]["args"]["card_number"] == "[erased]"
