"""The Hypothesis-driven search: draw adversarial cases, check each, shrink what fails.

For every dtype a target supports, a Hypothesis property is built on the fly:
draw a case inside the target's capabilities, build its tensors, run
``verify.engine`` on them, record accuracy figures, and raise on a violation so
Hypothesis shrinks it to a minimal counterexample, which is saved as a
replayable artifact.  ``hypothesis.event`` marks each adversarial feature;
``hypothesis.target`` steers the last part of the search (``TARGET_SHARE``) towards the
largest error/tolerance; before it, no shape is repeated more than a few times
(``SHAPE_REPEATS``), nor any row length (``LENGTH_REPEATS``), nor any spec seed
(``SEED_REPEATS``), so that the examples spread over many shapes and draws.
"""

from __future__ import annotations

import math
import random
import time
import zlib
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

import hypothesis
import hypothesis.database
import torch
from hypothesis import HealthCheck, Phase, assume, event, given, settings
from hypothesis import target as hyp_target
from hypothesis.reporting import with_reporter

import strategies
from kernels.registry import Target
from verify import artifacts, engine
from verify.contracts import Violation
from strategies.lengths import FLOAT_OFFSET_ELEMENTS, GRID_AXIS_LIMIT, WIDE_OFFSET_ELEMENTS
from strategies.softmax import ROW_COST
from verify.dtypes import get_format
from verify.metrics import Summary, summarize

SAMPLE_PER_EXAMPLE = 4096  # errors kept per example for the p99 / median estimates
#: The share of a cell's examples (and of its budget) searched before the probe round (see
#: probe_round): bugs the ordinary examples find at once are found as early as without it.
PROBE_ROUND_AT = 0.1
#: The share of a cell's examples run last, in a Hypothesis run with its target phase: it
#: hill-climbs error/tolerance from that run's worst example.  Only there: left in every run,
#: the climb took 119 of 300 examples of one cell to one shape (Nq = Nk = 127, causal), and
#: broken kernels the rest of the search would have met survived (2026-11-30).
TARGET_SHARE = 0.2
#: Hypothesis repeats choices (it splices earlier examples into new ones): a 100-example float16
#: attention cell held 20 distinct key lengths (seed 1, 2026-11-30).  Past this many examples of one shape (see
#: ``shape_signature``), or ``SHAPE_REPEAT_SHARE`` of the run's examples if more, a drawn case
#: is rejected before it runs and Hypothesis draws another: the budget goes to new shapes.
SHAPE_REPEATS = 3
SHAPE_REPEAT_SHARE = 0.02
#: The same for the row length alone (Nk for attention): LENGTH_REPEATS, or LENGTH_REPEAT_SHARE of
#: the run's examples if more.  A kernel's tiling edges follow Nk whatever Nq, the causal flag
#: and the mask are.  A small gain: 100-example float16 attention cells of a reference kernel
#: held 37, 34 and 31 distinct key lengths without this limit and 39, 37 and 34 with it
#: (seeds 1-3, 2026-11-30).
LENGTH_REPEATS = 4
LENGTH_REPEAT_SHARE = 0.03
#: Examples of one spec seed at most in a plain run.  Hypothesis follows each new example with up
#: to five mutations of it (copies of one part of it into another), which keep most of its
#: choices, the seed among them: a 100-example float16 attention cell (seed 1, 2026-11-30) held
#: 44 distinct seeds, and whether a case had a mask came in runs of up to 16 alike; with the
#: limit, 85 (and 87 at seed 2).  The rejected draws cost time: 100-example cells made 370-430
#: calls instead of 155-180, 2.2 s -> 3.7 s for a plain PyTorch softmax and 9.7 s -> 11.7 s for
#: attention (seeds 1-2).
SEED_REPEATS = 1
#: The probes whose cases get the checks that call the target a second time (output reuse,
#: unwritten memory, stream order) at any size, where the first call was quick
#: (engine.ANY_SIZE_CALL_CHECK_S): each runs once a cell, so a buffer a target reuses for large
#: outputs only is still found.  Not the probes sized by the target's speed (the grid probes,
#: many-tiles), whose estimates count one call, nor wide-offsets (a checked copy of each block).
SECOND_CALL_PROBES = ("four-d", "many-rows", "long-row", "plateau-row", "index-width", "zero-scale",
                      "causal-offset", "absorption", "many-heads", "mid-keys", "mid-queries")
#: Probes of the round tried only where the probe named (the pilot, earlier in the round) took
#: at most ``seconds + share * budget`` (its whole check; no limit from the share without a
#: budget), see ``speed_gated_out``:
#: - plateau-row, after long-row: the plateau row repeats the long row's length, and a kernel
#:   under the Triton interpreter took seconds for each, which the campaign's few seconds a
#:   mutant dtype could not spare (a main job on the CPU, 2026-12-05: an interpreted mutant
#:   killed at seeds 1, 2 and the job's in 7-10 examples survived all three).
#: - mixed-row, after many-rows: an 8193-entry row took a kernel under the interpreter 0.8-1.6 s
#:   (many-rows: 0.3 s), again the margin of an interpreted mutant in the main job; a PyTorch
#:   callable on the CPU took 0.03 s for many-rows, 0.2 s for the mixed row.
#: On a GPU each takes milliseconds.
#: - edge-spike, masked-long and block-ends, after long-row: the long row's length again, as plateau-row.
SPEED_GATED_PROBES = {"plateau-row": ("long-row", 1.0, 0.0), "mixed-row": ("many-rows", 0.0, 0.03),
                      "edge-spike": ("long-row", 1.0, 0.0), "masked-long": ("long-row", 1.0, 0.0),
                      "block-ends": ("long-row", 1.0, 0.0)}


def speed_gated_out(probe: str, ran: tuple[str, ...], costs: dict, budget_s: float | None) -> bool:
    """Whether the probe round skips ``probe`` (SPEED_GATED_PROBES): its pilot is among the
    probes ``ran`` tried and its case took longer than allowed, or never finished (``costs``:
    probe -> (probe_work, wall seconds) or None).  A pilot the round did not try gates nothing."""
    if probe not in SPEED_GATED_PROBES:
        return False
    pilot, seconds, share = SPEED_GATED_PROBES[probe]
    if pilot not in ran:
        return False
    cost = costs.get(pilot)
    if cost is None:
        return True
    if budget_s is None and share:
        return False  # without a budget, a share of it sets no limit
    return cost[1] > seconds + share * (budget_s or 0.0)
