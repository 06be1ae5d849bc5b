"""The approval inbox: decide irreversible calls from a browser or a REST client.

``create_app(...)`` builds an ASGI application (FastAPI) to serve stand-alone
(``sagacity serve``) or to mount in an application's own server::

    from sagacity_agents.web import TokenLogin, create_app, mount_inbox
    inbox = create_app("journal.db", authenticator=TokenLogin({"alice": token}), on_decided=...)
    mount_inbox(app, "/approvals", inbox)  # app.mount + the inbox's lifespan in app's

(a bare ``app.mount`` runs no lifespan of the inbox: its poller would start only at the inbox's
first request).

Needs the ``web`` extra (``pip install 'sagacity-agents[web]'``); without it, importing this
package raises :class:`~sagacity_agents.errors.ConfigurationError` naming it. This package is an
adapter on top of the library: decisions go through :class:`~sagacity_agents.Sagacity`, like the
CLI's; the core imports nothing from here.
"""

from __future__ import annotations

from ..errors import ConfigurationError

INSTALL_HINT = "the approval inbox needs the web extra: pip install 'sagacity-agents[web]'"
"""What to run when the extra is missing."""

try:
    import fastapi  # noqa: F401
    import itsdangerous  # noqa: F401
    import jinja2  # noqa: F401
except ImportError as exc:  # pragma: no cover - tested in a fresh interpreter with the import blocked
    raise ConfigurationError(f"{INSTALL_HINT} ({exc.name} is missing)") from exc

from .app import CSP, Inbox, create_app, mount_inbox
from .auth import Authenticator, Forbidden, TokenLogin, TrustedHeader
from .decisions import OnDecided, Refused

__all__ = ["CSP", "INSTALL_HINT", "Authenticator", "Forbidden", "Inbox", "OnDecided", "Refused",
           "TokenLogin", "TrustedHeader", "create_app", "mount_inbox"]
