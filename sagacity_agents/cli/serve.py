"""``sagacity serve``: the approval inbox and its REST API, stand-alone (uvicorn).

Every route needs an identity: ``--tokens FILE`` (``IDENTITY SECRET`` lines: the login form and
bearer tokens) or ``--trusted-header NAME`` (set by a reverse proxy on this host). Without either,
on a loopback address only, a one-time token for ``$USER`` is made and printed. A non-loopback
``--host`` without one is refused: arguments hold personal data and decisions move money.
"""

from __future__ import annotations

import getpass
import ipaddress
import os
import secrets
from typing import Any

import click

from ..errors import ConfigurationError
from .base import CONTEXT_SETTINGS, UsageFailure, check_journal_file, cli, db_option, otel_if_installed

__all__ = ["serve"]

SECRET_ENVVAR = "SAGACITY_WEB_SECRET"
"""The key that signs sessions and CSRF tokens (same on every replica)."""


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine only (``localhost``, 127.0.0.0/8, ``::1``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@cli.command("serve", context_settings=CONTEXT_SETTINGS,
             short_help="Serve the approval inbox and REST API.")
@db_option()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option("--port", default=8000, show_default=True, type=int, help="Port to bind.")
@click.option("--tokens", "tokens_file", type=click.Path(dir_okay=False),
              help="File of 'IDENTITY SECRET' lines: who may sign in, with what.")
@click.option("--trusted-header", help="Header a reverse proxy on this host sets to the identity.")
@click.option("--keyring", type=click.Path(file_okay=False), default=None,
              help="Keyring directory ($SAGACITY_KEYRING): decisions are signed with its key.")
@click.option("--proxy", "proxies", multiple=True, default=("127.0.0.1", "::1"), show_default=True,
              help="Address or network of the proxy --trusted-header is believed from (repeatable).")
@click.option("--root-path", default="", help="Prefix the proxy serves the inbox under.")
@click.option("--secure-cookies/--no-secure-cookies", default=None,
              help="Mark the session cookie Secure (HTTPS only). Default: on unless --host is "
              "loopback (a TLS-terminating proxy in front makes the browser's side HTTPS).")
def serve(db: str, host: str, port: int, tokens_file: str | None, trusted_header: str | None,
          keyring: str | None, proxies: tuple[str, ...], root_path: str,
          secure_cookies: bool | None) -> None:
    """Serve the approval inbox (HTML at /, JSON at /api, OpenAPI at /openapi.json).

    Needs the web extra: pip install 'sagacity-agents[web]'. Decisions are journaled as the
    signed-in identity, through the same code as `sagacity approvals approve`. Sessions are
    signed with $SAGACITY_WEB_SECRET (random per start when unset). Client addresses are the TCP
    peers' (X-Forwarded-For is never used to rewrite them): --trusted-header is believed from
    the --proxy addresses only.
    """
    check_journal_file(db)
    try:
        import uvicorn

        from ..web import TokenLogin, TrustedHeader, create_app
    except (ImportError, ConfigurationError) as exc:
        raise click.ClickException(str(exc)) from exc
    authenticator: Any
    if tokens_file and trusted_header:
        raise UsageFailure("give --tokens or --trusted-header, not both")
    if not tokens_file and not trusted_header and not is_loopback(host):
        raise UsageFailure(
            f"refusing to serve on {host} without authentication: pass --tokens FILE or "
            "--trusted-header NAME (only a loopback address gets a one-time token)")
    try:
        if tokens_file:
            authenticator = TokenLogin.from_file(tokens_file)
        elif trusted_header:
            authenticator = TrustedHeader(trusted_header, proxies=proxies)
        else:
            token = secrets.token_urlsafe(24)
            authenticator = TokenLogin({getpass.getuser(): token})
            click.echo(f"sign in at http://{host}:{port}{root_path}/login with this one-time "
                       f"token (identity {getpass.getuser()}):\n{token}")
        if secure_cookies is None:
            secure_cookies = not is_loopback(host)
        otel_if_installed()  # the inbox's decisions as spans joined to the run's trace
        app = create_app(db, authenticator=authenticator, keyring=keyring,
                         secret_key=os.environ.get(SECRET_ENVVAR) or None,
                         secure_cookies=secure_cookies)
    except ConfigurationError as exc:
        raise click.ClickException(str(exc)) from exc
    # proxy_headers off: the client address TrustedHeader checks is the TCP peer, never a value
    # a client wrote in X-Forwarded-For (and a local proxy setting it does not lock everyone out).
    uvicorn.run(app, host=host, port=port, root_path=root_path, log_level="info",
                proxy_headers=False)