#: ...and one ordinary case in this many, by its seed (so that a replay and the shrink see the
#: same checks): a pool that hands out a buffer for large outputs only shows on an attention case
#: of the usual sizes, whose probes keep one dimension small (head dims of 1 in their simplest
#: cases).
SECOND_CALL_ODDS = 8
#: After the first part of a cell (PROBE_ROUND_AT), the many-heads probe takes as many (batch,
#: head) pairs as the measured speed (target and oracle) lets it finish in this share of the
#: cell's budget, or in MANY_HEADS_SECONDS without one: MANY_HEADS_MAX_PAIRS at most, the size
#: profile's count at least (see many_heads_pairs).
MANY_HEADS_SHARE = 0.1
MANY_HEADS_SECONDS = 1.0
#: The grid probes (softmax grid-rows, attention grid-heads: more rows or (batch, head) pairs
#: than a CUDA grid axis holds) run after the probe round, and only where the probe before them
#: (many-rows, many-heads: the pilot) says that the largest grid case the target can afford
#: finishes in GRID_SHARE of the cell's budget and in GRID_SECONDS (a GPU target:
#: milliseconds; a plain PyTorch callable on the CPU: about a second; a kernel under the Triton
#: interpreter, at ~18 ms a program: never).
GRID_SHARE = 0.1
GRID_SECONDS = 3.0
#: The work units of the estimate (probe_work): a softmax row costs what ROW_COST entries do
#: (strategies.softmax, the unit its probe_entries counts in), an attention pair what this many
#: scores do (a kernel's fixed cost a program, an oracle's a row).
PAIR_WORK = 256
#: Which probe each grid probe takes its pilot from.
GRID_PILOTS = {"grid-rows": "many-rows", "grid-heads": "many-heads"}
#: The many-tiles probe (attention; strategies.attention.TILES_RUNGS) climbs its rungs after the
#: grid probe, each rung only where the case before it (the mid-keys probe's for the first, then
#: the last rung's; overheads included, so the estimate errs long) says that it finishes within
#: what is left of GRID_SHARE of the cell's budget, or of TILES_SECONDS without one.  On the
#: CPU a whole check (target, oracle in slices, naive comparison) of sdpa-math, float32, causal,
#: ran the first five rungs in 0.40, 1.11, 2.01, 5.96 and 9.60 s (2026-12-01): within
#: TILES_SECONDS a plain PyTorch callable reaches the third, a kernel under the interpreter
#: none.  On a GPU a compiled target's first call on a new shape compiles and autotunes (our Triton kernel about 3 s a
#: shape, compiled FlexAttention 2 s, on the H200 on 2026-12-01): each case's compiling share,
#: its first call's time beyond a second call's, is left out of the estimates and the allowance;
#: without that the mid-keys pilot said 130 s for a first rung that checks in a fraction of one.
TILES_SECONDS = 8.0
#: How the check's time grows with a many-tiles case's work past TILES_CACHE_WORK units
#: (tiles_seconds): as the work to this power.  Fitted to the times above (5.7 M to 77 M units:
#: 24 times the time for 13.6 times the work).
TILES_GROWTH = 1.25
TILES_CACHE_WORK = 2_000_000
#: The probes whose last case times the first rung: of those that ran, the one with the most
#: work, whose time a fixed cost a call (launches, the oracle's setup) weighs least in.  Taking
#: the first that ran (mid-keys), the first rung (260 x 260 over 48 pairs) was put at 8.8 s for
#: ref-blocked-attention in float16 on the H200 (2026-12-03), past its 6 s, and never tried.
#: On a CUDA device the first rung's estimate takes the cell's fastest check (its smallest
#: cases) as the fixed cost a check pays whatever its work, and scales only the rest of the
#: pilot's time (tiles_seconds).  There the fixed cost (launches, synchronisations, the oracle's
#: setup, Python loops over blocks) is most of a check's time up to the rungs' sizes: scaled
#: whole, the mid-keys pilot (16 queries against 4097 keys) put the first rung of
#: ref-blocked-attention at 8.2 s in float32 and 8.8 s in float16 on the H200 (2026-12-04,
#: 2026-12-03), past the 6 s a 60 s cell allows, and with the fixed cost credited every rung up
#: to 4096 x 4096 took 1.4-1.7 s in all.  On the CPU the work itself costs: for
#: ref-naive-attention in float32 (2026-12-04, CPU profile) the pilot took 7-11 ms of which
#: 5.8 ms was the fixed cost, the first rung 0.54-0.59 s; scaled whole the estimate was
#: 0.73-1.09 s, with the fixed cost credited 0.16-0.52 s, too low, so the CPU scales the whole
#: time.  Later rungs scale the whole time of the rung before everywhere: a case of the same
#: shape, where the ratio of the work is the better guide.
TILES_PILOTS = ("mid-keys", "mid-queries")


@dataclass(frozen=True)
class SizeProfile:
    """How big generated cases may get (the oracle runs on CPU in mpmath for undecided rows)."""

    softmax_max_length: int = 300
    softmax_max_rows: int = 8
    attention_max_seq: int = 160
    attention_max_batch: int = 2
    attention_max_heads: int = 4
    head_dims: tuple[int, ...] | None = None
    #: Longest key sequence the strategy's rare probes may draw (None: as the target allows).
    attention_probe_max_seq: int | None = None
    #: Most (batch, head) pairs of the many-heads probe before the target's speed is known, and the
    #: least after (see many_heads_pairs).  On the CPU, Triton kernels run under the interpreter,
    #: one program (one pair) after another: 256 pairs took 4.6 s a call, twice with the
    #: output-reuse check, and the main job's interpreted mutants ran out of budget in that probe
    #: (2026-11-30).  The GPU profile takes 256, past every GPU's SM count.
    attention_many_heads_pairs: int = 64
    #: The zero-scale probe's keys past its usual 259 (attention_cases' zero_scale_keys; 0: none).
    attention_zero_scale_keys: int = 0

    def for_dtype(self, dtype: str) -> "SizeProfile":
        # float64 targets need the mpmath path for every row: keep those cases small.
        if get_format(dtype).name == "float64":
            return SizeProfile(min(self.softmax_max_length, 130), min(self.softmax_max_rows, 4),
                               min(self.attention_max_seq, 12), min(self.attention_max_batch, 2),
                               min(self.attention_max_heads, 2), float64_head_dims(self.head_dims),
                               # Probes up to the mid-keys probe's 4097 keys (16 queries) stay
                               # within the exact fallback's work limit (16 x 4097 x 140 =
                               # 9.2e6 of engine.MAX_FALLBACK_WORK's 2e7); 16-bit index widths
                               # would exceed it and go unmeasured.  A kernel's path for long
                               # sequences is then checked in float64 too: 256, the cap
                               # before, let a float64 kernel that computed past 256 keys in
                               # float32 pass (third red team, 2026-12-04); 4097 took the
                               # float64 reference 30 s a 100-example search against 20 s.
                               attention_probe_max_seq=strategies.attention.MID_KEYS_MAX,
                               attention_many_heads_pairs=self.attention_many_heads_pairs)
        return self


#: The float64 profile's head dims where the size profile names none: small ones, then one
#: past 128 and one past 256 (taken where the target's head_dim_max allows).  Its cases are
#: tiny (at most 12 queries and keys, 2 heads), so a wide head costs the exact path little:
#: 48 rows x 12 keys x (257 + 100) is 2e5 of engine.MAX_FALLBACK_WORK's 2e7.  With dims of at
#: most 40, a float64 kernel that dropped the head dim past 128 passed (seventh red team,
#: 2026-12-05).
FLOAT64_HEAD_DIMS = (1, 2, 3, 8, 16, 24, 40, 160, 257)
FLOAT64_SMALL_HEAD_DIM = 40


def float64_head_dims(profile_dims: tuple[int, ...] | None) -> tuple[int, ...]:
    """The float64 cases' head dims: those of ``profile_dims`` (FLOAT64_HEAD_DIMS if None) up
    to FLOAT64_SMALL_HEAD_DIM, plus its smallest past 128 and its smallest past 256, so that
    every head-dim tier (strategies.attention.HEAD_DIM_TIERS) has at most one wide entry."""
    dims = profile_dims or FLOAT64_HEAD_DIMS
    small = tuple(d for d in dims if d <= FLOAT64_SMALL_HEAD_DIM)
    wide = tuple(min(tier) for tier in ([d for d in dims if 128 < d <= 256], [d for d in dims if d > 256]) if tier)
    return small + wide


PROFILES = {
    "cpu": SizeProfile(),
    # Every new head dim is a new Triton compilation (and autotuning) on the GPU: the GPU
    # profile draws from a short list that still holds non-powers of two and the extremes
    # (512 only for the targets whose head_dim_max allows it).
    "gpu": SizeProfile(softmax_max_length=20_000, softmax_max_rows=16, attention_max_seq=1024,
                       attention_max_batch=2, attention_max_heads=8, head_dims=(16, 40, 64, 72, 128, 256, 512),
                       attention_many_heads_pairs=256,
                       attention_zero_scale_keys=strategies.attention.ZERO_SCALE_LONG_KEYS),
}


#: The most of a first example's time CheckOptions.exempt_warmup leaves out of a budget shorter
#: than it: a Triton autotuning sweep's compiles (7 s in one attention cell's many-tiles probe
#: on the H200), not a first case that is merely large.
WARMUP_CAP_S = 10.0


@dataclass
class CheckOptions:
    dtypes: tuple[str, ...] | None = None  # None: every dtype the target supports
    device: str = "cpu"
    max_examples: int = 100
    seed: int | None = None
    masked_rows: str = "declared"  # engine.MASKED_ROWS_OPTIONS
    timeout: float = engine.DEFAULT_TIMEOUT_S
    artifact_dir: str = str(artifacts.DEFAULT_DIR)
    profile: SizeProfile = field(default_factory=SizeProfile)
    budget_s: float | None = None  # per dtype wall-clock budget (see exempt_warmup)
    #: Leave the cell's first example out of its budget, up to the budget or WARMUP_CAP_S,
    #: whichever is more (None: on any device but the CPU).  On a GPU it pays what is not
    #: search: Triton's compiles and autotuning, torch.compile, the first launches (a Triton
    #: mutant's first float16 example took 1-2 s of its 1 s a dtype on the H200); on the CPU
    #: nothing compiles.
    exempt_warmup: bool | None = None
    database: Any = None  # a Hypothesis ExampleDatabase, or None
    compare_naive: bool = True
    shrink: bool = True  # False: report the first failing example as found (faster kills)
    probe_examples: int = 1  # examples of each rare probe the search tries (see probe_round)
    #: The checks that call the target a second time at any input size (engine.ANY_SIZE_CALL_CHECK_S),
    #: not for small inputs only: the search sets it for its probes' cases (SECOND_CALL_PROBES).
    call_checks_at_any_size: bool = False


