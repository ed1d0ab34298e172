"""The fixed vocabulary of adversarial features a generated case can carry.

A case lists the features present in it (``case.features``); the engine turns
each into a ``hypothesis.event`` so a run's statistics show which adversarial
situations were exercised.  The vocabulary is closed and listed here in full so
that a coverage report can show features that were never hit as zeros.

Naming: ``group:detail``.  Length features (``len:``) describe the softmax row
length, and for attention the key length Nk (the length of each softmax row
inside attention).

=====================  =================================================================
len:1                  length one: softmax of a single entry must be exactly 1
len:prime              prime length: never a multiple of any block or vector width
len:2^k / 2^k-1 / 2^k+1   at / just below / just above a power of two (k >= 1, >= 2, >= 1)
len:multB[-1|+1]       an exact multiple of B (16, 32, 64, 128), or one short / one over:
                       the ragged last tile of a blocked kernel; every B that applies is listed
len:odd-tile-edge      a multiple of a tile width that is not a power of two (48, 80, 96, 100,
                       160, 192), or one short / one over it
len:tail2-3            two or three past a multiple of any of those tiles or of B: a tail
                       narrower than a 4-wide vector load, which a kernel may pad
len:multi-tile-edge    a multiple of two or more tile widths, one not a power of two (240: 16,
                       48 and 80), or one short / one over it: several tilings' last tiles at once
shape:1d               softmax input of shape (length,): one row, no row dim
shape:3d               softmax input of shape (batch, rows, length)
shape:4d               softmax input of shape (batch, heads, rows, length): two leading dims to flatten
rows:many              softmax input of more than 32 rows in all: more rows than a persistent
                       grid has programs, so each program takes several rows in turn
rows:grid              softmax input of more than 65535 rows in all: past a CUDA grid axis
                       (the grid-rows probe)
offsets:wide           an input of more than 2**31 elements: offsets past a signed 32-bit int
                       (the wide-offsets probes)
offsets:float-exact    an input of more than 2**24 elements: offsets past the integers float32
                       holds exactly (the wide-offsets probes; on the CPU only this far)
len:long               softmax row longer than 1024: several blocks of a long-row tiling
values:explicit        small input drawn element by element (spec holds the values)
rows:mixed-ranges      rows of one matrix drawn from different value recipes
rows:shifted           neighbouring rows shifted apart past exp's range (many-rows cases): a
                       maximum or sum shared or carried between rows loses a whole row
values:narrow          float32 or float64 values that are all numbers of the next narrower format
                       (bfloat16, float32): a dispatch that then runs the narrower kernel is off
values:spread-ladder   near-uniform rows of every spread from an ulp to 2**-4 (the spread-ladder
                       probe): a "uniform row" shortcut below any threshold is off by the spread
mag:normal ...         the value recipe of some row (see ``strategies.values``)
mag:tiny-scale         spread <= 1e-3 (values nearly equal: softmax nearly uniform)
mag:huge-scale         spread >= 1e4 (softmax nearly one-hot, exp overflow without max-shift)
mask:random            random -inf entries / False entries
mask:leading-block     the first 16/32/64/128 entries of every row masked
mask:causal            causal (triangular) pattern, possibly offset
mask:sliding-window    band of a fixed width ending at the diagonal
mask:key-padding       the last k entries masked, k varying by row or batch
mask:left-padding      key padding at the start instead: the first k entries masked
mask:flipped           attention: a structured mask with an entry off its pattern inside it
                       (MaskSpec.flips)
mask:fully-masked-row  some row has every entry masked (the 0/0 case)
mask:single-unmasked-row  some row has exactly one entry unmasked
mask:dense             at least 90 % of all entries masked
special:nan / +inf / neg-zero   a NaN, +inf or -0.0 entry placed in the input
layout:noncontiguous   some input is not contiguous in memory
layout:misaligned      some input starts one element past its allocation (contiguous but misaligned)
layout:<name>          the specific non-default layout used
attn:mha/gqa/mqa       Hq == Hkv / Hkv a proper divisor of Hq (> 1) / Hkv == 1 < Hq
attn:nq<nk, nq>nk      query and key lengths differ
attn:decode            a single query (Nq == 1)
attn:causal            causal flag set
attn:bool-mask         boolean mask given
attn:causal+mask       both at once
attn:long-keys         Nk >= 512 (many key blocks; the size profiles stop below)
attn:long-queries      Nq >= 512 (many query tiles; the CPU size profile stops below)
attn:index-width       Nk >= 32767, at the edge of 16-bit key offsets
attn:many-heads        B * Hq >= 16 (a persistent grid's programs take several pairs)
attn:grid-heads        B * Hq > 65535: past a CUDA grid axis (the grid-heads probe)
attn:many-tiles        Nq, Nk >= 260 and more (pair, 64-query tile) items than 132 SMs: many query
                       tiles against many key blocks over many pairs (the many-tiles probe)
mask-shape:<shape>     broadcast shape of the boolean mask: (Nq,Nk), (1,1,Nq,Nk),
                       (B,1,Nq,Nk), (1,Hq,Nq,Nk), (B,Hq,Nq,Nk), (B,1,1,Nk), (B,Hq,1,Nk), and 3-d
                       (1,Nq,Nk), (Hq,Nq,Nk), and over the queries alone (Nq,1), (B,1,Nq,1),
                       (B,Hq,Nq,1)
mask-layout:<name>     the mask tensor sliced from a larger one, transposed, or expanded
                       with zero strides
hdim:small             head dim <= 8
hdim:pow2 / non-pow2   head dim a power of two or not (40, 72, 80, 96, 120, ...)
hdim:large             head dim >= 160
hdim:over-256          head dim > 256 (257, 512)
scale:default          scale = 1/sqrt(D)
scale:explicit         an explicit scale; also zero, tiny (<= 1e-3), huge (>= 1e2), negative
q:/k:/v:<recipe>       the value recipe of Q, K or V (k:key-spike, v:ends-opposed: the absorption probe)
qk:one-hot             estimated spread of the scores across keys >= 100: softmax is one-hot
qk:flat                estimated spread <= 1e-3: softmax is uniform
dtype:<name>           the storage dtype
=====================  =================================================================
"""

