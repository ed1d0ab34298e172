"""Adversarial sequence lengths.

Blocked kernels go wrong at the edges of their tiling: a length of one, a prime
(never a multiple of any tile), one short of or one over a power of two or a
block size (a ragged final tile with a single live lane, or one dead lane), two or
three over one (a tail narrower than a vector load), the largest length allowed.
Block sizes are the powers of two of Triton tiles and the other widths
(``ODD_TILES``) of CUDA and hand-written tiles; the common multiples (and one either side)
fill the last tile of several of them at once.  :func:`lengths` draws a *kind* of length first and then
a length of that kind, so every kind is reached often however wide the range.

Kinds are listed simplest first and each kind's candidates run from small to
large, so shrinking moves towards short, plain lengths.  :func:`long_length` gives
the rare long rows (up to 16385) of the same kinds at the edges of long tiles
(512..4096), and :func:`index_width_length` lengths at the edges of 16-bit indexing.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import lru_cache

from hypothesis import strategies as st
from hypothesis.strategies import SearchStrategy

from strategies import _rng
from strategies._choices import rare
from strategies._validation import check_argument, check_positive_int
from strategies.features import BLOCKS, ODD_TILES

#: Block sizes the block-multiple kinds draw from: a ragged tail is relative to the tile.
TILE_WIDTHS = BLOCKS + ODD_TILES
#: Tails of the block-multiple-plus-few kind.
FEW = (2, 3)

LENGTH_KINDS = (
    "small",
    "power-of-two",
    "power-of-two-minus-one",
    "power-of-two-plus-one",
    "prime",
    "block-multiple",
    "block-multiple-minus-one",
    "block-multiple-plus-one",
    "block-multiple-plus-few",
    "common-multiple",
    "common-multiple-minus-one",
    "common-multiple-plus-one",
    "maximum",
    "any",
)

# Sieving beyond this is slow and pointless: a primality test per draw takes over.
_SIEVE_LIMIT = 1 << 20


def is_prime(n: int) -> bool:
    if n < 2:
        return False
    if n < 4:
        return True
    if n % 2 == 0:
        return False
    return all(n % d for d in range(3, math.isqrt(n) + 1, 2))


@lru_cache(maxsize=64)
def _primes(lo: int, hi: int) -> tuple[int, ...]:
    hi = min(hi, _SIEVE_LIMIT)
    if hi < 2:
        return ()
    sieve = bytearray([1]) * (hi + 1)
    sieve[0:2] = b"\x00\x00"
    for p in range(2, math.isqrt(hi) + 1):
        if sieve[p]:
            sieve[p * p :: p] = bytearray(len(range(p * p, hi + 1, p)))
    return tuple(n for n in range(max(lo, 2), hi + 1) if sieve[n])


def _powers_of_two(lo: int, hi: int, delta: int, k_min: int) -> tuple[int, ...]:
    out = []
    k = k_min
    while (1 << k) + delta <= hi:
        if (1 << k) + delta >= lo:
            out.append((1 << k) + delta)
        k += 1
    return tuple(out)


def _multiplier_range(block: int, delta: int, lo: int, hi: int) -> tuple[int, int]:
    """Multipliers m >= 1 with m*block + delta in [lo, hi] (empty when first > last)."""
    first = max(1, -((delta - lo) // block))  # ceil((lo - delta) / block)
    last = (hi - delta) // block
    return first, last


@lru_cache(maxsize=64)
def common_multiples(lo: int, hi: int, blocks: tuple[int, ...] = TILE_WIDTHS) -> tuple[int, ...]:
    """The lengths in ``[lo, hi]`` that are multiples of at least two of ``blocks``, one of them
    not a power of two (smallest first): each fills the last tile of several tilings at once.

    A kernel's exact-fit path (the tail that is a whole tile) goes wrong only at multiples of
    its own tile, which the suite does not know; drawn one tile width at a time, a multiple of
    80 came 4 times in 300 draws of ``lengths(1, 300)``, and a softmax whose blocks of 80 lost
    the last entry of a row that fills them passed every seed (fourteenth red team,
    2026-12-07).  240 fills tiles of 16, 48 and 80; 192 of 16, 32, 48, 64, 96 and 192.
    """
    odd = tuple(b for b in blocks if b & (b - 1))
    found = {m for b in odd for m in range(b * max(1, -(-lo // b)), hi + 1, b) if _fills_several(m, blocks)}
    return tuple(sorted(found))


@lru_cache(maxsize=64)
def full_tiles_lengths(limit: int, blocks: tuple[int, ...] = TILE_WIDTHS) -> tuple[int, ...]:
    """Lengths in ``[1, limit]`` that between them fill the last tile of every one of ``blocks``
    that fits (a greedy cover): first the longest that is a multiple of the most of them, then
    the longest that fills the most of those left, and so on.  A kernel tiled by any of them
    ends on a full last tile at one of these lengths: the exact-fit path, whose last key or
    entry a kernel can lose (a softmax in blocks of 80 that dropped the last entry of a row
    filling them, an attention dropping the last key where Nk is a multiple of 80: fourteenth
    red team, 2026-12-07; the same on tiles of 112: fifteenth, 2026-12-08).  (3840, 4032, 2288,
    4000) for 4097: 3840 fills tiles of 16 to 128, 48, 80, 96, 160, 192 and 240, 4032 those of
    112, 144 and 224 too, 2288 176 and 208, 4000 100.  (limit,) where no block fits in it."""
    check_positive_int(limit, "limit")
    left = {b for b in blocks if b <= limit}
    found: list[int] = []
    while left:
        candidates = {m for b in left for m in range(b, limit + 1, b)}
        best = max(candidates, key=lambda m: (sum(m % b == 0 for b in left), m))
        found.append(best)
        left = {b for b in left if best % b}
    return tuple(found) or (limit,)


#: The order in which the dtypes' cells take ``full_tiles_lengths``: each cell of a target tries
#: one length (a probe's simplest case), and three dtypes between them try three.
FULL_TILES_DTYPES = ("float16", "bfloat16", "float32", "float64")


def full_tiles_for(min_length: int, max_length: int, dtype: str) -> int:
    """The one of ``full_tiles_lengths(max_length)`` that ``dtype``'s cell tries (the block-ends
    probes'), or ``max_length`` where that one is below ``min_length``."""
    found = full_tiles_lengths(max_length)
    at = FULL_TILES_DTYPES.index(dtype) if dtype in FULL_TILES_DTYPES else 0
    full = found[at % len(found)]
    return full if full >= min_length else max_length


