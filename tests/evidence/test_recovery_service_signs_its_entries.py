"""The recovery service (``core.recovery.Recovery``), used by an adapter without the SDK facade,
signs what it writes with its evidence's keyring: given a bare backend, it appends through the
keyring's signing view, so a recovered saga still verifies under the keyring (an untagged
RUN_STARTED after tagged entries would leave it BROKEN, never to be recovered again)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from sagacity_agents import SagaStatus
from sagacity_agents.backends import InMemoryApprovalStore, InMemoryJournal
from sagacity_agents.core.authenticity import signing_view
from sagacity_agents.core.evidence import Evidence, verify_sagas
from sagacity_agents.core.recovery import Recovery
from sagacity_agents.core.signing import Keyring, generate_key
from sagacity_agents.sdk.binding import bind_agent

from ..sdk.claims_worker import STEPS, CrashClock, crash_saga, far_side_applied, step_agent


def test_the_recovery_service_tags_every_entry_it_writes_on_a_bare_backend(tmp_path: Path) -> None:
    generate_key(tmp_path / "keys", "k1")
    keyring = Keyring.load(tmp_path / "keys", signing_key_id="k1")

    async def main() -> None:
        clock = CrashClock()
        journal = InMemoryJournal(clock=clock)
        await crash_saga(signing_view(journal, keyring), "s")
        clock.catch_up()
        evidence = Evidence(keyring=keyring)
        far = str(tmp_path / "far.db")
        agent = step_agent(far)
        recovery = Recovery(journal, InMemoryApprovalStore(), evidence=evidence)
        result = await recovery.recover("s", lambda saga: bind_agent(saga, agent))
        assert result.status is SagaStatus.COMPENSATED
        assert len(far_side_applied(far)) == len(STEPS)
        assert {e.tag_key for e in await journal.entries("s")} == {"k1"}
        (verdict,) = await verify_sagas(journal, "s", evidence=evidence)
        assert verdict.ok, verdict

    asyncio.run(main())
