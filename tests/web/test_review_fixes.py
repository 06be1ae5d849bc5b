"""The smaller findings of the review of issue 24, over real HTTP: a double submit after the
resume closed the saga, the reason's cap and an oversized form field, expired requests not
counted as pending, saga ids with ``/``, reversibility in lists, the OpenAPI security schemes,
and a server without the keyring of a signed journal refusing to decide."""

from __future__ import annotations

from sagacity_agents import Sagacity
from sagacity_agents.core.signing import generate_key
from tests.web.support import Bank, client, make_agent, paused_saga


async def test_a_double_submit_after_the_resume_closed_the_saga_is_200(db, serve):
    bank = Bank()
    saga_id, request = await paused_saga(db, bank)
    server = serve(db)
    url = f"/api/approvals/{request.request_id}/approve"
    body = {"args_hash": request.args_hash, "reason": "ok"}
    async with client(server) as alice, client(server, "bob") as bob:
        assert (await alice.post(url, json=body)).json()["changed"] is True
        sagacity = Sagacity(db)
        try:
            assert (await sagacity.resume(saga_id, make_agent(bank))).status.value == "COMPLETED"
        finally:
            await sagacity.aclose()
        again = await alice.post(url, json=body)
        assert again.status_code == 200, again.text
        assert again.json()["changed"] is False and again.json()["request"]["decision"] == "approved"
        other = await bob.post(url, json=body)
        assert other.status_code == 409


async def test_the_form_caps_the_reason_and_a_huge_field_is_a_json_error(db, serve):
    _, request = await paused_saga(db, Bank())
    server = serve(db)
    async with client(server, None) as http:
        await http.post("/login", data={"secret": "alice-secret-token-1"})
        csrf = (await http.get("/api/me")).json()["csrf_token"]
        form = {"decision": "approve", "args_hash": request.args_hash, "csrf_token": csrf}
        long = await http.post(f"/requests/{request.request_id}/decide", data={**form, "reason": "x" * 2001})
        assert long.status_code == 422 and "2000" in long.text
        huge = await http.post(f"/requests/{request.request_id}/decide",
                               files={"reason": (None, "x" * (1024 * 1024 + 10))}, data=form)
        assert huge.status_code in (400, 413), huge.status_code
        assert huge.json()["error"]["code"] == "invalid_request"
    assert (await Sagacity(db).approvals.get(request.request_id)).decision is None


async def test_expired_requests_are_not_pending(db, serve):
    _, live = await paused_saga(db, Bank())
    _, old = await paused_saga(db, Bank(), approval_ttl=0.001)
    server = serve(db)
    async with client(server) as http:
        assert (await http.get("/api/approvals/count")).json() == {"pending": 1}
        pending = (await http.get("/api/approvals")).json()["items"]
        assert [r["request_id"] for r in pending] == [live.request_id]
        expired = (await http.get("/api/approvals?state=expired")).json()["items"]
        assert [(r["request_id"], r["state"]) for r in expired] == [(old.request_id, "expired")]
        page = (await http.get("/")).text
        assert page.count("hidden-chars") == 0 and 'data-count="1"' in page
        assert ">expired<" in page  # listed with the decided ones, greyed


async def test_a_saga_id_with_a_slash_is_reachable(db, serve):
    saga_id, _ = await paused_saga(db, Bank(), saga_id="tenant/42/pay")
    server = serve(db)
    async with client(server) as http:
        shown = await http.get(f"/api/sagas/{saga_id}")
        assert shown.status_code == 200 and shown.json()["saga_id"] == saga_id
        assert (await http.get(f"/api/sagas/{saga_id}/verify")).json()["ok"] is True
        assert len((await http.get(f"/api/sagas/{saga_id}/entries")).json()) > 3
        assert (await http.get("/sagas/tenant%2F42%2Fpay")).status_code == 200
        listed = (await http.get("/api/approvals")).json()["items"]
        assert listed[0]["reversibility"] == "irreversible"


async def test_the_openapi_schema_declares_security_and_errors(db, serve):
    server = serve(db)
    async with client(server) as http:
        schema = (await http.get("/openapi.json")).json()
    assert set(schema["components"]["securitySchemes"]) == {"bearer", "session", "csrf"}
    assert schema["components"]["securitySchemes"]["csrf"]["name"] == "X-CSRF-Token"
    approve = schema["paths"]["/api/approvals/{request_id}/approve"]["post"]["responses"]
    assert {"200", "401", "403", "404", "409", "410", "422", "503"} <= set(approve)
    assert "signing_key_required" in approve["409"]["description"]
    assert "storage_unavailable" in schema["paths"]["/api/sagas"]["get"]["responses"]["503"]["description"]


async def test_no_keyring_here_no_decision_in_a_signed_journal(db, serve, tmp_path):
    keys = tmp_path / "keys"
    generate_key(keys, "agent-2026")
    saga_id, request = await paused_saga(db, Bank(), keyring=keys)
    server = serve(db)  # a replica started without --keyring
    async with client(server) as alice:
        refused = await alice.post(f"/api/approvals/{request.request_id}/approve",
                                   json={"args_hash": request.args_hash})
        assert refused.status_code == 409, refused.text
        assert refused.json()["error"]["code"] == "signing_key_required"
    sagacity = Sagacity(db, keyring=keys)
    try:
        assert (await sagacity.approvals.get(request.request_id)).decision is None
        assert (await sagacity.verify(saga_id))[0].ok
    finally:
        await sagacity.aclose()