from __future__ import annotations

from collections.abc import Iterable

from verify.dtypes import FORMATS

BLOCKS = (16, 32, 64, 128)
#: Tile widths that are not powers of two: CUDA and PyTorch kernels tile by multiples of 16
#: (every one up to 240, as head-dim, query and key tiles do: FlashAttention's take 80, 112,
#: 144, 176, 192, 224 for some head dims) and hand-written loops by round numbers (100).  A
#: ragged tail, or a last tile filled exactly, is relative to the kernel's tile, whatever it is.
#: Until 2026-12-08 the list stopped at 48, 80, 96, 100, 160 and 192, and blind mutants whose
#: exact-fit path on tiles of 112 lost the last tile lived in 16 cells of 18 (softmax and
#: attention, fifteenth red team).
ODD_TILES = (48, 80, 96, 100, 112, 144, 160, 176, 192, 208, 224, 240)

_DTYPE = tuple(f"dtype:{name}" for name in FORMATS)

_LENGTH = ("len:1", "len:prime", "len:2^k", "len:2^k-1", "len:2^k+1") + tuple(
    f"len:mult{b}{suffix}" for b in BLOCKS for suffix in ("", "-1", "+1")
) + ("len:odd-tile-edge", "len:tail2-3", "len:multi-tile-edge")

_MASK = (
    "mask:random",
    "mask:leading-block",
    "mask:causal",
    "mask:sliding-window",
    "mask:key-padding",
    "mask:left-padding",
    "mask:fully-masked-row",
    "mask:single-unmasked-row",
    "mask:dense",
)

_SPECIAL = ("special:nan", "special:+inf", "special:neg-zero")

SOFTMAX_VALUE_KINDS = (
    "normal",
    "uniform",
    "constant",
    "ties",
    "dominant",
    "cancellation",
    "near-max",
    "very-negative",
    "full-range",
    "outliers",
    "subnormal-output",
    "drift",
    "plateau",
    "near-uniform",
)
#: Q, K and V recipes (``seq-drift``: a trend along the sequence; ``slab-levels``: each (batch,
#: head) at its own magnitude; see ``strategies.values``).
QK_VALUE_KINDS = ("normal", "uniform", "constant", "outliers", "cancellation", "seq-drift", "slab-levels")
#: K recipes only the absorption probe draws (see ``strategies.attention``).
PROBE_K_VALUE_KINDS = ("key-spike",)
#: V recipes only the absorption probe draws (key-spike: its far-tail cases, the spike key's V at 0).
PROBE_V_VALUE_KINDS = ("ends-opposed", "key-spike")
V_VALUE_KINDS = QK_VALUE_KINDS + ("full-range", "near-underflow")
#: K recipes: Q's, and copies of one key (near-)tied in every query's scores (``key-ties``).
K_VALUE_KINDS = QK_VALUE_KINDS + ("key-ties",)
#: Q, K or V recipes with a stretch of positions exactly 0 (see ``strategies.attention``).
ZERO_RUN_KINDS = ("zero-run",)