def _fills_several(m: int, blocks: tuple[int, ...] = TILE_WIDTHS) -> bool:
    """Whether ``m`` is a multiple of two or more of ``blocks``, one of them not a power of two."""
    return m >= 1 and sum(m % w == 0 for w in blocks) >= 2 and any(m % w == 0 for w in blocks if w & (w - 1))


def length_features(n: int) -> tuple[str, ...]:
    """Features of a length: ``len:1``, ``len:prime``, ``len:2^k±1``, ``len:multB±1``,
    ``len:odd-tile-edge``, ``len:tail2-3``, ``len:multi-tile-edge``."""
    found = []
    if n == 1:
        found.append("len:1")
    if is_prime(n):
        found.append("len:prime")
    if n >= 2 and n & (n - 1) == 0:
        found.append("len:2^k")
    if n >= 3 and (n + 1) & n == 0:
        found.append("len:2^k-1")
    if n >= 3 and (n - 1) & (n - 2) == 0:
        found.append("len:2^k+1")
    for b in BLOCKS:
        if n % b == 0:
            found.append(f"len:mult{b}")
        if (n + 1) % b == 0:
            found.append(f"len:mult{b}-1")
        if n > b and (n - 1) % b == 0:
            found.append(f"len:mult{b}+1")
    if any(n >= b - 1 and n % b in (b - 1, 0, 1) for b in ODD_TILES):
        found.append("len:odd-tile-edge")
    if any(n > b and n % b in FEW for b in TILE_WIDTHS):
        found.append("len:tail2-3")
    if any(_fills_several(m) for m in (n - 1, n, n + 1)):
        found.append("len:multi-tile-edge")
    return tuple(found)


@lru_cache(maxsize=256)
def lengths(min_value: int = 1, max_value: int = 300) -> SearchStrategy[int]:
    """Lengths in ``[min_value, max_value]``, concentrated on the adversarial kinds above.

    Kinds without a candidate in the range are left out, so a narrow range still
    works (``lengths(5, 5)`` always gives 5).
    """
    check_positive_int(min_value, "min_value")
    check_positive_int(max_value, "max_value")
    check_argument(
        min_value <= max_value,
        f"min_value={min_value} must not exceed max_value={max_value}; swap or widen the bounds",
    )
    pickers = _pickers(min_value, max_value, TILE_WIDTHS)
    kinds = tuple(k for k in LENGTH_KINDS if k in pickers)
    # Every kind costs the same two choices (kind, index): Hypothesis orders
    # examples by choice count before anything else, so equal costs leave the
    # kind order, simplest first, to decide where shrinking goes.  The index is
    # reduced modulo the number of candidates; 0 picks the smallest.
    return st.tuples(st.sampled_from(kinds), st.integers(0, _INDEX_MAX)).map(lambda p: pickers[p[0]](p[1]))


