"""Who may see and decide: pluggable authenticators, the session cookie and CSRF tokens.

An *authenticator* is any callable given the Starlette ``Request`` that returns the caller's
identity (a non-empty string: what the journal records as the approver) or ``None`` (not
authenticated: 401), sync or async; it may raise :class:`Forbidden` (authenticated, not allowed:
403). Two are built in:

* :class:`TokenLogin`: configured secrets (tokens or passwords), each mapped to an identity. A
  person types theirs into the inbox's login form and gets an HttpOnly, ``SameSite=Strict``
  session cookie signed with the app's secret key (``itsdangerous``); a program sends it as
  ``Authorization: Bearer SECRET``.
* :class:`TrustedHeader`: the identity a reverse proxy put in a header (off unless configured;
  only believed from the proxy's own addresses).

A session cookie is believed only while its identity is still the authenticator's:

* with :class:`TokenLogin`, the cookie carries a fingerprint of the secret the person signed in
  with (an HMAC under the app's key of the secret's SHA-256); a request whose identity is no
  longer configured, or whose secret changed, is not authenticated (stateless: every replica
  sharing the key and the tokens file decides the same);
* with any other authenticator (:class:`TrustedHeader`, your own), the authenticator is asked on
  every request, and the cookie only carries the session's nonce: a cookie of another identity
  is replaced by a fresh one.

Signing out revokes the session's nonce in this process (a copy of the cookie replayed to the
same process is refused) and deletes the cookie. The revocation is not shared between replicas:
a copy replayed to another replica stays valid until it expires (``session_seconds``) unless the
identity's secret is changed or removed; keep sessions short where that matters.

Every POST needs a CSRF token (the ``csrf_token`` form field, or the ``X-CSRF-Token`` header):
an HMAC of the identity and the session's nonce under the app's secret key, so a page of another
site cannot make a logged-in browser decide; a new session (sign-in, or a new cookie under a
proxy's identity) has a new nonce, hence a new token. A bearer-token request is exempt: a browser
never attaches that header by itself.
"""

from __future__ import annotations

import hashlib
import hmac
import inspect
import ipaddress
import secrets
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from itsdangerous import BadSignature, URLSafeTimedSerializer
from starlette.requests import Request
from starlette.responses import Response

from ..errors import ConfigurationError

__all__ = [
    "Authenticator",
    "Caller",
    "Forbidden",
    "Sessions",
    "TokenLogin",
    "TrustedHeader",
]

Authenticator = Callable[[Request], "Awaitable[str | None] | str | None"]
"""A callable given the request, returning the caller's identity or ``None``; see the module."""

MAX_IDENTITY = 200
"""Longest identity accepted (characters)."""


class Forbidden(Exception):
    """Raised by an authenticator for a caller it knows but does not let in (HTTP 403)."""


def check_identity(identity: object) -> str | None:
    """``identity`` when it is a usable name (a non-empty string of printable characters, at
    most :data:`MAX_IDENTITY` long), else ``None``."""
    if not isinstance(identity, str) or not identity or len(identity) > MAX_IDENTITY:
        return None
    if not identity.isprintable():
        return None
    return identity


def _digest(secret: str) -> bytes:
    return hashlib.sha256(secret.encode("utf-8")).digest()