#: Softmax layouts, simplest first.  "misaligned" stays last: its feature is
#: ``layout:misaligned`` alone, and SOFTMAX_FEATURES lists ``layout:<name>`` for the others.
SOFTMAX_LAYOUTS = (
    "contiguous", "row-padded", "transposed", "strided", "batch-sliced", "lead-permuted", "lead-broadcast",
    "row-broadcast", "misaligned"
)
#: Softmax layouts a 1-D input can have (there is no row dim to transpose).
SOFTMAX_VECTOR_LAYOUTS = ("contiguous", "row-padded", "strided", "misaligned")
#: Softmax layouts that only differ from contiguous for a 3-D or 4-D input.
SOFTMAX_LEADING_LAYOUTS = ("batch-sliced", "lead-permuted", "lead-broadcast")
#: Attention layouts, simplest first; "misaligned" last, as for softmax.
ATTENTION_LAYOUTS = ("contiguous", "bnhd", "head-dim-padded", "strided-seq", "dim-major", "seq-sliced",
                     "batch-broadcast", "head-broadcast", "misaligned")
#: Attention layouts with a zero stride (``Capabilities.zero_strides``).
ATTENTION_BROADCAST_LAYOUTS = ("batch-broadcast", "head-broadcast")
#: Layouts K and V take together, views of one buffer: ``kv-packed``, (B, Nk, 2, Hkv, D), K at
#: [:, :, 0] and V at [:, :, 1], as a fused KV projection's output (FlashAttention's kvpacked
#: functions take it so).
ATTENTION_KV_LAYOUTS = ("kv-packed",)

#: Features a softmax case can carry.
SOFTMAX_FEATURES: tuple[str, ...] = (
    _DTYPE
    + _LENGTH
    + ("shape:1d", "shape:3d", "shape:4d", "rows:many", "rows:grid", "offsets:wide", "offsets:float-exact", "len:long",
       "values:explicit",
       "rows:mixed-ranges", "rows:shifted", "values:narrow", "values:spread-ladder")
    + tuple(f"mag:{k}" for k in SOFTMAX_VALUE_KINDS)
    + ("mag:tiny-scale", "mag:huge-scale")
    + _MASK
    + _SPECIAL
    + ("layout:noncontiguous", "layout:misaligned")
    + tuple(f"layout:{name}" for name in SOFTMAX_LAYOUTS[1:-1])
)

#: Features an attention case can carry.
ATTENTION_FEATURES: tuple[str, ...] = (
    _DTYPE
    + _LENGTH
    + ("attn:mha", "attn:gqa", "attn:mqa", "attn:nq<nk", "attn:nq>nk", "attn:decode")
    + ("attn:causal", "attn:bool-mask", "attn:causal+mask")
    + ("attn:long-keys", "attn:long-queries", "attn:index-width", "attn:many-heads", "attn:grid-heads",
       "attn:many-tiles", "offsets:wide", "offsets:float-exact")
    + tuple(f"mask-shape:{s}" for s in ("qk", "11qk", "b1qk", "1hqk", "bhqk", "1qk", "hqk", "b11k", "bh1k",
                                         "q1", "b1q1", "bhq1"))
    + tuple(f"mask-layout:{s}" for s in ("sliced", "transposed", "expanded"))
    + _MASK
    + ("mask:flipped",)  # attention only (strategies.attention.FLIP_ODDS)
    + ("hdim:small", "hdim:pow2", "hdim:non-pow2", "hdim:large", "hdim:over-256")
    + ("scale:default", "scale:explicit", "scale:zero", "scale:tiny", "scale:huge", "scale:negative")
    + tuple(f"q:{k}" for k in QK_VALUE_KINDS + ZERO_RUN_KINDS)
    + tuple(f"k:{k}" for k in K_VALUE_KINDS + PROBE_K_VALUE_KINDS + ZERO_RUN_KINDS)
    + tuple(f"v:{k}" for k in V_VALUE_KINDS + PROBE_V_VALUE_KINDS + ZERO_RUN_KINDS)
    + ("qk:one-hot", "qk:flat")
    + _SPECIAL
    + ("layout:noncontiguous", "layout:misaligned")
    + tuple(f"layout:{name}" for name in ATTENTION_LAYOUTS[1:-1] + ATTENTION_KV_LAYOUTS)
)

#: Every feature name any case can carry, in a stable order.
FEATURES: tuple[str, ...] = tuple(dict.fromkeys(SOFTMAX_FEATURES + ATTENTION_FEATURES))

_RANK = {name: i for i, name in enumerate(FEATURES)}


def ordered(found: Iterable[str]) -> tuple[str, ...]:
    """``found`` deduplicated in vocabulary order; an unknown name is a bug here, so it raises."""
    names = set(found)
    unknown = names - _RANK.keys()
    if unknown:
        raise AssertionError(f"features outside the vocabulary: {sorted(unknown)}")
    return tuple(sorted(names, key=_RANK.__getitem__))