@dataclass
class CellResult:
    """Everything measured for one target x op x dtype."""

    target: str
    op: str
    dtype: str
    device: str
    status: str = "passed"  # passed | violated | unsupported | error
    reason: str = ""
    examples: int = 0
    seconds: float = 0.0
    warmup_seconds: float = 0.0  # of ``seconds``, the first example's left out of the budget (exempt_warmup)
    target_seconds: float = 0.0
    oracle_seconds: float = 0.0
    error_unit: str = "ULP"
    max_error: float = 0.0
    max_ratio: float = 0.0
    max_tolerance_seen: float = 0.0
    min_tolerance_seen: float = float("inf")
    normwise_max: float = 0.0
    flash_rule_max: float = 0.0
    flash_rule_over_2: int = 0
    flushed: int = 0
    ill_conditioned: int = 0
    uncertified_rows: int = 0
    negative_zeros: int = 0
    fallback_rows: int = 0
    # the LSE of a target declaring returns_lse: finite rows measured, largest error (units of
    # u * max(1, |LSE|), u the LSE format's unit roundoff) and error / tolerance
    lse_rows: int = 0
    lse_max_error: float = 0.0
    lse_max_ratio: float = 0.0
    features: Counter = field(default_factory=Counter)
    violation: Violation | None = None
    counterexample: str | None = None  # description of the shrunk case
    artifact: str | None = None
    worst_case: str | None = None
    worst_artifact: str | None = None
    cut_by_budget: bool = False
    context_lost: bool = False  # the target killed the CUDA context: this process can run no more CUDA work
    seconds_to_first_failure: float | None = None
    examples_to_first_failure: int | None = None
    grid_probe: str = ""  # what the grid probe (grid-rows, grid-heads) tried, or why not (search.GRID_SHARE)
    wide_probe: str = ""  # what the wide-offsets probe tried, or why not (search.wide_offsets_allowed)
    tiles_probe: str = ""  # the many-tiles probe's rungs tried (attention), or why none (search.TILES_SECONDS)
    probe_round: str = ""  # the probes the round tried, or why it did not run (search.probe_round_note)
    samples: list = field(default_factory=list)  # sampled errors, for distributions
    tolerance_samples: list = field(default_factory=list)

    @property
    def summary(self) -> Summary:
        return summarize(torch.tensor(self.samples, dtype=torch.float64)) if self.samples else Summary(0, 0, 0, 0)


class _StopSavingAfterBudget(hypothesis.database.ExampleDatabase):
    """The cell's example database, except that nothing is saved once the budget is spent.

    Stopping a run raises inside the test, and Hypothesis would record the example in
    flight as a failure: later runs would replay an input that never failed.
    """

    def __init__(self, inner: hypothesis.database.ExampleDatabase, spent) -> None:
        super().__init__()
        self.inner, self.spent = inner, spent

    def save(self, key: bytes, value: bytes) -> None:
        if not self.spent():
            self.inner.save(key, value)

    def fetch(self, key: bytes):
        return self.inner.fetch(key)

    def delete(self, key: bytes, value: bytes) -> None:
        if not self.spent():
            self.inner.delete(key, value)

    def move(self, src: bytes, dest: bytes, value: bytes) -> None:
        if not self.spent():
            self.inner.move(src, dest, value)


class _BudgetSpent(BaseException):
    """Ends a Hypothesis run when the cell's time budget is spent.

    A BaseException, like KeyboardInterrupt, so Hypothesis stops at once instead of
    treating it as a failure to shrink."""


class _PartOver(BaseException):
    """Ends one Hypothesis run of a cell's search (its share of the budget is spent) and lets
    the next begin; a BaseException for the reason _BudgetSpent is."""


class _WideSkipped(BaseException):
    """Ends the wide-offsets probe's run when its case does not fit the device
    (engine.WideCaseUnaffordable) or the time the target's speed allows it (off CUDA); a
    BaseException for the reason _BudgetSpent is, raised with ``state["stopping"]`` set so that
    the example database saves nothing (_StopSavingAfterBudget)."""


class _HangFound(BaseException):
    """The target hung on ``case``.  A BaseException, so Hypothesis stops at once: shrinking or
    replaying would call it again, and each hung call leaves a thread that cannot be stopped."""

    def __init__(self, hang: Exception, case) -> None:
        super().__init__(str(hang))
        self.case = case


class _ViolationFound(Exception):
    def __init__(self, violation: Violation, case, outcome: engine.CaseOutcome):
        super().__init__(violation.one_line())
        self.violation, self.case, self.outcome = violation, case, outcome


def case_pairs(case) -> int:
    """(batch, head) pairs of an attention case, B Hq: the unit of the many-heads probe's cost.
    0 for softmax cases.

    A pair, not a score tile: the interpreter runs a Triton program per pair (and query tile),
    and its fixed cost per program dominates the probe's pairs of at most 16 x 16.  Counted in
    16 x 16 tiles, the first tenth's larger cases made the probe look cheap: the policy test's
    interpreted triton-attention drew 256 pairs and took 12 s for that one case (2026-12-01)."""
    spec = case.spec
    if not hasattr(spec, "seq_k"):
        return 0
    return spec.batch * spec.heads_q


def probe_work(case) -> int:
    """The work of a case in the units of the probes' cost estimates: a softmax input's entries
    plus ROW_COST a row; an attention input's scores (B Hq Nq Nk), Q, K and V entries, plus
    PAIR_WORK a (batch, head) pair; a wide-offsets case's block times its repetitions (the
    target gets them all: counted by the block alone, the gate put the control streaming
    attention's wide case of 87,383 repetitions at 0.009 s, and it took 42 s, CPU, 2026-12-06)."""
    spec = case.spec
    tile = getattr(spec, "tile", 1)
    if not hasattr(spec, "seq_k"):
        return spec.total_rows * (spec.length + ROW_COST) * tile
    pairs = spec.batch * spec.heads_q
    return tile * (pairs * (spec.seq_q * spec.seq_k + spec.seq_q * spec.head_dim + PAIR_WORK)
                   + 2 * spec.batch * spec.heads_kv * spec.seq_k * spec.head_dim)


def many_rows_entries(seconds: float, work_seen: int, budget_s: float | None) -> int:
    """The probe round's many-rows case's cost (softmax_cases' probe_entries, in units of
    ``probe_work``) from the speed so far (``seconds`` of checks over ``work_seen`` units): as
    much as fits in MANY_HEADS_SHARE of ``budget_s`` (or MANY_HEADS_SECONDS); the strategy keeps
    at least ``MANY_ROWS[0]`` rows and at most ``MANY_ROWS[1]`` rows of ``max_length``.  0 (the
    strategy's default) before anything was measured."""
    if work_seen <= 0 or seconds <= 0.0:
        return 0
    allowed = MANY_HEADS_SECONDS if budget_s is None else MANY_HEADS_SHARE * budget_s
    return int(allowed * work_seen / seconds)


def many_rows_default_cost(opts: CheckOptions, dtype: str) -> int:
    """What the strategy's default many-rows case may cost, in units of ``probe_work``: its most
    rows (``MANY_ROWS[1]``) and ``MANY_ROWS_SPAN * max_length`` entries."""
    max_length = opts.profile.for_dtype(dtype).softmax_max_length
    return (strategies.softmax.MANY_ROWS[1] * ROW_COST
            + strategies.softmax.MANY_ROWS_SPAN * max_length)


