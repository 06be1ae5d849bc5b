"""The inbox's REST API over real HTTP: a uvicorn server on a free port, httpx as the client.

Every endpoint; 401 / 403 without an identity, with a refused one, without a CSRF token; the
stale-hash 409; double submits; a request decided by someone else; an expired request; a closed
saga; two approvers racing (SQLite and PostgreSQL); the server's key signing its decisions.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from sagacity_agents import Sagacity
from sagacity_agents.core.entries import Phase
from sagacity_agents.core.signing import generate_key
from sagacity_agents.web import Forbidden
from tests.backends import BACKENDS
from tests.web.support import TOKENS, Bank, client, paused_saga

SQL = [b for b in BACKENDS if b.name != "memory"]  # the app and the test share the storage


async def test_every_route_needs_an_identity(db, serve):
    saga_id, request = await paused_saga(db, Bank())
    server = serve(db)
    routes = ["/api/me", "/api/approvals", "/api/approvals/count", f"/api/approvals/{request.request_id}",
              "/api/sagas", f"/api/sagas/{saga_id}", f"/api/sagas/{saga_id}/entries",
              f"/api/sagas/{saga_id}/verify", "/openapi.json"]
    async with client(server, None) as anonymous:
        for path in routes:
            response = await anonymous.get(path)
            assert response.status_code == 401, path
            assert response.json()["error"]["code"] == "unauthenticated"
        for path in ("/", f"/requests/{request.request_id}", "/sagas", f"/sagas/{saga_id}"):
            response = await anonymous.get(path)
            assert (response.status_code, response.headers["location"]) == (303, "/login"), path
        response = await anonymous.post(f"/api/approvals/{request.request_id}/approve",
                                        json={"args_hash": request.args_hash})
        assert response.status_code == 401
        wrong = await anonymous.get("/api/approvals", headers={"Authorization": "Bearer not-a-known-token"})
        assert wrong.status_code == 401
        assert (await anonymous.get("/login")).status_code == 200
        assert (await anonymous.get("/static/inbox.css")).status_code == 200
    assert (await Sagacity(db).approvals.get(request.request_id)).decision is None


async def test_an_authenticator_may_refuse_with_403(db, serve):
    def only_alice(request):
        who = request.headers.get("x-user")
        if who and who != "alice":
            raise Forbidden(f"{who} may not decide payments")
        return who

    server = serve(db, authenticator=only_alice)
    async with client(server, None) as http:
        assert (await http.get("/api/approvals", headers={"x-user": "alice"})).status_code == 200
        refused = await http.get("/api/approvals", headers={"x-user": "mallory"})
        assert refused.status_code == 403 and refused.json()["error"]["code"] == "forbidden"
        assert (await http.get("/api/approvals")).status_code == 401


async def test_login_session_cookie_and_csrf(db, serve):
    _, request = await paused_saga(db, Bank())
    server = serve(db)
    async with client(server, None) as http:
        failed = await http.post("/login", data={"secret": "guess-guess-guess"})
        assert failed.status_code == 401 and "set-cookie" not in failed.headers
        ok = await http.post("/login", data={"secret": TOKENS["bob"]})
        assert ok.status_code == 303
        cookie = ok.headers["set-cookie"].lower()
        assert "httponly" in cookie and "samesite=strict" in cookie
        me = (await http.get("/api/me")).json()
        assert me["identity"] == "bob"
        page = await http.get("/")
        assert page.status_code == 200 and "send_wire" in page.text
        assert "script-src 'self'" in page.headers["content-security-policy"]
        assert "default-src 'none'" in page.headers["content-security-policy"]
        body = {"args_hash": request.args_hash, "reason": "fine"}
        url = f"/api/approvals/{request.request_id}/approve"
        no_token = await http.post(url, json=body)
        assert no_token.status_code == 403 and no_token.json()["error"]["code"] == "csrf_failed"
        wrong = await http.post(url, json=body, headers={"X-CSRF-Token": "0" * 64})
        assert wrong.status_code == 403
        form = await http.post(f"/requests/{request.request_id}/decide",
                               data={"decision": "approve", "args_hash": request.args_hash})
        assert form.status_code == 403 and form.json()["error"]["code"] == "csrf_failed"
        cross = await http.post(url, json=body, headers={"X-CSRF-Token": me["csrf_token"],
                                                         "Origin": "https://evil.example"})
        assert cross.status_code == 403
        assert (await Sagacity(db).approvals.get(request.request_id)).decision is None
        done = await http.post(f"/requests/{request.request_id}/decide",
                               data={"decision": "approve", "args_hash": request.args_hash,
                                     "reason": "invoice checked", "csrf_token": me["csrf_token"]})
        assert done.status_code == 303
        shown = await http.get(done.headers["location"])
        assert "approved by bob" in shown.text
        await http.post("/logout", data={"csrf_token": me["csrf_token"]})
    stored = await Sagacity(db).approvals.get(request.request_id)
    assert (stored.decision, stored.approver, stored.reason) == ("approved", "bob", "invoice checked")


async def test_endpoints_and_decisions(db, serve):
    bank = Bank()
    saga_id, request = await paused_saga(db, bank)
    other_saga, other = await paused_saga(db, bank)
    server = serve(db)
    rid = request.request_id
    async with client(server) as alice, client(server, "bob") as bob:
        listed = (await alice.get("/api/approvals")).json()
        assert [r["request_id"] for r in listed["items"]] == [rid, other.request_id]
        assert listed["total"] == 2 and listed["next_offset"] is None
        page = (await alice.get("/api/approvals", params={"limit": 1, "offset": 1})).json()
        assert [r["request_id"] for r in page["items"]] == [other.request_id] and page["total"] == 2
        first = (await alice.get("/api/approvals", params={"limit": 1})).json()
        assert first["next_offset"] == 1
        by_saga = (await alice.get("/api/approvals", params={"saga_id": saga_id})).json()
        assert [r["request_id"] for r in by_saga["items"]] == [rid]
        assert (await alice.get("/api/approvals/count")).json() == {"pending": 2}
        assert (await alice.get("/api/approvals", params={"state": "nope"})).json()["error"]["code"] == "invalid_request"

        shown = (await alice.get(f"/api/approvals/{rid}")).json()
        assert shown["args"] == {"amount_eur": 2500, "iban": "DE89370400440532013000", "memo": "invoice 42"}
        assert json.loads(shown["raw_args"])["amount_eur"] == "2500"  # the model's text differs
        assert shown["canonical_json"] == '{"amount_eur":2500,"iban":"DE89370400440532013000","memo":"invoice 42"}'
        assert shown["hash_ok"] is True and shown["args_hash"] == request.args_hash
        assert (shown["tool"], shown["call_id"], shown["saga_id"]) == ("send_wire", "call_wire", saga_id)
        assert shown["reversibility"] == "irreversible" and shown["state"] == "pending"
        assert shown["age_seconds"] >= 0 and shown["expires_in_seconds"] > 3600
        missing = await alice.get("/api/approvals/apr-nope")
        assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"

        url = f"/api/approvals/{rid}"
        stale = await alice.post(f"{url}/approve", json={"args_hash": "f" * 64})
        assert stale.status_code == 409 and stale.json()["error"]["code"] == "hash_mismatch"
        no_reason = await alice.post(f"{url}/reject", json={"args_hash": request.args_hash, "reason": "  "})
        assert no_reason.status_code == 422 and no_reason.json()["error"]["code"] == "reason_required"
        assert (await alice.post(f"{url}/approve", json={})).json()["error"]["code"] == "invalid_request"
        assert (await alice.get("/api/approvals/count")).json() == {"pending": 2}

        approved = await alice.post(f"{url}/approve", json={"args_hash": request.args_hash, "reason": "ok"})
        assert approved.status_code == 200, approved.text
        assert approved.json()["changed"] is True
        assert approved.json()["request"]["approver"] == "alice"
        again = await alice.post(f"{url}/approve", json={"args_hash": request.args_hash, "reason": "ok"})
        assert again.status_code == 200 and again.json()["changed"] is False
        assert again.json()["request"]["decided_at"] == approved.json()["request"]["decided_at"]
        for who, verb, body in ((bob, "approve", {}), (bob, "reject", {"reason": "no"}),
                                (alice, "reject", {"reason": "changed my mind"})):
            conflict = await who.post(f"{url}/{verb}", json={"args_hash": request.args_hash, **body})
            assert conflict.status_code == 409, (verb, conflict.text)
            error = conflict.json()["error"]
            assert (error["code"], error["approver"], error["decision"]) == ("already_decided", "alice", "approved")
        assert (await alice.get("/api/approvals/count")).json() == {"pending": 1}
        decided = (await alice.get("/api/approvals", params={"state": "decided"})).json()["items"]
        assert [r["request_id"] for r in decided] == [rid]
        every = (await alice.get("/api/approvals", params={"state": "all"})).json()
        assert every["total"] == 2

        sagas = (await alice.get("/api/sagas")).json()
        assert [s["saga_id"] for s in sagas["items"]] == [saga_id, other_saga]
        assert sagas["items"][0]["status"] == "OPEN (last APPROVED)"  # as listed: its last entry
        assert sagas["items"][1]["status"] == "AWAITING_APPROVAL (open)"
        assert sagas["items"][0]["last_phase"] == "APPROVED"
        assert [s["saga_id"] for s in (await alice.get("/api/sagas", params={"offset": 1, "limit": 1})).json()["items"]] == [other_saga]
        saga = (await alice.get(f"/api/sagas/{saga_id}")).json()
        assert saga["status"] == "OPEN (last APPROVED)" and [r["state"] for r in saga["requests"]] == ["approved"]
        entries = (await alice.get(f"/api/sagas/{saga_id}/entries")).json()
        assert [e["seq"] for e in entries] == list(range(1, len(entries) + 1))
        decision = [e for e in entries if e["phase"] == "APPROVED"]
        assert decision[0]["payload"]["approver"] == "alice" and decision[0]["payload"]["args_hash"] == request.args_hash
        assert (await alice.get(f"/api/sagas/{saga_id}/verify")).json()["ok"] is True
        assert (await alice.get("/api/sagas/nope")).status_code == 404
        assert (await alice.get("/api/sagas/nope/verify")).status_code == 404

        schema = (await alice.get("/openapi.json")).json()
        for path in ("/api/approvals", "/api/approvals/{request_id}", "/api/approvals/{request_id}/approve",
                     "/api/approvals/{request_id}/reject", "/api/sagas", "/api/sagas/{saga_id}",
                     "/api/sagas/{saga_id}/entries", "/api/sagas/{saga_id}/verify", "/api/approvals/count"):
            assert path in schema["paths"], path
        assert "409" in schema["paths"]["/api/approvals/{request_id}/approve"]["post"]["responses"]
        assert (await alice.get("/docs")).status_code == 404  # the CDN-loading docs page is off

    # The decision is the CLI's: same entries, and the saga resumes on it, the wire once.
    sagacity = Sagacity(db)
    from tests.web.support import make_agent

    result = await sagacity.resume(saga_id, make_agent(bank))
    assert result.status.value == "COMPLETED" and len(bank.wires) == 1
    await sagacity.aclose()


async def test_tampered_saga_verifies_false_and_cannot_be_decided(db, serve):
    saga_id, request = await paused_saga(db, Bank())
    import sqlite3

    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE sagacity_journal SET hash = ? WHERE saga_id = ? AND seq = 2", ("0" * 64, saga_id))
    server = serve(db)
    async with client(server) as alice:
        verified = (await alice.get(f"/api/sagas/{saga_id}/verify")).json()
        assert verified["ok"] is False and verified["bad_seq"] == 2
        refused = await alice.post(f"/api/approvals/{request.request_id}/approve",
                                   json={"args_hash": request.args_hash})
        assert refused.status_code == 409 and refused.json()["error"]["code"] == "saga_not_verified"


async def test_expired_request_is_410(db, serve):
    saga_id, request = await paused_saga(db, Bank(), approval_ttl=0.3)
    await asyncio.sleep(0.4)
    server = serve(db)
    async with client(server) as alice:
        assert (await alice.get(f"/api/approvals/{request.request_id}")).json()["state"] == "expired"
        response = await alice.post(f"/api/approvals/{request.request_id}/approve",
                                    json={"args_hash": request.args_hash})
        assert response.status_code == 410, response.text
        assert response.json()["error"]["code"] == "request_expired"
    assert not any(e.phase is Phase.APPROVED for e in await Sagacity(db).journal.entries(saga_id))


async def test_decision_on_a_closed_saga_is_409_saga_closed(db, serve):
    bank = Bank()
    saga_id, request = await paused_saga(db, bank)
    sagacity = Sagacity(db)
    from tests.web.support import make_agent

    recovered = await sagacity.recover(saga_id, make_agent(bank))  # abandons the pause, undoes the hold
    await sagacity.aclose()
    assert bank.holds == [] and recovered.status.value == "COMPENSATED"
    server = serve(db)
    async with client(server) as alice:
        response = await alice.post(f"/api/approvals/{request.request_id}/approve",
                                    json={"args_hash": request.args_hash})
        assert response.status_code == 409 and response.json()["error"]["code"] == "saga_closed"
        assert "closed" in response.json()["error"]["message"]


@pytest.mark.parametrize("backend", SQL, ids=str)
async def test_two_approvers_racing(backend, request, serve):
    location = backend.location(request)
    saga_id, paused = await paused_saga(location, Bank())
    server = serve(location)
    url = f"/api/approvals/{paused.request_id}"
    async with client(server) as alice, client(server, "bob") as bob:
        responses = await asyncio.gather(
            alice.post(f"{url}/approve", json={"args_hash": paused.args_hash, "reason": "ok"}),
            bob.post(f"{url}/reject", json={"args_hash": paused.args_hash, "reason": "no"}),
        )
    codes = sorted(r.status_code for r in responses)
    assert codes == [200, 409], [r.text for r in responses]
    winner = next(r for r in responses if r.status_code == 200).json()["request"]
    loser = next(r for r in responses if r.status_code == 409).json()["error"]
    assert loser["code"] == "already_decided"
    assert (loser["approver"], loser["decision"]) == (winner["approver"], winner["decision"])
    sagacity = Sagacity(location)
    try:
        decisions = [e for e in await sagacity.journal.entries(saga_id)
                     if e.phase in (Phase.APPROVED, Phase.REJECTED)]
        assert len(decisions) == 1 and decisions[0].payload["approver"] == winner["approver"]
        assert (await sagacity.approvals.get(paused.request_id)).approver == winner["approver"]
    finally:
        await sagacity.aclose()


async def test_the_servers_key_signs_its_decisions(db, serve, tmp_path):
    keys = tmp_path / "keys"
    generate_key(keys, "inbox-2026")
    saga_id, request = await paused_saga(db, Bank(), keyring=keys)
    server = serve(db, keyring=keys)
    async with client(server) as alice:
        response = await alice.post(f"/api/approvals/{request.request_id}/approve",
                                    json={"args_hash": request.args_hash})
        assert response.status_code == 200, response.text
        assert (await alice.get(f"/api/sagas/{saga_id}/verify")).json()["ok"] is True
    approved = [e for e in await Sagacity(db).journal.entries(saga_id) if e.phase is Phase.APPROVED]
    assert approved[0].payload["signature"]["key_id"] == "inbox-2026"