_INDEX_MAX = 2**24 - 1


def _pickers(lo: int, hi: int, blocks: tuple[int, ...]) -> dict[str, Callable[[int], int]]:
    """For each kind with candidates in [lo, hi], a map from an index to a length (multiples of ``blocks``)."""
    pickers: dict[str, Callable[[int], int]] = {}

    def from_range(first: int, last: int) -> Callable[[int], int]:
        return lambda u: first + u % (last - first + 1)

    def from_list(items: tuple[int, ...]) -> Callable[[int], int]:
        return lambda u: items[u % len(items)]

    pickers["small"] = from_range(lo, min(hi, lo + 7))
    for kind, delta, k_min in (
        ("power-of-two", 0, 1),
        ("power-of-two-minus-one", -1, 2),
        ("power-of-two-plus-one", 1, 1),
    ):
        candidates = _powers_of_two(lo, hi, delta, k_min)
        if candidates:
            pickers[kind] = from_list(candidates)
    primes = _primes(lo, hi)
    if primes:
        pickers["prime"] = from_list(primes)
    for kind, deltas in (
        ("block-multiple", (0,)),
        ("block-multiple-minus-one", (-1,)),
        ("block-multiple-plus-one", (1,)),
        ("block-multiple-plus-few", FEW),
    ):
        per_block = tuple(
            (b, delta, first, last) for b in blocks for delta in deltas
            for first, last in [_multiplier_range(b, delta, lo, hi)] if first <= last
        )
        if per_block:
            pickers[kind] = _block_picker(per_block)
    for kind, delta in (("common-multiple", 0), ("common-multiple-minus-one", -1), ("common-multiple-plus-one", 1)):
        candidates = tuple(m + delta for m in common_multiples(max(1, lo - delta), hi - delta, blocks))
        if candidates:
            pickers[kind] = from_list(candidates)
    pickers["maximum"] = lambda u: hi
    pickers["any"] = from_range(lo, hi)
    return pickers


