"""A late outcome that lands after an erasure: the stalled writer still holds the saga's erased
key in memory, yet its outcome is committed and sealed under a fresh generation (2), read again
from the store before the late append (``FencedJournal.rekey``), on the event loop and from a
sync tool's worker thread. Generation 2 opens with the master key; generation 1 stays erased;
the saga is REOPENED and ``saga show`` names what was written after the erasure. On every
backend."""

from __future__ import annotations

import asyncio

import pytest
from click.testing import CliRunner

from sagacity_agents.cli import cli
from sagacity_agents.core.data_keys import DataKeys
from sagacity_agents.core.entries import Phase
from sagacity_agents.core.erasure import erase, erasure_state
from sagacity_agents.core.evidence import verify_sagas
from sagacity_agents.core.fence import FencedJournal
from sagacity_agents.core.ledger import reopened_by
from sagacity_agents.errors import DataErasedError

from .sagas import FAR, LATE_TOKEN, keys, write_saga

pytestmark = pytest.mark.case("X-04")




def _stalled_writer(journal, data_keys, seqs):
    """The first run's view, as it was when it stalled: its lease's fence, its secrets (the
    generation-1 key, still in its memory) and the data keys they came from."""
    view = FencedJournal(journal, "s", lambda: seqs["r1"], lambda lost: None)
    view.secrets["s"] = seqs["view"].secrets["s"]
    view.data_keys = data_keys
    return view


@pytest.mark.parametrize("path", ["async", "sync"])
async def test_a_late_outcome_after_erasure_is_sealed_under_a_fresh_generation(place, path):
    backend, location, journal = place
    writer_keys = keys()  # the stalled writer's process
    seqs = await write_saga(journal, writer_keys, "s", "stalled")
    assert seqs["view"].secrets["s"].generation == 1
    await erase(journal, keys(), "s", by="dpo", reason="gdpr art. 17", now=FAR)

    view = _stalled_writer(journal, writer_keys, seqs)
    outcome = {"write_key": "e-late", "tool": "pay", "call_id": "c1",
               "payload": {"intent_seq": seqs["intent"], "result": {"token": LATE_TOKEN}}}
    if path == "sync":
        if not view.capabilities.sync_append:
            pytest.skip(f"{backend} has no blocking append")
        late = await asyncio.to_thread(view.append_sync, "s", Phase.EXECUTED, **outcome)
    else:
        late = await view.append("s", Phase.EXECUTED, **outcome)
    assert late.payload["late"] is True
    committed = late.payload["result"]["token"]
    assert committed["key"] == 2 and committed["mask"] == "****"
    assert late.sealed is not None and LATE_TOKEN.encode() not in late.sealed

    reader = await keys().for_saga(journal, "s", create=False)  # another process, master key
    assert reader.reveal(late.payload, late.sealed, late.write_key)["result"]["token"] == LATE_TOKEN
    intent = (await journal.entries("s"))[seqs["intent"] - 1]
    with pytest.raises(DataErasedError):
        reader.reveal(intent.payload, intent.sealed, intent.write_key)
    rows = await journal.data_keys("s")
    assert [(r.generation, r.wrapped is None) for r in rows] == [(1, True), (2, False)]

    entries = await journal.entries("s")
    assert reopened_by(entries) == (seqs["close"], late.seq)
    assert all(v.ok for v in await verify_sagas(journal, "s"))
    state = await erasure_state(journal, "s")
    assert state.written_after == (2,)
    assert "values written after the erasure under key generation 2" in state.describe()
    if backend.name != "memory":
        shown = await asyncio.to_thread(CliRunner().invoke, cli, ["saga", "show", "s", "--db", location])
        assert shown.exit_code == 0, shown.output
        assert "REOPENED" in shown.output and "key generation 2" in shown.output
        assert LATE_TOKEN not in shown.output


async def test_without_data_keys_or_a_stored_key_the_view_keeps_its_secrets(place):
    """A view given no data keys, or whose saga's key is this process's own (no master key:
    nothing stored, nothing to erase), keeps its secrets: the saga's values keep committing
    alike."""
    _, _, journal = place
    seqs = await write_saga(journal, keys(), "s", "stalled")
    view = FencedJournal(journal, "s", lambda: seqs["r1"], lambda lost: None)
    secrets = seqs["view"].secrets["s"]
    view.secrets["s"] = secrets
    await view.rekey("s")
    assert view.secrets["s"] is secrets
    keyless = DataKeys(None)
    own = await keyless.for_saga(journal, "t")
    view.secrets["t"], view.data_keys = own, keyless
    await view.rekey("t")
    assert view.secrets["t"] is own and not own.stored
