"""The ``sagacity`` command line: the group and its helpers in :mod:`.base`, the approvals and
saga groups in :mod:`.saga`, the audit group in :mod:`.audit`."""

from __future__ import annotations

from . import audit, saga  # noqa: F401 - register the audit, approvals and saga groups
from .base import DB_ENVVAR, UsageFailure, cli, db_option, main, open_journal, with_journal

__all__ = ["DB_ENVVAR", "UsageFailure", "cli", "db_option", "main", "open_journal", "with_journal"]
