"""The ``sagacity`` command line: :func:`main` (the script's entry point) and :func:`cli`.

The group and the options and helpers its commands share are in :mod:`.base`; each area's
commands in a module of their own, imported here so that every group is registered on
:func:`cli` once this package is imported: :mod:`.journal`, :mod:`.saga`, :mod:`.approvals`,
:mod:`.audit`, :mod:`.db`, :mod:`.demo`, :mod:`.serve`, :mod:`.erase` (``saga erase``,
``journal rewrap-keys``).
"""

from __future__ import annotations

from collections.abc import Sequence

from . import approvals, audit, db, demo, erase, journal, saga, serve  # noqa: F401 - each registers its group on `cli`
from .base import cli

__all__ = ["cli", "main"]


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of the ``sagacity`` script."""
    cli.main(args=list(argv) if argv is not None else None, prog_name="sagacity")
