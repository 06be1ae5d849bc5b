"""``sagacity serve``: refuses a non-loopback address without authentication, serves the inbox
from a real process, and the ``web`` extra's clear error when it is missing."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
from click.testing import CliRunner

from sagacity_agents.cli import cli
from tests.web.support import TOKENS, Bank, paused_saga
from tests.forked import python_command


def test_a_public_address_needs_authentication(tmp_path):
    db = tmp_path / "inbox.db"
    db.touch()
    from sagacity_agents.backends.sqlite.journal import SqliteJournal

    SqliteJournal(db)  # a journal file (the command refuses anything else)
    result = CliRunner().invoke(cli, ["serve", "--db", str(db), "--host", "0.0.0.0"])
    assert result.exit_code == 2
    assert "refusing to serve on 0.0.0.0 without authentication" in result.output
    both = CliRunner().invoke(cli, ["serve", "--db", str(db), "--tokens", "t", "--trusted-header", "X-User"])
    assert both.exit_code == 2 and "not both" in both.output
    missing = CliRunner().invoke(cli, ["serve", "--db", str(tmp_path / "none.db")])
    assert missing.exit_code == 2 and "does not exist" in missing.output


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def serving(db: str, *options: str) -> Iterator[str]:
    """``sagacity serve --db DB OPTIONS`` in a process of its own on a free port; its URL."""
    port = _free_port()
    process = subprocess.Popen(
        python_command("-m", "sagacity_agents.cli", "serve", "--db", db, "--port", str(port), *options),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env={**os.environ, "SAGACITY_WEB_SECRET": "s" * 32})
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 120  # a new interpreter on a loaded machine, at worst
        while True:
            try:
                if httpx.get(f"{url}/static/inbox.css", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert process.poll() is None and time.monotonic() < deadline, "serve did not start"
            time.sleep(0.1)
        yield url
    finally:
        process.terminate()
        process.wait(10)


def test_serve_runs_the_inbox(tmp_path):
    db = str(tmp_path / "inbox.db")
    _, request = asyncio.run(paused_saga(db, Bank()))
    tokens = tmp_path / "tokens"
    tokens.write_text("".join(f"{who} {secret}\n" for who, secret in TOKENS.items()))
    with serving(db, "--tokens", str(tokens)) as url:
        assert httpx.get(f"{url}/api/approvals").status_code == 401
        listed = httpx.get(f"{url}/api/approvals", headers={"Authorization": f"Bearer {TOKENS['alice']}"})
        assert [r["request_id"] for r in listed.json()["items"]] == [request.request_id]
        login = httpx.post(f"{url}/login", data={"secret": TOKENS["alice"]})
        assert "secure" not in login.headers["set-cookie"].lower()  # loopback: plain HTTP works
    with serving(db, "--tokens", str(tokens), "--secure-cookies") as url:
        login = httpx.post(f"{url}/login", data={"secret": TOKENS["alice"]})
        assert "; secure" in login.headers["set-cookie"].lower()


def test_serve_behind_a_local_proxy_that_sets_x_forwarded_for(tmp_path):
    """A proxy on this host adds X-Forwarded-For: the identity header is still believed (the
    peer is the proxy), and no client can pose as the proxy by writing that header."""
    db = str(tmp_path / "inbox.db")
    asyncio.run(paused_saga(db, Bank()))
    with serving(db, "--trusted-header", "X-User") as url:
        proxied = httpx.get(f"{url}/api/me", headers={"X-User": "alice", "X-Forwarded-For": "203.0.113.5"})
        assert proxied.status_code == 200 and proxied.json()["identity"] == "alice"
    with serving(db, "--trusted-header", "X-User", "--proxy", "10.9.9.9") as url:
        spoofed = httpx.get(f"{url}/api/me", headers={"X-User": "alice", "X-Forwarded-For": "10.9.9.9"})
        assert spoofed.status_code == 401


def test_without_the_web_extra_the_error_names_it():
    code = ("import sys; sys.modules['fastapi'] = None\n"
            "try:\n    import sagacity_agents.web\n"
            "except Exception as exc:\n    print(type(exc).__name__, exc)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.startswith("ConfigurationError") and "pip install 'sagacity-agents[web]'" in out
