"""The order a benchmark's variants run in: a fresh draw every round (T-04).

What ran just before a run changes its speed on a shared host (caches, the disk's write-back, a
neighbour's burst), so a fixed order, or a rotation of one, keeps every variant's predecessor and
biases the comparison. Each round's order is a permutation drawn from one seeded generator: the
same seed gives the same orders (a run can be repeated), and the orders are returned so a result
can say what ran when.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

__all__ = ["round_orders"]


def round_orders(names: Sequence[str], rounds: int, seed: int = 1) -> list[list[str]]:
    """One order of ``names`` per round, each a fresh permutation.

    Args:
        names: the variants (distinct).
        rounds: how many rounds (warm-up rounds included).
        seed: the generator's seed.

    Returns:
        ``rounds`` lists, each holding every name once.
    """
    rng = random.Random(seed)
    return [rng.sample(list(names), len(names)) for _ in range(rounds)]
