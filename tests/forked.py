"""The multiprocessing context of the multi-process tests: a forkserver that has imported the
Agents SDK and this package once, so that a child costs a fork, not a new interpreter importing
them (about 2 s of CPU each). Each child is still a separate process with its own memory, file
descriptors and event loop, killed by the kernel when a test kills it (issue 22)."""

from __future__ import annotations

import multiprocessing
from multiprocessing.context import ForkServerContext

PRELOAD = ["agents", "sagacity_agents", "sagacity_agents.sdk", "tests.crash.app"]
"""Imported by the forkserver before its first fork. One list for every test: the server starts
once per test process, with the list of whichever test asks first."""


def context() -> ForkServerContext:
    """The ``forkserver`` context, its server preloading :data:`PRELOAD`.

    A child gets the forkserver's environment (the test process's when the server started), not
    the test's ``os.environ`` at ``start()``: pass what differs as arguments."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)
    return ctx
