"""How the tests start other processes.

* ``subprocess`` children (``python -m module ...``, ``python script.py ...``: the examples, the
  CLI, MCP servers) start as :func:`python_command` ``(*args)``: a new interpreter each.
  (A fork server that started them from a process with the SDK imported saved 10-11 % of the
  suite's wall time on 2 cores, too little for 290 lines of its own: it was removed.)
* ``multiprocessing`` children (the crash, lease, claim and fencing tests) come from
  :func:`context`: the stdlib ``forkserver`` with :data:`PRELOAD` imported once, so a child
  costs a fork, not a new interpreter importing the SDK (about 2 s of CPU each). Each child is
  still a separate process with its own memory, file descriptors and event loop.
  ``SAGACITY_TEST_FORKSERVER=0`` makes it the ``spawn`` context: a new interpreter per child;
  it changes only how long the suite takes, never what a test checks.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
from multiprocessing.context import BaseContext

PRELOAD = ["agents", "sagacity_agents", "sagacity_agents.sdk", "tests.crash.app"]
"""Imported by the forkserver before its first fork. One list for every test: the server starts
once per test process, with the list of whichever test asks first."""

FORKSERVER_SWITCH = "SAGACITY_TEST_FORKSERVER"
"""``0``: :func:`context` is the ``spawn`` context, not the preloading forkserver."""


def python_command(*args: str) -> list[str]:
    """The command line that runs this interpreter with ``args`` (``[sys.executable, *args]``)."""
    return [sys.executable, *args]


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
