"""Deterministic random streams: the only source of randomness when a spec is built.

Every tensor is built from ``numpy.random.Generator(PCG64(SeedSequence(key)))``
where the key is the spec's seed followed by a purpose tag and an index (row,
batch, head...).  Separate streams per purpose and per slab mean that shrinking
one part of a spec (fewer rows, no mask) leaves the numbers in the other parts
unchanged, so a shrunk counterexample still shows the same values.

Only bit-exact operations are applied to the drawn numbers afterwards (+, *,
ldexp, comparisons, clipping): no vectorized exp/log/pow, whose SIMD
implementations differ between CPUs and would break bit-for-bit replay.
"""

from __future__ import annotations

import numpy as np

# Purpose tags.  Never renumber them: stored specs replay through these values.
VALUES = 1
MASK = 2
INDEX_WIDTH = 3  # which index-width length a probe row takes (strategies.lengths)
LONG_LENGTH = 4  # which length of its kind a long-row probe takes (strategies.lengths)
BULK = 5  # blocks of rows or (batch, head) pairs past values.BULK_FROM (values.sample_groups)
Q = 11
K = 12
V = 13

SEED_MAX = 2**32 - 1


def stream(seed: int, *keys: int) -> np.random.Generator:
    """A generator determined by ``seed`` and the non-negative integer ``keys``."""
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence([int(seed), *map(int, keys)])))