def grid_count(op: str, pilot: tuple[int, float] | None, budget_s: float | None, max_length: int) -> int:
    """Rows (softmax) or (batch, head) pairs (attention) of the grid probe that the pilot's speed
    (``pilot``: its ``probe_work`` and the wall seconds of its check, overheads included) lets
    finish in GRID_SHARE of ``budget_s`` (or GRID_SECONDS), at the largest grid case's work a row
    or pair; 0 without a pilot.

    Overheads included, the rate errs high, on purpose: estimated net of the fastest check's time,
    a GPU target's rate came out near zero and the campaign on the H200 (2026-12-01) built grid
    cases of a million rows in cells of a second, and sent one in float64 (the oracle's mpmath
    path on every row) into a hang.  A kernel under the Triton interpreter pays ~18 ms a program,
    so its rate stays high either way."""
    if pilot is None or pilot[0] <= 0 or pilot[1] <= 0.0:
        return 0
    # GRID_SECONDS at most, budget or not: a long fuzz round's tenth (a minute) made a grid case
    # that outlasted the 30 s a stopped fuzz child is given to finish its example.
    allowed = GRID_SECONDS if budget_s is None else min(GRID_SECONDS, GRID_SHARE * budget_s)
    affordable = allowed * pilot[0] / pilot[1]
    unit = (min(max_length, strategies.softmax.GRID_ROWS_MAX_LENGTH) + ROW_COST if op == "softmax"
            else strategies.attention.GRID_HEADS_PAIR_WORK + PAIR_WORK)
    return int(affordable // unit)


def tiles_work(length: int, pairs: int) -> int:
    """``probe_work`` of the largest case of a many-tiles rung: ``pairs`` (batch, head) pairs of
    ``length`` queries and keys at TILES_MAX_HEAD_DIM, a K/V head a pair."""
    d = strategies.attention.TILES_MAX_HEAD_DIM
    return pairs * (length * length + length * d + PAIR_WORK) + 2 * pairs * length * d


def tiles_rung_fits(pilot: tuple[int, float] | None, rung: tuple[int, int], spent_s: float,
                     budget_s: float | None, fixed_s: float = 0.0) -> bool:
    """Whether the many-tiles ``rung`` (length, pairs), at the speed of ``pilot`` (a case's
    ``probe_work`` and the wall seconds of its whole check, of which ``fixed_s`` does not grow
    with the work: see tiles_seconds), finishes within GRID_SHARE of
    ``budget_s``, or TILES_SECONDS without a budget, less the ``spent_s`` of the rungs before it.
    A budget's share may exceed TILES_SECONDS: a long run (a nightly fuzz, ``verify check
    --budget``) lets a CPU target climb to the 3000 x 3000 rung, where a float32 position
    (Nq x Nk past 2**23) stops being exact.  False without a pilot (see tiles_seconds)."""
    if pilot is None or pilot[0] <= 0 or pilot[1] <= 0.0:
        return False
    allowed = TILES_SECONDS if budget_s is None else GRID_SHARE * budget_s
    return spent_s + tiles_seconds(pilot, rung, fixed_s) <= allowed


def tiles_seconds(pilot: tuple[int, float], rung: tuple[int, int], fixed_s: float = 0.0) -> float:
    """The seconds a many-tiles ``rung`` is expected to take, from ``pilot`` (a smaller case's
    ``probe_work`` and whole check time), of which ``fixed_s`` is a check's cost whatever its
    work (clipped to the pilot's time): ``fixed_s`` plus the rest of the pilot's time scaled by
    the ratio of the two's work, each weighed by ``(work / TILES_CACHE_WORK) ** (TILES_GROWTH - 1)``
    past TILES_CACHE_WORK: the target, the naive comparison and the slices' bookkeeping grow a
    little faster than the work.  (Before the oracle ran in slices, verify.truth_chunks, 4 times
    the work took 10 times the time on the CPU here.)  With ``fixed_s`` = 0 the whole time
    scales, which errs long by the fixed cost times the ratio (see TILES_PILOTS)."""
    def weighed(work: int) -> float:
        return work * max(1.0, work / TILES_CACHE_WORK) ** (TILES_GROWTH - 1.0)
    fixed = min(max(fixed_s, 0.0), pilot[1])
    return fixed + (pilot[1] - fixed) * weighed(tiles_work(*rung)) / weighed(pilot[0])


def many_heads_pairs(floor: int, seconds: float, pairs_seen: int, budget_s: float | None) -> int:
    """Pairs for the many-heads probe from the speed so far: ``seconds`` (the target's and the
    oracle's) over ``pairs_seen`` (``case_pairs`` summed): as many as fit in MANY_HEADS_SHARE of
    ``budget_s`` (or MANY_HEADS_SECONDS without a budget), within [``floor``,
    MANY_HEADS_MAX_PAIRS].  Pairs of ordinary cases hold more work than a probe's, so the
    estimate errs towards fewer.

    A bug in a persistent loop over (batch, head) pairs shows only when some program gets a
    second pair, i.e. past the GPU's SM count (132 on the H200): a plain PyTorch callable
    checks 256 pairs in milliseconds, while a kernel under the Triton interpreter takes
    ~18 ms a pair and keeps the size profile's count."""
    if pairs_seen <= 0 or seconds <= 0.0:
        return floor
    allowed = MANY_HEADS_SECONDS if budget_s is None else MANY_HEADS_SHARE * budget_s
    affordable = int(allowed * pairs_seen / seconds)
    return max(floor, min(strategies.attention.MANY_HEADS_MAX_PAIRS, affordable))


def wide_offsets_allowed(dtype: str, device: str) -> str:
    """Why the wide-offsets probe is not for this cell, or "" where it is.  On a CUDA device it
    passes 2**31 elements (lengths.WIDE_OFFSET_ELEMENTS: 4 to 8 GiB a tensor; the checks that
    make it cheap run there: the oracle for one block, bit comparisons for the rest); elsewhere
    2**24 (lengths.FLOAT_OFFSET_ELEMENTS: 64 to 128 MiB of float32 a tensor), each case where
    the target's speed allows (wide_case_seconds).  Never for float64 (16 GiB a tensor on CUDA;
    on the CPU the oracle's exact path takes every row of the block; those targets are the
    references)."""
    if get_format(dtype).name == "float64":
        return "not for float64 (16 GiB a tensor)" if device.startswith("cuda") else "not for float64"
    return ""


def wide_offset_elements(device: str) -> int:
    """The elements the wide-offsets probe's repetitions pass on ``device``: 2**31 on a CUDA device
    (int32 offsets), 2**24 elsewhere (offsets formed in float32; see wide_offsets_allowed)."""
    return WIDE_OFFSET_ELEMENTS if device.startswith("cuda") else FLOAT_OFFSET_ELEMENTS


def wide_case_seconds(widest: tuple[int, float] | None, work: int) -> float | None:
    """The seconds a target call on a case of ``work`` would take at the speed of ``widest``:
    (the work of the largest case checked so far, the seconds its target call took; its first
    call, a compile included, so the estimate errs long).  None without one.  The work is
    ``probe_work`` or ``program_units``: a PyTorch callable's time follows the work, a kernel's
    under the Triton interpreter its programs (~18 ms each; see PROGRAM_BOUND_S)."""
    if widest is None or widest[0] <= 0 or widest[1] <= 0.0:
        return None
    return widest[1] * work / widest[0]


#: The wide-offsets gate off CUDA extrapolates from the largest case so far, and a small case's
#: call is mostly fixed cost: a PyTorch callable's largest ordinary case, 65,567 units in 0.5 to
#: 3.6 ms, put its wide case of 1,535 times the work at 0.8 to 5.5 s, which took 0.4 to 0.9 s
#: (CPU, 2026-12-06): the probe ran or not by the noise of a millisecond.  Where the estimate is
#: over the gate by less than this factor (the pilot's own estimate within it) and reaches past
#: this factor times that case's work, a pilot of 1/WIDE_PILOT_SHARE of the repetitions is
#: checked first, and the estimate taken again from its speed (wide_pilot).
WIDE_PILOT_SHARE = 16


def wide_pilot(case, seconds: float | None, gate: float, widest: tuple[int, float] | None):
    """The pilot to time before the wide-offsets case ``case`` (estimated at ``seconds`` against
    ``gate``; ``widest``: the largest case so far, (work, seconds)), or None where the estimate
    stands: under the gate, too far over it for a pilot to fit, or from a case of at least the
    pilot's work.  The pilot is ``case`` with 1/WIDE_PILOT_SHARE of its repetitions (at least 2),
    a case like any other: checked, recorded, replayable."""
    if seconds is None or widest is None or not gate < seconds <= WIDE_PILOT_SHARE * gate:
        return None
    tile = case.spec.tile // WIDE_PILOT_SHARE
    if tile < 2:
        return None
    pilot = type(case)(replace(case.spec, tile=tile))
    return pilot if probe_work(pilot) > widest[0] else None


def wide_estimate(work: int, units: int, widest: tuple[int, float] | None, most: tuple[int, float] | None,
                  wide_ref: tuple[int, int, float] | None) -> float | None:
    """The wide-offsets gate's estimate of a wide case's target call (``work``: its probe_work,
    ``units``: its program_units), or None where no case ran to time it.  ``wide_ref``: the
    largest wide case (or pilot) checked so far, (work, units, seconds): a repeated block just
    past the same width, the nearest measured case, so where there is one it alone decides,
    by work, and by programs too where its own rate says the target is bound by them.  Else
    the largest ordinary case by work (``widest``), and where the case with the most programs
    (``most``) took over PROGRAM_BOUND_S a program, by programs as well.  An ordinary case's
    rate sits near the bound for a PyTorch callable with a loop a pair (1.3 ms a program:
    CI's load once lifted it past 2 ms, and the estimate of a wide case that took 0.05 s with
    it to 28 s: CPU, 2026-12-07); a wide case's own rate is 0.2 ms there."""
    if wide_ref is not None:
        widest, most = (wide_ref[0], wide_ref[2]), (wide_ref[1], wide_ref[2])
    seconds = wide_case_seconds(widest, work)
    if seconds is not None and most is not None and 0 < PROGRAM_BOUND_S * most[0] < most[1]:
        seconds = max(seconds, wide_case_seconds(most, units))
    return seconds


#: A target whose case with the most programs (program_units) took more than this a program is
#: taken as bound by its programs (a kernel under the Triton interpreter: ~18 ms each), and the
#: wide-offsets gate off CUDA estimates its case by programs as well as by work.  On this CPU
#: (2026-12-05, float32, 100 examples, seed 1) the rate by programs was 6 ms (triton-softmax)
#: and 13 ms (triton-attention) under the interpreter, and 0.8 ms for a PyTorch attention
#: callable (a gather and ref naive attention), whose wide case it put at 3.4 s; by work, under
#: a second (then the work of the block alone: probe_work counts every repetition since 2026-12-06).
PROGRAM_BOUND_S = 2e-3


def program_units(case) -> int:
    """About how many programs a kernel launches for ``case``: a softmax input's rows, an
    attention input's (batch, head) pairs times its query tiles of 64; repetitions included."""
    spec = case.spec
    if not hasattr(spec, "seq_k"):
        return spec.total_rows * spec.tile
    return spec.batch * spec.heads_q * spec.tile * -(-spec.seq_q // 64)


def _strategy_args(target: Target, dtype: str, opts: CheckOptions, pairs: int | None = None, entries: int = 0,
                   grid: int = 0, tiles: int = 0, wide: bool = False) -> dict[str, Any]:
    """The keyword arguments of the target's strategy (softmax_cases or attention_cases);
    ``pairs``: the many-heads probe's pair count, if not the size profile's; ``entries``: the
    many-rows probe's entries (softmax_cases' probe_entries); ``grid``: the grid probe's rows or
    pairs (0: none); ``tiles``: the many-tiles probe's length (attention; 0: none)."""
    prof = opts.profile.for_dtype(dtype)
    caps = target.caps
    if target.op == "softmax":
        return dict(dtypes=(dtype,), caps=caps, max_length=prof.softmax_max_length, max_rows=prof.softmax_max_rows,
                    probe_entries=entries, grid_rows=grid, wide_offsets=wide,
                    wide_elements=wide_offset_elements(opts.device))
    dims = None
    if prof.head_dims:
        dims = tuple(d for d in prof.head_dims if caps.head_dim_min <= d <= caps.head_dim_max
                     and d % caps.head_dim_multiple == 0) or None
    if prof.attention_probe_max_seq is not None:
        caps = caps.with_(max_length=min(caps.max_length or prof.attention_probe_max_seq, prof.attention_probe_max_seq))
    return dict(dtypes=(dtype,), caps=caps, max_seq=prof.attention_max_seq, max_batch=prof.attention_max_batch,
                max_heads=prof.attention_max_heads, head_dims=dims,
                many_heads_pairs=pairs or prof.attention_many_heads_pairs, grid_pairs=grid, tiles_seq=tiles,
                zero_scale_keys=prof.attention_zero_scale_keys,
                wide_offsets=wide, wide_elements=wide_offset_elements(opts.device))


#: Per op: the strategy, and the function listing the probes its arguments allow.
_STRATEGIES = {"softmax": (strategies.softmax_cases, strategies.softmax_probes),
               "attention": (strategies.attention_cases, strategies.attention_probes)}


def _strategy(target: Target, dtype: str, opts: CheckOptions, probe: str | None = None, pairs: int | None = None,
              entries: int = 0, grid: int = 0, tiles: int = 0):
    """The target's strategy; with ``probe``, every case is that probe."""
    args = _strategy_args(target, dtype, opts, pairs, entries, grid, tiles, wide=probe == "wide-offsets")
    return _STRATEGIES[target.op][0](**args, probe=probe)


def probe_round(target: Target, dtype: str, opts: CheckOptions) -> tuple[str, ...]:
    """The probes a cell tries after ``PROBE_ROUND_AT`` of its search, ``opts.probe_examples``
    examples each (the first example of each is the probe's simplest, which the strategies
    make a strong one): every probe the target's strategy can draw, cheapest first, when
    that many fit in half of ``opts.max_examples``; else none.

    The strategies draw their probes (long rows, 16-bit index widths, many heads, absorption,
    ...) rarely, and Hypothesis's draws are far from independent: in 60-example runs of the
    triton-attention strategy (8 seeds, 2026-11-30) the absorption probe came 0 to 10 times
    and two seeds drew none.  The round makes every search that lasts past its first tenth
    cover them all.
    """
    probes = _drawable_probes(target, dtype, opts)
    return probes if _round_fits(len(probes), opts) else ()


def _round_fits(probes: int, opts: CheckOptions) -> bool:
    """Whether a round of ``probes`` probes fits in half of ``opts.max_examples``."""
    return probes * opts.probe_examples <= opts.max_examples // 2


def probe_round_examples(target: Target, dtype: str, opts: CheckOptions) -> int:
    """The examples the cell's probe round takes: ``opts.probe_examples`` of every probe the
    target's strategy can draw.  A search of fewer than twice as many has no round (probe_round)."""
    return len(_drawable_probes(target, dtype, opts)) * max(opts.probe_examples, 0)


def run_seeds(seed: int | None, dtype: str) -> tuple[int | None, int | None, int | None]:
    """The Hypothesis seeds of a cell's three runs (first part with its probes, the rest, the
    climb) from the user's ``seed`` and the cell's dtype: None where ``seed`` is None.

    Each dtype's cell and each part draws its own sequence.  With ``seed`` itself for every
    dtype, the float16, bfloat16 and float32 cells of a seed drew the same shapes (a case of
    B=2 Hq=4 Nq=129 Nk=97 came in all three at seed 1, 2026-12-06), and with ``seed + 1`` for
    the rest, seed 1's rest repeated seed 2's first part: three dtypes and three seeds explored
    little more than one each."""
    if seed is None:
        return None, None, None
    return tuple(zlib.crc32(f"{seed}|{dtype}|{part}".encode()) for part in ("first", "rest", "climb"))


def probe_round_note(target: Target, dtype: str, opts: CheckOptions) -> str:
    """What a cell's probe round does: its probes, or why it runs none.  A search of fewer than
    twice the round's examples skips it whole: the GPU tier's attention cells, at 25 examples,
    ran none from 3f0d281 to 55e30e6 (13 to 16 probes) and nothing said so."""
    if opts.probe_examples < 1:
        return "probe round off (probe_examples < 1)"
    probes = _drawable_probes(target, dtype, opts)
    if not probes:
        return "probe round: no probe drawable for this target and dtype"
    if _round_fits(len(probes), opts):
        return f"probe round: {len(probes)} probe(s), {opts.probe_examples} example(s) each"
    need = 2 * len(probes) * opts.probe_examples
    return (f"probe round not run: its {len(probes)} probe(s) need max_examples >= {need} "
            f"(got {opts.max_examples}); pass more examples to force every probe")


def _drawable_probes(target: Target, dtype: str, opts: CheckOptions) -> tuple[str, ...]:
    """The probes the target's strategy can draw for ``dtype`` (none where ``opts.probe_examples`` < 1)."""
    if opts.probe_examples < 1:
        return ()
    return _STRATEGIES[target.op][1](**_strategy_args(target, dtype, opts))


def warm_target_seconds(target: Target, case, opts: CheckOptions) -> float | None:
    """The seconds of a second call of an attention ``target`` on ``case``'s inputs, its compiled
    kernels now cached (None where the call fails)."""
    built = case.build(device=opts.device)
    _, violation, seconds = engine.call_target(target.fn, (built.q, built.k, built.v),
                                               dict(scale=built.scale, causal=built.causal, mask=built.mask),
                                               opts.timeout)
    return None if violation is not None else seconds


def run_case(target: Target, case, opts: CheckOptions) -> engine.CaseOutcome:
    """Build a drawn case on the device and check the target on it."""
    built = case.build(device=opts.device)
    if target.op == "softmax":
        return engine.check_softmax_input(target, built, masked_rows=opts.masked_rows, timeout=opts.timeout,
                                          compare_naive=opts.compare_naive, tile=getattr(case.spec, "tile", 1),
                                          call_checks_at_any_size=opts.call_checks_at_any_size)
    return engine.check_attention_input(target, built.q, built.k, built.v, scale=built.scale, causal=built.causal,
                                        mask=built.mask, masked_rows=opts.masked_rows, timeout=opts.timeout,
                                        compare_naive=opts.compare_naive, tile=getattr(case.spec, "tile", 1),
                                        call_checks_at_any_size=opts.call_checks_at_any_size)


@contextmanager
def observing_cases(before: Callable[[Any], None] | None = None,
                    after: Callable[[Any, CheckOptions, engine.CaseOutcome], None] | None = None) -> Iterator[None]:
    """Call ``before(case)`` ahead of every ``run_case`` and ``after(case, opts, outcome)`` once it
    returns, while the block runs (for the campaign's per-example records and the cell
    worker's in-flight input); the previous ``run_case`` is restored afterwards."""
    global run_case
    original = run_case

    def observed(target: Target, case, opts: CheckOptions) -> engine.CaseOutcome:
        if before is not None:
            before(case)
        out = original(target, case, opts)
        if after is not None:
            after(case, opts, out)
        return out

    run_case = observed
    try:
        yield
    finally:
        run_case = original


def case_inputs(case, op: str) -> dict[str, Any]:
    return case_inputs_on(case, op, "cpu")


def case_inputs_on(case, op: str, device: str) -> dict[str, Any]:
    """The case's tensors built on ``device`` (in their drawn layouts), as the target receives them."""
    built = case.build(device=device)
    if op == "softmax":
        inputs = {"x": built}
    else:
        inputs = {"q": built.q, "k": built.k, "v": built.v, "mask": built.mask, "scale": built.scale,
                  "causal": built.causal}
    # A wide-offsets case keeps its block and the repetitions (the whole is GiBs).
    tile = getattr(case.spec, "tile", 1)
    return {**inputs, "tile": tile} if tile > 1 else inputs


def shape_signature(case) -> tuple:
    """What makes two cases the same shape for the repeat limit: the lengths, the causal flag
    and the mask kind (a kernel's tiling and masking paths follow them; values do not)."""
    spec = case.spec
    mask = getattr(spec, "mask", None)
    kind = None if mask is None else mask.kind
    if hasattr(spec, "seq_k"):
        return (spec.seq_q, spec.seq_k, spec.causal, kind)
    return (spec.length, kind)


def row_length(case) -> int:
    """The length of the softmax rows a case holds (Nk for attention): the repeat limit's
    second key, since a kernel's tiling edges follow it alone."""
    spec = case.spec
    return spec.seq_k if hasattr(spec, "seq_k") else spec.length


def _save(case, cell: CellResult, opts: CheckOptions, violation: Violation | None, kind: str,
          checked_masked_rows: str | None = None) -> str:
    art = artifacts.Artifact(
        op=cell.op, target=cell.target, dtype=cell.dtype, device=opts.device, inputs=case_inputs(case, cell.op),
        spec=case.spec.to_dict(), description=case.describe(),
        # What was asked, and what it meant for the target: a replay holds the rows to the latter.
        options={"masked_rows": opts.masked_rows, "timeout": opts.timeout,
                 **({"masked_rows_checked": checked_masked_rows} if checked_masked_rows else {})},
        violation=violation.to_dict() if violation else None, kind=kind,
    )
    return str(artifacts.save(art, opts.artifact_dir))


def check_cell(target: Target, dtype: str, opts: CheckOptions) -> CellResult:
    """Search one target x dtype; returns what was measured and the shrunk violation, if any."""
    fmt = get_format(dtype)
    masked = engine.masked_rows_for(target, opts.masked_rows)  # also refuses an unknown policy
    cell = CellResult(target.name, target.op, fmt.name, opts.device,
                      error_unit="ULP" if target.op == "softmax" else "u*cond")
    if not target.caps.supports_dtype(fmt.name):
        cell.status, cell.reason = "unsupported", f"{target.name} does not declare {fmt.name}"
        return cell
    why = target.unavailable_reason(opts.device)
    if why:
        cell.status, cell.reason = "unsupported", why
        return cell

    first_seed, rest_seed, climb_seed = run_seeds(opts.seed, fmt.name)
    rng = random.Random(first_seed)
    state: dict[str, Any] = {"found": False, "worst": -1.0, "worst_case": None, "pairs_seen": 0, "pairs": None,
                             "work_seen": 0, "wall_seen": 0.0, "entries": 0, "grid": 0, "tiles": 0, "last_cost": None,
                             "probe_costs": {}, "tiles_pilots": {},
                             "last_case": None, "last_target_s": 0.0, "last_one_call_s": 0.0,
                             "fastest_one_call_s": math.inf, "any_size": False, "widest": None,
                             "most_programs": None, "wide_ref": None, "wide_gate": None, "wide_pilots": 0, "found_work": 0}
    any_size_opts = replace(opts, call_checks_at_any_size=True)  # a probe's cases, one in SECOND_CALL_ODDS
    start = time.perf_counter()
    # The first example's time, up to max(budget, WARMUP_CAP_S), left out of the budget and of
    # the parts' deadlines (CheckOptions.exempt_warmup).
    exempt = opts.exempt_warmup if opts.exempt_warmup is not None else opts.device != "cpu"
    state["warmup"] = 0.0

    def record(case, out: engine.CaseOutcome) -> None:
        ev = out.evaluation
        cell.examples += 1
        cell.target_seconds += out.seconds
        state["pairs_seen"] += case_pairs(case)
        cell.oracle_seconds += out.oracle_seconds
        cell.fallback_rows += out.fallback_rows
        cell.flushed += ev.flushed
        cell.ill_conditioned += ev.ill_conditioned
        cell.uncertified_rows += ev.uncertified
        cell.negative_zeros += ev.negative_zeros
        cell.normwise_max = max(cell.normwise_max, ev.normwise)
        fr = out.flash_rule_ratio
        if fr != float("inf"):
            cell.flash_rule_max = max(cell.flash_rule_max, fr)
        cell.flash_rule_over_2 += int(fr > 2)
        for f in case.features:
            cell.features[f] += 1
        if ev.lse_errors is not None and ev.lse_errors.numel():
            cell.lse_rows += ev.lse_errors.numel()
            cell.lse_max_error = max(cell.lse_max_error, float(ev.lse_errors.max()))
            cell.lse_max_ratio = max(cell.lse_max_ratio, ev.lse_max_ratio)
        if ev.errors is not None and ev.errors.numel():
            errs, tols = ev.errors.detach().cpu(), ev.tolerances.detach().cpu()
            cell.max_error = max(cell.max_error, float(errs.max()))
            cell.max_ratio = max(cell.max_ratio, ev.max_ratio)
            cell.max_tolerance_seen = max(cell.max_tolerance_seen, float(tols.max()))
            cell.min_tolerance_seen = min(cell.min_tolerance_seen, float(tols.min()))
            if errs.numel() > SAMPLE_PER_EXAMPLE:
                idx = torch.tensor(rng.sample(range(errs.numel()), SAMPLE_PER_EXAMPLE))
                errs, tols = errs[idx], tols[idx]
            cell.samples.extend(errs.tolist())
            cell.tolerance_samples.extend(tols.tolist())
            if ev.max_ratio > state["worst"]:
                state["worst"], state["worst_case"] = ev.max_ratio, case

    # No explain phase: it re-runs hundreds of variations of the shrunk case to annotate
    # Hypothesis's own printout, which the verdict does not show (the counterexample is
    # described from the case itself), and for a slow target it outlasted the shrink.
    phases = (Phase.explicit, Phase.reuse, Phase.generate) + ((Phase.shrink,) if opts.shrink else ())

    database = opts.database
    if database is not None:
        database = _StopSavingAfterBudget(database, lambda: cell.cut_by_budget or state["stopping"])
    state.update(deadline=None, stopping=False)

    shapes: Counter = Counter()
    lengths_seen: Counter = Counter()
    seeds_seen: Counter = Counter()

    def property_holds(case) -> None:
        if not state["found"] and state["repeat_limit"] is not None:
            signature, length, seed = shape_signature(case), row_length(case), case.spec.seed
            assume(shapes[signature] < state["repeat_limit"] and lengths_seen[length] < state["length_limit"]
                   and seeds_seen[seed] < SEED_REPEATS)
            shapes[signature] += 1
            lengths_seen[length] += 1
            seeds_seen[seed] += 1
        if not state["found"]:
            searched_to = time.perf_counter() - state["warmup"]  # the clock, less the warm-up
            if opts.budget_s is not None and searched_to - start > opts.budget_s:
                cell.cut_by_budget = True
                raise _BudgetSpent()
            if state["deadline"] is not None and searched_to > state["deadline"]:
                state["stopping"] = True
                raise _PartOver()
        # the failing case itself, replayed, runs whatever the gate says (it ran once)
        replaying = state["found"] and probe_work(case) <= state["found_work"]
        if state["wide_gate"] is not None and case.spec.tile > 1 and not replaying:
            seconds = wide_seconds(case)
            pilot = None if state["found"] else wide_pilot(case, seconds, state["wide_gate"], state["widest"])
            if pilot is not None:
                check(pilot, drawn=False)  # checked, recorded, its failure reported like any case's
                state["wide_pilots"] += 1
                seconds = wide_seconds(case)  # now from the pilot's speed
            if seconds is None or seconds > state["wide_gate"]:
                # Shrinking a failure found: a variant too slow to try is not tried, and the
                # failure stands (stopping here would lose it).
                assume(not state["found"])
                state["stopping"] = True  # the example in flight did not fail: the database keeps nothing
                raise _WideSkipped("no case ran to time it" if seconds is None else
                                   f"a case of {case.spec.tile} repetitions would take the target about {seconds:.2g} s "
                                   f"at the speed of the largest case so far ({state['wide_gate']:.2g} s allowed)")
        check(case)

    def wide_seconds(case) -> float | None:
        """The wide-offsets gate's estimate of ``case``'s target call (wide_case_seconds)."""
        return wide_estimate(probe_work(case), program_units(case), state["widest"], state["most_programs"],
                             state["wide_ref"])

    def check(case, drawn: bool = True) -> None:
        """``case`` run and checked: recorded, and a violation, hang or lost context raised;
        ``drawn``: the example Hypothesis drew, whose features and score it is told (a pilot's not:
        one score a label an example)."""
        began = time.perf_counter()
        try:
            any_size = state["any_size"] or case.spec.seed % SECOND_CALL_ODDS == 0
            out = run_case(target, case, any_size_opts if any_size else opts)
        except engine.WideCaseUnaffordable as short:
            assume(not state["found"])  # as the gate's (property_holds): a failure found stands
            state["stopping"] = True
            raise _WideSkipped(str(short)) from None
        except engine.DeviceContextLost as lost:
            lost.case = case
            state["first_failure_s"] = time.perf_counter() - start
            cell.examples_to_first_failure = cell.examples + 1
            raise
        except engine.TargetHang as hang:
            state["first_failure_s"] = time.perf_counter() - start
            cell.examples_to_first_failure = cell.examples + 1
            raise _HangFound(hang, case) from None
        for f in case.features if drawn else ():
            event(f)
        if not state["found"]:
            if exempt and cell.examples == 0:  # the first example, before record counts it
                state["warmup"] = min(time.perf_counter() - began, max(opts.budget_s or 0.0, WARMUP_CAP_S))
            record(case, out)
            # The speed of the grid probes' estimates (grid_count): the check's whole time.
            work, wall = probe_work(case), time.perf_counter() - began
            state["work_seen"] += work
            state["wall_seen"] += wall
            state["last_cost"] = (work, wall)
            # what a many-tiles case pays: one call (its cases make no second calls)
            state["last_one_call_s"] = max(wall - out.second_call_seconds, 1e-6)
            state["fastest_one_call_s"] = min(state["fastest_one_call_s"], state["last_one_call_s"])
            if drawn:  # a pilot is not what the probes report as their case
                state["last_case"], state["last_target_s"] = case, out.seconds
            # the wide-offsets gate's speeds off CUDA (wide_case_seconds)
            if state["widest"] is None or work > state["widest"][0]:
                state["widest"] = (work, out.seconds)
            units = program_units(case)
            if state["most_programs"] is None or units > state["most_programs"][0]:
                state["most_programs"] = (units, out.seconds)
            if case.spec.tile > 1 and (state["wide_ref"] is None or work > state["wide_ref"][0]):
                state["wide_ref"] = (work, units, out.seconds)
        if drawn:
            hyp_target(min(out.evaluation.max_ratio, 1e12), label="error/tolerance")
        if out.evaluation.violations:
            if not state["found"]:
                state["first_failure_s"] = time.perf_counter() - start
                cell.examples_to_first_failure = cell.examples + 1
            state["found"] = True
            state["found_work"] = max(state["found_work"], probe_work(case))
            raise _ViolationFound(out.evaluation.violations[0], case, out)

    def search(probe: str | None, max_examples: int, seed: int | None, deadline: float | None = None,
               climb: bool = False) -> None:
        """One Hypothesis run: ``probe`` forced (or None), until ``max_examples`` or ``deadline``;
        ``climb``: with the target phase.  Shapes are limited (``SHAPE_REPEATS``) in plain runs."""
        # One database key per target, dtype and probe: replayed examples come from this search.
        test = _named_copy(property_holds, f"{target.name}|{fmt.name}|{probe or ''}")
        # The speed-sized probe arguments go to the probe round, and to the later runs' many-rows
        # cases where they make those cheaper than the strategy's default (a slow target: under
        # the interpreter each row is a program, and 447 rows of one entry took 14.7 s).
        entries = state["entries"] if probe or state["entries"] < many_rows_default_cost(opts, fmt.name) else 0
        test = given(case=_strategy(target, fmt.name, opts, probe, state["pairs"], entries,
                                    state["grid"] if probe in GRID_PILOTS else 0,
                                    state["tiles"] if probe == "many-tiles" else 0))(test)
        test = settings(max_examples=max_examples, deadline=None, database=database, derandomize=False,
                        report_multiple_bugs=False, print_blob=False,
                        phases=phases + ((Phase.target,) if climb else ()),
                        suppress_health_check=list(HealthCheck))(test)
        if seed is not None:
            test = hypothesis.seed(seed)(test)
        state["deadline"] = deadline
        state["any_size"] = probe in SECOND_CALL_PROBES
        # Probes force their shapes, and the climb varies the values of its best shape.
        limited = probe is None and not climb
        state["repeat_limit"] = max(SHAPE_REPEATS, math.ceil(SHAPE_REPEAT_SHARE * max_examples)) if limited else None
        state["length_limit"] = max(LENGTH_REPEATS, math.ceil(LENGTH_REPEAT_SHARE * max_examples)) if limited else None
        try:
            with with_reporter(lambda _text: None):  # we print our own, shorter, report
                test()
        except _PartOver:
            pass
        finally:
            state.update(deadline=None, stopping=False)

    def compiled_share(case, cold_s: float) -> float:
        """The seconds of a first call on a new shape beyond a second one: on a GPU, Triton's
        compilation and autotuning or torch.compile's (0 on the CPU, where nothing compiles)."""
        if opts.device == "cpu" or case is None:
            return 0.0
        warm = warm_target_seconds(target, case, opts)
        return 0.0 if warm is None else max(0.0, cold_s - warm)

    def climb_tiles() -> str:
        """The many-tiles probe's rungs, each where the case before it says it fits
        (tiles_rung_fits); what was tried, or why nothing.  A compiled target's first call on a
        new shape compiles (seconds, whatever the shape): that share of each case's time is
        measured (compiled_share) and left out of the estimates and of the time allowed.  The
        pilots' and the fixed cost's times leave out their second calls (reuse, stream order,
        update in place, causal flag flipped), which a rung's cases do not make: counted, with the
        compile of the flipped flag's kernel, they put the first rung of triton-attention at 46 s
        on an H100 (2026-12-05), and it was never tried."""
        pilot, spent, total, reached = None, 0.0, 0.0, None
        for name in TILES_PILOTS:
            cost = state["probe_costs"].get(name)
            if cost and (pilot is None or cost[0] > pilot[0]):
                case, target_s, one_call_s = state["tiles_pilots"].get(name, (None, 0.0, cost[1]))
                pilot = (cost[0], max(one_call_s - compiled_share(case, target_s), 1e-6))
        why = f"no {' or '.join(TILES_PILOTS)} probe ran to time it"
        # The fixed-cost credit: on a CUDA device, for the first rung only (see TILES_PILOTS).
        fastest = state["fastest_one_call_s"]
        fixed = fastest if opts.device != "cpu" and math.isfinite(fastest) else 0.0
        for rung in strategies.attention.TILES_RUNGS:
            why = ""
            args = _strategy_args(target, fmt.name, opts, tiles=rung[0])
            if "many-tiles" not in _STRATEGIES["attention"][1](**args):
                why = (f"{rung[0]} queries and keys are past the target's max_length or the size profile's "
                       f"probes for {fmt.name}")
                break
            if not tiles_rung_fits(pilot, rung, spent, opts.budget_s, fixed):
                if pilot is not None:
                    why = (f"{rung[0]} x {rung[0]} over {rung[1]} pairs would take about "
                           f"{tiles_seconds(pilot, rung, fixed):.2g} s at the speed of the case before")
                break
            fixed = 0.0
            state["tiles"], state["last_cost"] = rung[0], None
            began = time.perf_counter()
            search("many-tiles", opts.probe_examples, first_seed)
            compiling = compiled_share(state["last_case"], state["last_target_s"]) if state["last_cost"] else 0.0
            elapsed = time.perf_counter() - began
            total += elapsed
            spent += max(0.0, elapsed - compiling)
            pilot, reached = state["last_cost"], rung
            if pilot is not None:
                pilot = (pilot[0], max(pilot[1] - compiling, 1e-6))
        if reached is None:
            return f"many-tiles not tried: {why or 'no pilot'}"
        done = f"many-tiles: up to {reached[0]} x {reached[0]} over {reached[1]} pairs in {total:.2g} s"
        if total - spent >= 0.05:
            done += f" ({total - spent:.2g} s of them compiling)"
        return f"{done}; {why}" if why else done

    def wide_offsets() -> str:
        """The wide-offsets probe, where wide_offsets_allowed: what it tried, or why not."""
        why = wide_offsets_allowed(fmt.name, opts.device)
        if not why and "wide-offsets" not in _STRATEGIES[target.op][1](**_strategy_args(target, fmt.name, opts,
                                                                                        wide=True)):
            why = "the target's lengths, head dims or pair limit allow no case"
        if why:
            return f"wide-offsets not tried: {why}"
        state["last_case"], examples_before, began = None, cell.examples, time.perf_counter()
        state["wide_pilots"] = 0
        # Off CUDA a kernel under the Triton interpreter (~18 ms a program) would take hours on a
        # case past 2**24 elements: each case runs only where the largest case so far (or a pilot
        # of a sixteenth of it: wide_pilot) says it takes GRID_SECONDS (or GRID_SHARE of the
        # budget) at most (property_holds).
        if not opts.device.startswith("cuda"):
            state["wide_gate"] = GRID_SECONDS if opts.budget_s is None else min(GRID_SECONDS,
                                                                                GRID_SHARE * opts.budget_s)
        skipped = ""
        try:
            # Two cases: the simplest (rows of 16 entries, the most programs) and one drawn.
            search("wide-offsets", max(2, opts.probe_examples), first_seed)
        except _WideSkipped as short:
            skipped = str(short)
        finally:
            state["wide_gate"] = None
        case, pilots = state["last_case"], state["wide_pilots"]
        piloted = f" ({pilots} pilot(s) of 1/{WIDE_PILOT_SHARE} the repetitions checked first)" if pilots else ""
        if case is None:
            return f"wide-offsets not tried: {skipped}{piloted}" if skipped else "wide-offsets: no case ran"
        shape = case.spec.full_shape if target.op == "softmax" else case.spec.full_shapes["q"]
        done = (f"wide-offsets: {cell.examples - examples_before - pilots} case(s), the last "
                f"{' x '.join(map(str, shape))} ({math.prod(shape)} elements{'' if target.op == 'softmax' else ' in Q'}), "
                f"in {time.perf_counter() - began:.2g} s{piloted}")
        return f"{done}; then {skipped}" if skipped else done

    # Without probes: one run.  With them: PROBE_ROUND_AT of the examples (and of the budget),
    # each probe (probe_round), then the rest under another seed (see run_seeds: the same seed
    # would repeat the first part).  Last, TARGET_SHARE of the examples (and of the budget) climb.
    climbing = int(opts.max_examples * TARGET_SHARE)
    plain_end = None if opts.budget_s is None else start + opts.budget_s * (1 - TARGET_SHARE)
    probes = probe_round(target, fmt.name, opts)
    cell.probe_round = probe_round_note(target, fmt.name, opts)
    try:
        if not probes:
            search(None, opts.max_examples - climbing, first_seed, plain_end)
        else:
            first = None if opts.budget_s is None else start + opts.budget_s * PROBE_ROUND_AT
            search(None, max(1, int(opts.max_examples * PROBE_ROUND_AT)), first_seed, first)
            if target.op == "attention":
                state["pairs"] = many_heads_pairs(opts.profile.for_dtype(fmt.name).attention_many_heads_pairs,
                                                  cell.target_seconds + cell.oracle_seconds, state["pairs_seen"],
                                                  opts.budget_s)
            else:
                state["entries"] = many_rows_entries(state["wall_seen"], state["work_seen"], opts.budget_s)
            for probe in probes:
                if speed_gated_out(probe, probes, state["probe_costs"], opts.budget_s):
                    continue  # the pilot's case was slow (or did not finish): see SPEED_GATED_PROBES
                state["last_cost"] = None
                search(probe, opts.probe_examples, first_seed)
                state["probe_costs"][probe] = state["last_cost"]
                if probe in TILES_PILOTS and state["last_cost"] is not None:
                    state["tiles_pilots"][probe] = (state["last_case"], state["last_target_s"],
                                                    state["last_one_call_s"])
            grid_probe = "grid-rows" if target.op == "softmax" else "grid-heads"
            state["grid"] = grid_count(target.op, state["probe_costs"].get(GRID_PILOTS[grid_probe]), opts.budget_s,
                                       opts.profile.for_dtype(fmt.name).softmax_max_length)
            if grid_probe in _STRATEGIES[target.op][1](**_strategy_args(target, fmt.name, opts, grid=state["grid"])):
                cell.grid_probe = f"{grid_probe}: up to {state['grid']} {'rows' if target.op == 'softmax' else 'pairs'}"
                search(grid_probe, opts.probe_examples, first_seed)
            else:
                cell.grid_probe = (f"{grid_probe} not tried: the {GRID_PILOTS[grid_probe]} probe's speed affords "
                                   f"{state['grid']} (a grid axis holds {GRID_AXIS_LIMIT})")
            if target.op == "attention":
                cell.tiles_probe = climb_tiles()
            cell.wide_probe = wide_offsets()
            left = opts.max_examples - climbing - cell.examples
            if left > 0:
                search(None, left, rest_seed, plain_end)
        left = opts.max_examples - cell.examples
        if left > 0:
            search(None, left, climb_seed, climb=True)
    except _BudgetSpent:
        pass
    except _ViolationFound as found:
        cell.status = "violated"
        cell.violation = found.violation
        cell.counterexample = found.case.describe()
        cell.artifact = _save(found.case, cell, opts, found.violation, "violation", masked)
    except engine.DeviceContextLost as lost:
        cell.status, cell.context_lost = "violated", True
        cell.violation = lost.violation
        cell.counterexample = lost.case.describe() + "  [as found: not shrunk, the CUDA context was lost]"
        cell.artifact = _save(lost.case, cell, opts, lost.violation, "violation", masked)
    except _HangFound as hang:
        cell.status = "violated"
        cell.violation = Violation("hang", str(hang))
        cell.counterexample = hang.case.describe() + "  [as found: not shrunk, the hung call cannot be stopped]"
        cell.artifact = _save(hang.case, cell, opts, cell.violation, "violation", masked)
    except engine.TargetHang as hang:  # outside an example (a pilot's call): no input to keep
        cell.status = "violated"
        cell.violation = Violation("hang", str(hang))
    except hypothesis.errors.FlakyFailure as e:  # the target answered differently on the same input
        inner = [x for x in e.exceptions if isinstance(x, _ViolationFound)]
        cell.status = "violated"
        cell.violation = inner[0].violation if inner else Violation("exception", f"flaky: {e}")
        if inner:
            cell.counterexample = inner[0].case.describe() + "  [nondeterministic: did not reproduce every time]"
            cell.artifact = _save(inner[0].case, cell, opts, inner[0].violation, "violation", masked)
    v = cell.violation
    if v is not None and v.error is not None and v.tolerance and v.unit == cell.error_unit:
        # the reported (shrunk) violation belongs in the cell's maxima, whatever was recorded
        cell.max_error = max(cell.max_error, v.error)
        cell.max_ratio = max(cell.max_ratio, v.error / v.tolerance)
    if state["worst_case"] is not None:
        cell.worst_case = state["worst_case"].describe()
        cell.worst_artifact = _save(state["worst_case"], cell, opts, None, "worst-case", masked)
    cell.seconds = time.perf_counter() - start
    cell.warmup_seconds = state["warmup"]
    cell.seconds_to_first_failure = state.get("first_failure_s")
    if cell.min_tolerance_seen == float("inf"):
        cell.min_tolerance_seen = 0.0
    return cell


def _named_copy(fn: Callable, digest: str) -> Callable:
    """A wrapper of ``fn`` whose Hypothesis database key includes ``digest``."""
    def copy(case) -> None:
        fn(case)

    copy._hypothesis_internal_add_digest = digest.encode()  # type: ignore[attr-defined]
    return copy


def check_target(target: Target, opts: CheckOptions, *, stop_at_first_violation: bool = False) -> list[CellResult]:
    """Every requested dtype of one target (optionally stopping once one dtype violates)."""
    cells: list[CellResult] = []
    lost_in = None  # the dtype whose cell lost the CUDA context: nothing more can run in this process
    for d in opts.dtypes or target.caps.dtypes:
        if lost_in is not None:
            cells.append(CellResult(target.name, target.op, get_format(d).name, opts.device, status="error",
                                    reason=f"not run: the CUDA context was lost in the {lost_in} cell"))
            continue
        cells.append(check_cell(target, d, opts))
        if cells[-1].context_lost:
            lost_in = cells[-1].dtype
        if stop_at_first_violation and cells[-1].status == "violated":
            break
    return cells
