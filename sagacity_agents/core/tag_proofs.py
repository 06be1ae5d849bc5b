"""Entry tags verified on every core while a verify reads and checks: a speed-up, never a verdict.

Under a keyring, verifying a journal is bound by its Ed25519 tag checks (``core.authenticity``:
~8,000 per CPU-second with ``cryptography``, against ~200,000 entries per second for the rest
of the check). ``cryptography`` releases the GIL while it verifies a signature, so
:class:`TagProofs` verifies the tags of the saga read next on a pool of threads, one per core,
while the caller checks the saga before it on its own thread; the check then finds those tags in
its :class:`~.authenticity.TagCache` and does not verify them again.

Only successes are remembered, each keyed by the entry's hash after its bytes were found to hash
to it (``TagCache.unproven``): every fault (a missing, forged or unknown-key tag, a key's role or
revocation, an edited entry) is still found and named by the one sequential check
(``core.evidence.Evidence.check``), exactly as without the pool.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from types import TracebackType
from typing import Any

from .authenticity import TagCache, prove_tags
from .entries import JournalEntry
from .identity import derivation_of
from .signing import Keyring

__all__ = ["MIN_CLAIMS", "TagProofs", "proof_workers"]

MIN_CLAIMS = 16
"""Tags per thread at the least; a saga with fewer than twice as many unverified tags is left to
the check itself (handing them to threads costs more than it saves)."""


def proof_workers() -> int:
    """Threads for tag proofs: the cores this process may run on (``os.sched_getaffinity``
    where the platform has it, else ``os.cpu_count()``); 1 means no pool."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on every platform (macOS, Windows)
        return os.cpu_count() or 1


class TagProofs:
    """A pool of threads verifying entry tags ahead of the check (module doc). A context
    manager: the pool lives from ``with`` to its end.

    Args:
        keyring: the verify keys (``None``: nothing to prove; :meth:`start` does nothing).
        cache: where the check looks up verified tags (the evidence's own).
        journal_id: the id of the journal read (the derivation of each saga's tags,
            ``core.identity``; ``None``: derivation 1).
        workers: threads (``None``: :func:`proof_workers`); 1 or fewer: no pool, the check
            verifies every tag itself.
    """

    def __init__(self, keyring: Keyring | None, cache: TagCache, journal_id: str | None,
                 workers: int | None = None) -> None:
        self.keyring, self.cache, self.journal_id = keyring, cache, journal_id
        self.workers = proof_workers() if workers is None else workers
        self._pool: ThreadPoolExecutor | None = None

    def __enter__(self) -> TagProofs:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def start(self, entries: Sequence[JournalEntry]) -> list[Future[Any]]:
        """Start verifying the tags of one saga's ``entries`` (``seq`` order, as read) that the
        cache does not hold yet, split across the pool; ``[]`` when there is no pool or too
        few tags to be worth it (the check verifies them). The pool is made on first use: a
        saga whose tags this process verified already costs no thread."""
        if self.keyring is None or self.workers <= 1:
            return []
        claims = self.cache.unproven(entries, self.keyring, derivation_of(entries, self.journal_id))
        if len(claims) < 2 * MIN_CLAIMS:
            return []
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="sagacity-tags")
        pieces = min(self.workers, len(claims) // MIN_CLAIMS)
        return [self._pool.submit(prove_tags, claims[i::pieces]) for i in range(pieces)]

    async def finish(self, started: Sequence[Future[Any]]) -> None:
        """Wait for the proofs :meth:`start` began and remember the tags that verified (on the
        caller's thread: the cache is not shared with the pool's threads)."""
        for proof in started:
            self.cache.proven(await asyncio.wrap_future(proof))
