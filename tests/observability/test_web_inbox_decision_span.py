"""Issue 23: a decision made in the web inbox (its own process's server, no SDK trace) is an
OTel span joined to the paused run's trace, and its wait is recorded."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.case("O-23")

pytest.importorskip("fastapi")

from tests.web.support import Bank, client, paused_saga

from .conftest import points


@pytest.fixture
def serve():
    from sagacity_agents.web import TokenLogin, create_app
    from tests.web.support import TOKENS, Server

    servers = []

    def start(location):
        server = Server(create_app(location, authenticator=TokenLogin(TOKENS)))
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


async def test_inbox_decision_span_joins_the_run_trace(tmp_path, sdk_spans, otel, serve):
    exporter, reader, _ = otel
    db = str(tmp_path / "inbox.db")
    saga_id, request = await paused_saga(db, Bank())
    pause = sdk_spans.one("saga.approval.pause send_wire")
    server = serve(db)
    async with client(server) as alice:
        url = f"/api/approvals/{request.request_id}/approve"
        approved = await alice.post(url, json={"args_hash": request.args_hash, "reason": "ok"})
        assert approved.status_code == 200, approved.text
    (span,) = [s for s in exporter.get_finished_spans() if s.name == "sagacity.approval.decision"]
    assert f"trace_{span.context.trace_id:032x}" == pause.trace_id
    assert f"{span.parent.span_id:016x}" == pause.span_id[5:21]
    assert span.attributes["sagacity.saga.id"] == saga_id
    assert span.attributes["sagacity.approval.decision"] == "approved"
    (wait,) = points(reader, "sagacity.approval.wait")
    assert wait.count == 1 and wait.attributes["gen_ai.tool.name"] == "send_wire"