class TokenLogin:
    """Secrets mapped to identities: the login form's and bearer tokens' authenticator.

    Only SHA-256 digests of the secrets are kept; a secret is compared with every configured
    one in constant time.

    Args:
        tokens: ``{identity: secret}``; each secret at least 12 characters, all different.

    Raises:
        ConfigurationError: no tokens, an unusable identity, a short or repeated secret.
    """

    def __init__(self, tokens: Mapping[str, str]) -> None:
        if not tokens:
            raise ConfigurationError("TokenLogin needs at least one identity and its secret")
        self._digests: list[tuple[bytes, str]] = []
        for identity, secret in tokens.items():
            if check_identity(identity) is None:
                raise ConfigurationError(f"unusable identity {identity!r} (printable, 1..{MAX_IDENTITY} characters)")
            if not isinstance(secret, str) or len(secret) < 12:
                raise ConfigurationError(f"the secret of {identity!r} must be at least 12 characters")
            self._digests.append((_digest(secret), identity))
        if len({d for d, _ in self._digests}) != len(self._digests):
            raise ConfigurationError("two identities share one secret")

    @classmethod
    def from_file(cls, path: str | Path) -> TokenLogin:
        """Read ``IDENTITY SECRET`` lines (blank lines and ``#`` comments skipped).

        Raises:
            ConfigurationError: the file cannot be read or a line is malformed (as the
                constructor).
        """
        tokens: dict[str, str] = {}
        try:
            lines = Path(path).read_text("utf-8").splitlines()
        except OSError as exc:
            raise ConfigurationError(f"cannot read the tokens file {path}: {exc}") from exc
        for number, line in enumerate(lines, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            parts = line.split()
            if len(parts) != 2 or parts[0] in tokens:
                raise ConfigurationError(f"{path}:{number}: expected 'IDENTITY SECRET', once per identity")
            tokens[parts[0]] = parts[1]
        return cls(tokens)

    def digest_of(self, identity: str) -> bytes | None:
        """The SHA-256 of ``identity``'s configured secret (``None``: not configured): what a
        session cookie's fingerprint is checked against."""
        for digest, known in self._digests:
            if known == identity:
                return digest
        return None

    def identity_of(self, secret: str) -> str | None:
        """The identity whose secret is ``secret`` (constant time per configured secret)."""
        given = _digest(secret)
        found = None
        for digest, identity in self._digests:
            if hmac.compare_digest(digest, given):
                found = identity
        return found

    def __call__(self, request: Request) -> str | None:
        """The identity of an ``Authorization: Bearer SECRET`` header, else ``None``."""
        scheme, _, secret = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not secret.strip():
            return None
        return self.identity_of(secret.strip())


class TrustedHeader:
    """The identity a reverse proxy authenticated, read from a header it sets.

    Believed only from ``proxies`` (client addresses or networks): a request that reaches the app
    from anywhere else is not authenticated by it, whatever the header says. Configure the proxy
    to strip the header from what clients send.

    The address checked is the ASGI scope's ``client``, which must be the TCP peer: serve the
    app with the server's proxy-header rewriting off (``uvicorn --no-proxy-headers``; what
    ``sagacity serve`` does), or with ``--forwarded-allow-ips`` set to exactly the trusted
    proxies. A client address rewritten from ``X-Forwarded-For`` by uvicorn has port 0 and is
    refused here (any client could name a proxy's address in that header); other servers'
    rewriting cannot be told apart, so do not enable it.

    Args:
        header: the header's name (e.g. ``X-Forwarded-User``).
        proxies: addresses or networks of the proxies (default: this host only).

    Raises:
        ConfigurationError: an empty header name or an unparsable address.
    """

    def __init__(self, header: str, *, proxies: Iterable[str] = ("127.0.0.1", "::1")) -> None:
        if not header or not header.strip():
            raise ConfigurationError("TrustedHeader needs the header's name")
        self.header = header.strip().lower()
        try:
            self.proxies = [ipaddress.ip_network(p, strict=False) for p in proxies]
        except ValueError as exc:
            raise ConfigurationError(f"TrustedHeader: {exc}") from exc

    def __call__(self, request: Request) -> str | None:
        """The header's value when the request comes from a trusted proxy, else ``None``."""
        host = request.client.host if request.client else None
        if request.client is not None and request.client.port == 0:
            return None  # rewritten from X-Forwarded-For (uvicorn): not the peer's address
        try:
            address = ipaddress.ip_address(host) if host else None
        except ValueError:
            return None
        if address is None or not any(address in net for net in self.proxies):
            return None
        return check_identity(request.headers.get(self.header, "").strip())


@dataclass(frozen=True)
class Caller:
    """An authenticated caller."""

    identity: str
    """Who (journaled as the approver)."""
    nonce: str
    """The session's nonce ("" without a session): what the CSRF token is bound to."""
    bearer: bool = False
    """Authenticated by a bearer token (no CSRF token needed)."""
    new_cookie: str | None = None
    """A session cookie to set on the response (a new session under a non-login authenticator)."""


class Sessions:
    """Signed session cookies and the CSRF tokens bound to them.

    Args:
        secret_key: the key that signs cookies and CSRF tokens (at least 32 bytes); every
            replica of one inbox needs the same one.
        max_age: seconds a session lasts.
        cookie: the cookie's name.
        secure: set the cookie's ``Secure`` flag (serve over HTTPS).

    Raises:
        ConfigurationError: a key shorter than 32 bytes.
    """

    def __init__(self, secret_key: str | bytes, *, max_age: float = 8 * 3600,
                 cookie: str = "sagacity_session", secure: bool = False) -> None:
        key = secret_key.encode("utf-8") if isinstance(secret_key, str) else bytes(secret_key)
        if len(key) < 32:
            raise ConfigurationError("the inbox's secret key must be at least 32 bytes")
        self._key = key
        self._serializer = URLSafeTimedSerializer(key, salt="sagacity-inbox-session")
        self.max_age = max_age
        self.cookie = cookie
        self.secure = secure
        self._revoked: dict[str, float] = {}

    def fingerprint(self, digest: bytes | None) -> str:
        """The fingerprint of a secret's SHA-256 a session carries (``""`` for ``None``)."""
        if digest is None:
            return ""
        return hmac.new(self._key, b"credential\x00" + digest, hashlib.sha256).hexdigest()[:32]

    def issue(self, identity: str, credential: bytes | None = None) -> tuple[str, str]:
        """A new session for ``identity``: ``(cookie value, nonce)``, with a fresh nonce and the
        fingerprint of ``credential`` (the SHA-256 of the secret signed in with)."""
        nonce = secrets.token_hex(16)
        value = self._serializer.dumps({"id": identity, "n": nonce, "c": self.fingerprint(credential)})
        return value, nonce

    def read(self, request: Request, credential_of: Callable[[str], bytes | None] | None = None) -> Caller | None:
        """The caller of the request's session cookie, ``None`` without a valid, unexpired,
        unrevoked one; with ``credential_of`` (identity to its secret's current SHA-256), also
        ``None`` when the cookie's fingerprint is not that secret's (revoked or changed)."""
        value = request.cookies.get(self.cookie)
        if not value:
            return None
        try:
            data = self._serializer.loads(value, max_age=int(self.max_age))
        except BadSignature:
            return None
        if not isinstance(data, dict):
            return None
        identity, nonce = check_identity(data.get("id")), data.get("n")
        if identity is None or not isinstance(nonce, str) or not nonce or nonce in self._revoked:
            return None
        if credential_of is not None:
            current = credential_of(identity)
            if current is None or not hmac.compare_digest(self.fingerprint(current), str(data.get("c", ""))):
                return None
        return Caller(identity, nonce)

    def revoke(self, caller: Caller) -> None:
        """Refuse ``caller``'s session cookie from now on, in this process (signing out)."""
        now = time.monotonic()
        self._revoked = {n: t for n, t in self._revoked.items() if t > now}
        if caller.nonce:
            self._revoked[caller.nonce] = now + self.max_age

    def set_cookie(self, response: Response, value: str, path: str) -> None:
        """Set the session cookie on ``response`` (HttpOnly, SameSite=Strict, ``Secure`` as
        configured) for the app's ``path``."""
        response.set_cookie(self.cookie, value, max_age=int(self.max_age), path=path,
                            httponly=True, samesite="strict", secure=self.secure)

    def csrf_token(self, caller: Caller) -> str:
        """The CSRF token of ``caller`` (HMAC-SHA-256 of identity and nonce)."""
        message = f"csrf\x00{caller.identity}\x00{caller.nonce}".encode()
        return hmac.new(self._key, message, hashlib.sha256).hexdigest()

    def csrf_ok(self, caller: Caller, token: str | None) -> bool:
        """Whether ``token`` is ``caller``'s CSRF token (constant time); bearer callers need none."""
        if caller.bearer:
            return True
        return bool(caller.nonce) and bool(token) and \
            hmac.compare_digest(self.csrf_token(caller), str(token))


async def authenticate(request: Request, authenticator: Authenticator, sessions: Sessions) -> Caller | None:
    """The request's caller.

    With :class:`TokenLogin`: the session cookie when its secret's fingerprint is still the
    configured one, else a bearer token. With any other authenticator: the identity it returns
    for this request, with the cookie's nonce when the cookie is that identity's, else with a
    new session (:attr:`Caller.new_cookie`).

    Raises:
        Forbidden: the authenticator refused a caller it knows.
    """
    login = isinstance(authenticator, TokenLogin)
    if isinstance(authenticator, TokenLogin):
        caller = sessions.read(request, authenticator.digest_of)
        if caller is not None:
            return caller
    found = authenticator(request)
    if inspect.isawaitable(found):
        found = await found
    identity = check_identity(found)
    if identity is None:
        return None
    if login:
        return Caller(identity, "", bearer=True)
    session = sessions.read(request)
    if session is not None and session.identity == identity:
        return session
    value, nonce = sessions.issue(identity)
    return Caller(identity, nonce, new_cookie=value)
