"""Sessions over real HTTP: a cookie is believed only while its identity's secret is still
configured (revoked or rotated: refused, on every replica sharing the key), signing out revokes
it, and under a proxy's identity each session has its own nonce (a CSRF token that rotates)."""

from __future__ import annotations

from sagacity_agents.web import TokenLogin, TrustedHeader
from tests.web.support import TOKENS, Bank, client, paused_saga

KEY = "k" * 32


async def _signed_in(http, who: str = "alice") -> str:
    """Sign ``who`` in through the form; return the session cookie's value."""
    response = await http.post("/login", data={"secret": TOKENS[who]})
    assert response.status_code == 303
    return http.cookies["sagacity_session"]


async def test_a_revoked_or_rotated_identity_loses_its_session(db, serve):
    await paused_saga(db, Bank())
    first = serve(db, secret_key=KEY)
    async with client(first, None) as alice, client(first, None) as bob:
        cookie = await _signed_in(alice)
        bob_cookie = await _signed_in(bob, "bob")
        assert (await alice.get("/api/me")).json()["identity"] == "alice"
    # A replica (or a restart) with alice removed from the tokens, and one with her secret changed.
    removed = serve(db, secret_key=KEY, authenticator=TokenLogin({"bob": TOKENS["bob"]}))
    rotated = serve(db, secret_key=KEY, authenticator=TokenLogin(
        {"alice": "alice-new-secret-333", "bob": TOKENS["bob"]}))
    for server in (removed, rotated):
        async with client(server, None) as http:
            http.cookies.set("sagacity_session", cookie)
            assert (await http.get("/api/me")).status_code == 401
            page = await http.get("/")
            assert page.status_code == 303 and page.headers["location"].endswith("/login")
        async with client(server, None) as http:
            http.cookies.set("sagacity_session", bob_cookie)
            assert (await http.get("/api/me")).json()["identity"] == "bob"
    same = serve(db, secret_key=KEY)
    async with client(same, None) as http:
        http.cookies.set("sagacity_session", cookie)
        assert (await http.get("/api/me")).json()["identity"] == "alice"


async def test_signing_out_revokes_the_cookie(db, serve):
    server = serve(db, secret_key=KEY)
    async with client(server, None) as http:
        cookie = await _signed_in(http)
        csrf = (await http.get("/api/me")).json()["csrf_token"]
        out = await http.post("/logout", data={"csrf_token": csrf})
        assert out.status_code == 303 and out.headers["location"].endswith("/login")
    async with client(server, None) as replay:
        replay.cookies.set("sagacity_session", cookie)
        assert (await replay.get("/api/me")).status_code == 401
    async with client(server, None) as http:
        again = await _signed_in(http)
        assert again != cookie and (await http.get("/api/me")).status_code == 200


async def test_under_a_proxy_each_session_has_its_own_csrf_token(db, serve):
    _, request = await paused_saga(db, Bank())
    server = serve(db, secret_key=KEY, authenticator=TrustedHeader("X-User"))
    body = {"args_hash": request.args_hash, "reason": "ok"}
    url = f"/api/approvals/{request.request_id}/approve"
    async with client(server, None) as one, client(server, None) as two:
        for http in (one, two):
            http.headers["X-User"] = "alice"
        first = (await one.get("/api/me")).json()["csrf_token"]
        second = (await two.get("/api/me")).json()["csrf_token"]
        assert first != second
        assert (await one.get("/api/me")).json()["csrf_token"] == first  # stable in a session
        # Without the session's cookie, no token is right (the old one was the same for everyone).
        async with client(server, None) as bare:
            bare.headers["X-User"] = "alice"
            refused = await bare.post(url, json=body, headers={"X-CSRF-Token": first})
            assert refused.status_code == 403 and refused.json()["error"]["code"] == "csrf_failed"
        assert (await two.post(url, json=body, headers={"X-CSRF-Token": first})).status_code == 403
        # The proxy now says bob: alice's cookie is not his session.
        one.headers["X-User"] = "bob"
        bob = (await one.get("/api/me")).json()
        assert bob["identity"] == "bob" and bob["csrf_token"] != first
        one.headers["X-User"] = "alice"
        token = (await one.get("/api/me")).json()["csrf_token"]
        done = await one.post(url, json=body, headers={"X-CSRF-Token": token})
        assert done.status_code == 200 and done.json()["request"]["approver"] == "alice"
        await one.post("/logout", headers={"X-CSRF-Token": token})
        assert (await one.get("/api/me")).json()["csrf_token"] != token  # rotated


async def test_an_unauthenticated_page_under_a_proxy_is_html(db, serve):
    server = serve(db, authenticator=TrustedHeader("X-User"))
    async with client(server, None) as http:
        page = await http.get("/")
        assert page.status_code == 401 and page.headers["content-type"].startswith("text/html")
        assert "unauthenticated" in page.text
        api = await http.get("/api/approvals")
        assert api.status_code == 401 and api.json()["error"]["code"] == "unauthenticated"


async def test_a_forwarded_address_is_not_a_proxy(db):
    """An app served with proxy-header rewriting open to anyone (``--forwarded-allow-ips='*'``):
    a client naming the proxy's address in X-Forwarded-For is not believed (port 0: rewritten)."""
    from sagacity_agents.web import create_app
    from tests.web.support import Server

    app = create_app(db, authenticator=TrustedHeader("X-User", proxies=["10.9.9.9", "127.0.0.1"]))
    server = Server(app, proxy_headers=True, forwarded_allow_ips="*")
    try:
        async with client(server, None) as http:
            spoofed = await http.get("/api/me", headers={"X-User": "alice", "X-Forwarded-For": "10.9.9.9"})
            assert spoofed.status_code == 401
            direct = await http.get("/api/me", headers={"X-User": "alice"})
            assert direct.status_code == 200 and direct.json()["identity"] == "alice"
    finally:
        server.stop()
