"""How the tests start other processes, and the switches that make it the plain (slower) way.

Two fast paths, each a process that has imported the Agents SDK once so that a child costs a
fork, not a new interpreter importing it (about 2 s of CPU each). Each child is still a separate
process with its own memory, file descriptors and event loop, killed by the kernel when a test
kills it.

* ``subprocess`` children (``python -m module ...``, ``python script.py ...``: the examples, the
  CLI, MCP servers) start as ``zygote.command(*args)`` instead of ``[sys.executable, *args]``:
  ``tests/zygote.py``'s fork server runs them. ``SAGACITY_TEST_ZYGOTE=0`` in the environment
  makes ``zygote.command`` return ``[sys.executable, *args]``: the same children, each a new
  interpreter.
* ``multiprocessing`` children (the crash, lease, claim and fencing tests) come from
  :func:`context`: the stdlib ``forkserver`` with :data:`PRELOAD` imported once.
  ``SAGACITY_TEST_FORKSERVER=0`` makes it the ``spawn`` context: a new interpreter per child.

Either switch changes only how long the suite takes, never what a test checks:
``SAGACITY_TEST_ZYGOTE=0 SAGACITY_TEST_FORKSERVER=0 pytest -n auto`` is the suite without either.
"""

from __future__ import annotations

import multiprocessing
import os
from multiprocessing.context import BaseContext

PRELOAD = ["agents", "sagacity_agents", "sagacity_agents.sdk", "tests.crash.app"]
"""Imported by the forkserver before its first fork. One list for every test: the server starts
once per test process, with the list of whichever test asks first."""

ZYGOTE_SWITCH = "SAGACITY_TEST_ZYGOTE"
"""``0``: ``subprocess`` children start as a new interpreter, not through ``tests/zygote.py``."""

FORKSERVER_SWITCH = "SAGACITY_TEST_FORKSERVER"
"""``0``: :func:`context` is the ``spawn`` context, not the preloading forkserver."""


def zygote_enabled() -> bool:
    """Whether ``zygote.command`` runs children through the fork server (``SAGACITY_TEST_ZYGOTE``
    is not ``0``)."""
    return os.environ.get(ZYGOTE_SWITCH, "1") != "0"


def context() -> BaseContext:
    """The ``forkserver`` context, its server preloading :data:`PRELOAD` (``spawn`` when
    ``SAGACITY_TEST_FORKSERVER=0``).

    A forkserver's child gets the forkserver's environment (the test process's when the server
    started), not the test's ``os.environ`` at ``start()``: pass what differs as arguments."""
    if os.environ.get(FORKSERVER_SWITCH, "1") == "0":
        return multiprocessing.get_context("spawn")
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)
    return ctx