def _block_picker(per_block: tuple[tuple[int, int, int, int], ...]) -> Callable[[int], int]:
    # The (block, tail) is picked before the multiplier so that 128 is as likely as 16,
    # although far fewer lengths in the range are multiples of 128.
    def pick(u: int) -> int:
        block, delta, first, last = per_block[u % len(per_block)]
        return block * (first + (u // len(per_block)) % (last - first + 1)) + delta

    return pick


#: Lengths at the edges of 16-bit index arithmetic (int16 wraps past 32767, uint16 past
#: 65535): a kernel that keeps column or key offsets in 16 bits reads the wrong element
#: beyond them (xformers #719).  Drawn rarely and for one row only, past the size profile.
INDEX_WIDTH_LENGTHS = (32767, 32768, 32769, 65535, 65536, 65537)
#: One example in this many draws an index-width length (where the target allows one).
INDEX_WIDTH_ODDS = 12


def index_width_lengths(min_value: int, max_value: int | None, beyond: int) -> tuple[int, ...]:
    """The ``INDEX_WIDTH_LENGTHS`` in ``[min_value, max_value]`` (None: no cap) above ``beyond``."""
    top = max_value if max_value is not None else INDEX_WIDTH_LENGTHS[-1]
    return tuple(n for n in INDEX_WIDTH_LENGTHS if max(min_value, beyond + 1) <= n <= top)


def draws_index_width(draw, candidates: tuple[int, ...]) -> bool:
    """Rarely True (one example in ``INDEX_WIDTH_ODDS``) when there are ``candidates``;
    shrinks towards False (the ordinary lengths)."""
    return bool(candidates) and rare(draw, INDEX_WIDTH_ODDS)


def index_width_length(candidates: tuple[int, ...], seed: int) -> int:
    """The candidate of an example whose random ``seed`` is given, drawn from the seed's own
    stream (``_rng.stream(seed, _rng.INDEX_WIDTH)``).

    Not a choice of its own: Hypothesis reuses small choices between examples, and with
    ``sampled_from`` (or a plain integer modulo 6) a whole 720-example run drew only one or
    two of the six lengths (2026-11-29), 32767 and 32768 above all, while 65536 aliases a
    16-bit wrap (every wrapped offset reads itself back).  The seed's stream spreads them.
    """
    return candidates[int(_rng.stream(seed, _rng.INDEX_WIDTH).integers(len(candidates)))]


#: A CUDA grid's second and third axes hold at most this many blocks (its first, 2**31 - 1).  A
#: kernel that puts the rows, the (batch, head) pairs, the batch or the heads on one of them
#: fails to launch past it ("invalid configuration argument": pytorch #142228 and #146704,
#: xformers #845), or, its grid clamped, leaves the rest unwritten.
GRID_AXIS_LIMIT = 65535
#: Counts of the grid probes: one and two past the limit, and past 2, 4 and 16 times it (a
#: kernel that takes a few rows a program has a grid that many times shorter).
GRID_COUNTS = (65536, 65537, 131073, 262145, 1048577)


def grid_counts(most: int) -> tuple[int, ...]:
    """The ``GRID_COUNTS`` of at most ``most``, smallest first (empty below 65536)."""
    return tuple(n for n in GRID_COUNTS if n <= most)


#: Tiles of kernels that walk a long row in blocks, or split it between programs: a
#: block loop, a chunked (split-row) reduction and a separate long-row path all go wrong
#: at multiples of these, one short of them or one over.
LONG_BLOCKS = (512, 1024, 2048, 4096)
#: The longest row of the long-row probes: 2**14 + 1, one past a power of two that
#: kernels commonly take as the top of one code path, and cheap for the float64 oracle
#: on low-precision rows (float64 rows take mpmath; its size profile keeps them shorter).
LONG_LENGTH_MAX = 16385
#: Kinds of long lengths, simplest first.  No common multiples: LONG_BLOCKS are powers of two,
#: whose common multiples are the block multiples.  No "small": a length just past the caller's
#: maximum sits on no tiling edge in particular.  The maximum first: a forced long-row probe
#: (the probe round's one example) is then the longest row, one past a power of two, where a
#: kernel's last path starts.  With powers of two first it was a row of 512..16384, and our
#: Triton softmax's split-row path (rows past 16384) went unchecked on the CPU: a copy whose
#: chunk merge dropped the chunks' weights passed a 100-example search (2026-12-03).
LONG_LENGTH_KINDS = ("maximum",) + tuple(k for k in LENGTH_KINDS
                                         if k not in ("small", "maximum") and not k.startswith("common-multiple"))


def long_length_kinds(min_value: int, max_value: int) -> tuple[str, ...]:
    """The ``LONG_LENGTH_KINDS`` with a candidate in ``[min_value, max_value]``, simplest first."""
    pickers = _long_pickers(min_value, max_value)
    return tuple(k for k in LONG_LENGTH_KINDS if k in pickers)


def long_length(min_value: int, max_value: int, kind: str, seed: int) -> int:
    """A long length of ``kind`` in ``[min_value, max_value]``, for the example whose random
    ``seed`` is given: like :func:`lengths` (powers of two and one either side, primes, the
    maximum, any), but the block multiples (and one either side) are of ``LONG_BLOCKS``,
    the tiles of blocked loops over rows of thousands of entries.

    The kind is the caller's choice (it shrinks, simplest first); which candidate of the
    kind comes from the seed's own stream (``_rng.stream(seed, _rng.LONG_LENGTH)``), as in
    :func:`index_width_length`.  Drawn as a choice, the index favoured small values (300
    draws of ``lengths``-style (kind, index) pairs over 301..16385 gave 301..513 a quarter
    of the time) and Hypothesis reused earlier examples' indices; from the seed, every
    candidate of the kind is equally likely, those above 4096 as much as those just past
    the caller's maximum.
    """
    pickers = _long_pickers(min_value, max_value)
    check_argument(kind in pickers, f"no {kind!r} length in [{min_value}, {max_value}]; use one of {tuple(pickers)}")
    return pickers[kind](int(_rng.stream(seed, _rng.LONG_LENGTH).integers(_INDEX_MAX + 1)))


@lru_cache(maxsize=64)
def _long_pickers(lo: int, hi: int) -> dict[str, Callable[[int], int]]:
    check_positive_int(lo, "min_value")
    check_positive_int(hi, "max_value")
    check_argument(lo <= hi, f"min_value={lo} must not exceed max_value={hi}; swap or widen the bounds")
    pickers = _pickers(lo, hi, LONG_BLOCKS)
    return {k: pickers[k] for k in LONG_LENGTH_KINDS if k in pickers}


def long_length_range(min_value: int, max_value: int | None, beyond: int) -> tuple[int, int] | None:
    """The range of long-row lengths above ``beyond`` within ``[min_value, max_value]``
    (None: no cap) and up to ``LONG_LENGTH_MAX``; None when it is empty."""
    lo = max(min_value, beyond + 1)
    hi = LONG_LENGTH_MAX if max_value is None else min(max_value, LONG_LENGTH_MAX)
    return (lo, hi) if lo <= hi else None


#: Past this many elements a tensor's element offsets no longer fit a signed 32-bit int
#: (its byte offsets stopped fitting at 2**31 bytes, earlier still).  A kernel that forms
#: ``row * stride`` or ``pid * block`` in int32 (Triton's program ids and small integer
#: arguments are int32) reads and writes before the tensor past it: an illegal address, or
#: another allocation's memory.  The wide-offsets probes (``softmax_cases``,
#: ``attention_cases``) cross it by at least one repetition of their drawn block.
WIDE_OFFSET_ELEMENTS = 2**31
#: Past this many elements float32 no longer holds every element offset (2**24 + 1 is the first
#: integer it cannot): an offset formed in float32 (positions made as a float tensor, a flat
#: index scaled or reduced in float) rounds an odd offset to an even neighbour, and the element
#: read or written is the one beside it.  The wide-offsets probe crosses it on the CPU, where
#: 2**31 elements (8 GiB a float32 tensor) are out of reach; on CUDA devices it crosses 2**31,
#: and so this too.
FLOAT_OFFSET_ELEMENTS = 2**24


def wide_elements_or_default(wide_elements: int | None) -> int:
    """A strategy's ``wide_elements`` argument checked: ``FLOAT_OFFSET_ELEMENTS`` or
    ``WIDE_OFFSET_ELEMENTS`` (None: the latter, read now, so that tests may narrow it)."""
    past = WIDE_OFFSET_ELEMENTS if wide_elements is None else wide_elements
    check_argument(past in (FLOAT_OFFSET_ELEMENTS, WIDE_OFFSET_ELEMENTS),
                   f"wide_elements must be lengths.FLOAT_OFFSET_ELEMENTS ({FLOAT_OFFSET_ELEMENTS}) or "
                   f"lengths.WIDE_OFFSET_ELEMENTS ({WIDE_OFFSET_ELEMENTS}), got {wide_elements!r}")
    return past


def offset_features(elements: int) -> tuple[str, ...]:
    """The offset features of an input of ``elements`` (its largest tensor's): past the integers
    float32 holds exactly, past a signed 32-bit int."""
    return (("offsets:float-exact",) if elements > FLOAT_OFFSET_ELEMENTS else ()) + (
        ("offsets:wide",) if elements > WIDE_OFFSET_ELEMENTS else ())


def wide_repetitions(block_elements: int, past: int | None = None) -> int:
    """How many times a block of ``block_elements`` is repeated so that the whole passes
    ``past`` elements (None: ``WIDE_OFFSET_ELEMENTS``; or ``FLOAT_OFFSET_ELEMENTS``) by at least
    one whole block (every element of the last repetition lies past it) and by less than two."""
    past = WIDE_OFFSET_ELEMENTS if past is None else past
    if block_elements < 1:
        raise ValueError("block_elements must be >= 1")
    if past < 1:
        raise ValueError("past must be >= 1")
    return past // block_elements + 2


#: Counts of rows (softmax) or heads (attention) for the block the wide-offsets probes repeat.
#: A block of P rows repeated along the rows hides a read of row r - M in place of row r for
#: every M that P divides: the same numbers are there.  The wraps to fear are powers of two
#: (offsets and indices taken mod 2**16, 2**31, 2**32) and a grid axis's 65535 = 3 * 5 * 17 *
#: 257; these primes divide none of them.  (A block of 3 rows, or 1, hid a row index taken
#: mod 65535 from a blind mutant at every seed: ninth red team, 2026-12-06.)  Since P is odd, a
#: block of P rows of 2**k entries is no power of two long either, so no offset wrap lines a
#: repetition up with itself.
WRAP_REVEALING_COUNTS = (7, 11, 13)


def off_powers_of_two(count: int, entries_each: int) -> int:
    """``count`` (of rows, ``entries_each`` entries each), or 3 where ``count * entries_each``
    is a power of two (then 3 * 2**k): a block of 2**k entries would line its repetitions up
    with every power-of-two wrap (offsets taken mod 2**31, or 2**30 as byte offsets of 16-bit
    data), and a wrapped read would find the same numbers."""
    total = count * entries_each
    return 3 if total & (total - 1) == 0 else count
