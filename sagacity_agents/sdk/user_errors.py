"""Configuration mistakes found by the SDK layer are also the Agents SDK's ``UserError``.

An application written for the SDK catches ``agents.UserError`` around agent set-up; the saga
layer's own mistakes (a missing ``needs_approval``, two tools under one name, a decorator in the
wrong place) must reach that handler too. The core knows nothing of the SDK (a test checks it), so
the SDK-side subclasses live here, as :class:`~sagacity_agents.sdk.hooks.SagaStopped` does it with
``AgentsException``: ``except ConfigurationError`` and ``except UserError`` both catch them.
"""

from __future__ import annotations

from agents import UserError

from ..errors import ConfigurationError, DeclarationError

__all__ = ["SdkConfigurationError", "SdkDeclarationError", "as_user_error"]


class SdkConfigurationError(UserError, ConfigurationError):
    """A :class:`~sagacity_agents.errors.ConfigurationError` raised by the SDK layer; also an
    ``agents.UserError``."""


class SdkDeclarationError(UserError, DeclarationError):
    """A :class:`~sagacity_agents.errors.DeclarationError` raised by the SDK layer; also an
    ``agents.UserError``."""


def as_user_error(exc: ConfigurationError) -> ConfigurationError:
    """The same mistake as an SDK ``UserError`` subclass (``exc`` itself when it already is one).

    Args:
        exc: a configuration or declaration error raised by the core.
    """
    if isinstance(exc, UserError):
        return exc
    kind = SdkDeclarationError if isinstance(exc, DeclarationError) else SdkConfigurationError
    converted = kind(str(exc))
    converted.__cause__ = exc.__cause__
    return converted
