"""The contract a target must satisfy, checked on one input/output pair.

softmax target ``fn(x) -> y``: softmax over the last dim, same shape, dtype and device.
  * rows with a finite entry: every output finite, in [0, 1], within tolerance, and the
    outputs of a row consistent with one shared normalizer (``shared-normalizer``);
  * a row that is entirely -inf: all NaN or all 0 in the row (``masked_rows`` policy);
  * a row holding NaN or +inf: that row is NaN;
  * nothing leaks into other rows (a NaN elsewhere is a ``leak``).
attention target ``fn(q, k, v, *, scale, causal, mask) -> o``: o has q's shape, dtype, device.
  * query rows with no visible key: all 0 or all NaN (same policy);
  * elements a NaN input reaches (through the query, a visible key or V) are NaN; elements
    only an infinity reaches are not judged (+-inf scores are legitimately treated as masked
    or as NaN depending on evaluation order);
  * every other element finite and within tolerance.
A target declaring ``returns_lse`` returns ``(output, lse)``; ``lse`` (shape ``output.shape[:-1]``,
float32 or wider, natural log; else ``lse-structure``) is checked too:
  * finite rows: finite and within ``verify.tolerance``'s LSE bound (``lse-accuracy``);
  * rows with nothing visible: -inf (+inf where the target declares ``empty_row_lse="+inf"``),
    or NaN where the output row is NaN and the policy allows it (``lse-masked-row``);
  * rows a NaN reaches (softmax: the row holds one; attention: the query or a visible key): NaN;
    a softmax row holding +inf and no NaN: NaN or +inf; attention rows only an infinity
    reaches are not judged (``lse-nan-propagation``).
Any deviation is a ``Violation``; ``verify.tolerance`` says what "within tolerance" means.
"""

from __future__ import annotations

import math

from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from verify import metrics
from verify.dtypes import get_format
from verify.oracle import ROW_FINITE, ROW_MASKED, ROW_NONFINITE, AttentionTruth, SoftmaxTruth
from verify.tolerance import BIAS_FAILURE_PROBABILITY, BIAS_SMALL_TERM, ToleranceModel, underflow_bound

MASKED_ROW_POLICIES = ("either", "nan", "zero")
#: The hull check's room for underflow: float32 compute that flushes, the loosest the tolerance admits.
_FLUSHING_FLOAT32 = ToleranceModel(compute=get_format("float32"), dot=get_format("float32"), flushes_subnormals=True)
#: The LSE's error unit (``verify.metrics.lse_error``).
LSE_UNIT = "u*max(1,|lse|)"


@dataclass(frozen=True)
class Violation:
    """One way a target broke its contract, with the element that shows it best."""

    kind: str  # exception | hang | input-modified | output-overwritten | output-overlap | unwritten-output | stale-input | stream-order | shape | dtype | device | accuracy | shared-normalizer | summation-bias | range | masked-row | nan-propagation | leak | lse-structure | lse-accuracy | lse-masked-row | lse-nan-propagation
    message: str
    index: tuple[int, ...] | None = None
    got: float | None = None
    expected: float | None = None
    error: float | None = None
    tolerance: float | None = None
    unit: str | None = None

    def one_line(self) -> str:
        if self.error is not None and self.tolerance is not None:
            return (
                f"{self.kind} at {self.index}: got {self.got!r}, exact {self.expected!r}, "
                f"error {self.error:.4g} {self.unit} > tolerance {self.tolerance:.4g}"
            )
        return f"{self.kind}: {self.message}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Evaluation:
    """Outcome of checking one output: violations and the accuracy figures measured."""

    violations: list[Violation] = field(default_factory=list)
    errors: torch.Tensor | None = None  # measured errors (ULPs or condition units), finite elements
    tolerances: torch.Tensor | None = None
    flushed: int = 0
    ill_conditioned: int = 0  # elements whose a-priori bound is unbounded (not measured)
    uncertified: int = 0  # rows the oracle could not certify within its work cap (not measured)
    negative_zeros: int = 0
    normwise: float = 0.0
    abs_max: float = 0.0
    rmse: float = 0.0
    # the LSE's measured errors and tolerances (units of u * max(1, |LSE|)), finite rows; None: no LSE
    lse_errors: torch.Tensor | None = None
    lse_tolerances: torch.Tensor | None = None

    @property
    def ok(self) -> bool:
        return not self.violations

    @property
    def max_error(self) -> float:
        if self.errors is None or self.errors.numel() == 0:
            return 0.0
        return float(self.errors.max())

    @property
    def max_ratio(self) -> float:
        """max over elements of error / tolerance (< 1 means inside the policy)."""
        if self.errors is None or self.errors.numel() == 0:
            return 0.0
        return float((self.errors / self.tolerances).max())

    @property
    def lse_max_ratio(self) -> float:
        """max over rows of the LSE's error / tolerance (0 without an LSE or a measured row)."""
        if self.lse_errors is None or self.lse_errors.numel() == 0:
            return 0.0
        return float((self.lse_errors / self.lse_tolerances).max())


#: Outputs up to this many elements whose strides prove no layout free of overlap are checked
#: element by element (``shared_elements``); larger ones pass unchecked.
OVERLAP_EXACT_MAX = 1 << 22


def shared_elements(t: torch.Tensor) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """Two indices of ``t`` at one memory address, or None where every element has its own
    (or ``t`` is too large to tell: past OVERLAP_EXACT_MAX elements with strides that prove
    nothing).  A zero stride over a dim of 2 or more shares at once; else the dims sorted by
    stride, each stride past the span of the smaller ones, prove the layout free of overlap."""
    dims = sorted((st, n, d) for d, (st, n) in enumerate(zip(t.stride(), t.shape)) if n > 1)
    span = 0
    for st, n, d in dims:
        if st == 0:
            first = [0] * t.dim()
            second = list(first)
            second[d] = 1
            return tuple(first), tuple(second)
        if st <= span:
            break
        span += st * (n - 1)
    else:
        return None
    if t.numel() > OVERLAP_EXACT_MAX:
        return None
    offsets = torch.zeros((), dtype=torch.int64)
    for d, (st, n) in enumerate(zip(t.stride(), t.shape)):
        shape = [1] * t.dim()
        shape[d] = n
        offsets = offsets + (torch.arange(n, dtype=torch.int64) * st).reshape(shape)
    flat = offsets.expand(t.shape).reshape(-1)
    order = torch.argsort(flat, stable=True)
    same = (flat[order][1:] == flat[order][:-1]).nonzero()
    if same.numel() == 0:
        return None
    i = int(same[0, 0])
    return _at(t, int(order[i])), _at(t, int(order[i + 1]))


def check_structure(got: Any, shape: torch.Size, dtype: torch.dtype, device: torch.device) -> Violation | None:
    """Shape, dtype and device of a returned value, and an output whose every element has its
    own memory, or the violation that says what came back."""
    if not isinstance(got, torch.Tensor):
        return Violation("shape", f"expected a torch.Tensor of shape {tuple(shape)}, got {type(got).__name__}")
    if tuple(got.shape) != tuple(shape):
        return Violation("shape", f"expected shape {tuple(shape)}, got {tuple(got.shape)}")
    if got.dtype != dtype:
        return Violation("dtype", f"expected dtype {dtype}, got {got.dtype}")
    if got.device.type != torch.device(device).type:
        return Violation("device", f"expected device {device}, got {got.device}")
    shared = shared_elements(got)
    if shared is not None:
        return Violation("output-overlap", f"output elements {shared[0]} and {shared[1]} share one memory address "
                         f"(strides {tuple(got.stride())} over shape {tuple(got.shape)}): an in-place op on the output "
                         "writes several elements at once; return a tensor that owns each element (e.g. "
                         ".contiguous())", index=shared[0])
    return None


def _at(t: torch.Tensor, flat_index: int) -> tuple[int, ...]:
    return tuple(int(i) for i in torch.unravel_index(torch.tensor(flat_index), t.shape))


def _masked_row_violation(got_rows: torch.Tensor, index_rows: torch.Tensor, policy: str, what: str,
                          lenient: torch.Tensor | None = None) -> Violation | None:
    """got_rows: (r, n) outputs of rows the contract says are fully masked; ``lenient`` (r, n):
    elements that may be non-finite in place of 0 (attention: a NaN/inf in V under the zero
    weights, 0 x NaN = NaN in a P V product); a row of such elements alone fits either convention."""
    if got_rows.numel() == 0:
        return None
    all_nan = torch.isnan(got_rows).all(-1)
    zero = got_rows == 0
    if lenient is not None:
        zero |= lenient & ~torch.isfinite(got_rows)
    all_zero = zero.all(-1)
    ok = {"either": all_nan | all_zero, "nan": all_nan, "zero": all_zero}[policy]
    if bool(ok.all()):
        zero_only, nan_only = all_zero & ~all_nan, all_nan & ~all_zero
        if policy == "either" and bool(nan_only.any()) and bool(zero_only.any()):
            # One convention a call: a kernel that finds its empty rows on one path (the mask)
            # and lets another (mask and causal together) divide 0 by 0 mixes them.
            zero, nan = (tuple(int(i) for i in index_rows[int(torch.nonzero(m)[0])]) for m in (zero_only, nan_only))
            return Violation(
                "masked-row",
                f"rows with no unmasked entry come back both all 0 ({what} {zero}) and all NaN ({what} {nan}); "
                f"the contract (--masked-rows either) lets a target return either, one of them for every such "
                f"row of a call, not both",
                index=nan,
            )
        return None
    bad = int(torch.nonzero(~ok)[0])
    row = got_rows[bad]
    want = {"either": "all 0 or all NaN", "nan": "all NaN", "zero": "all 0"}[policy]
    return Violation(
        "masked-row",
        f"{what} {tuple(int(i) for i in index_rows[bad])} has no unmasked entry; the contract "
        f"(--masked-rows {policy}) wants {want}, got {row[:6].tolist()}{' ...' if row.numel() > 6 else ''}",
        index=tuple(int(i) for i in index_rows[bad]),
    )


def _worst(
    kind: str, bad: torch.Tensor, score: torch.Tensor, got, truth_hi, err, tol, unit: str
) -> Violation:
    score = torch.where(bad, score, torch.full_like(score, -1.0))
    flat = int(torch.argmax(torch.nan_to_num(score, nan=float("inf"))))
    idx = _at(bad, flat)
    g, e = float(got.flatten()[flat]), float(truth_hi.flatten()[flat])
    er = float(err.flatten()[flat]) if err is not None else None
    tl = float(tol.flatten()[flat]) if tol is not None else None
    # The oracle leaves ill-conditioned rows it was not asked to certify as NaN; a NaN truth
    # where a NaN input reaches the element is the answer itself.
    if e == e:
        exact = f"exact {e!r}"
    elif kind in ("nan-propagation", "lse-nan-propagation"):
        exact = "exact NaN (a NaN or +inf input reaches it)"
    else:
        exact = "exact not computed (ill-conditioned row)"
    msg = f"{int(bad.sum())} element(s); worst at {idx}: got {g!r}, {exact}"
    return Violation(kind, msg, idx, g, e, er, tl, unit)


@dataclass(frozen=True)
class _RowFactors:
    """Per row of a softmax output (flattened leading dims): the interval [lo, hi] of
    log(1 + eps), eps a common relative factor with |(1 + r_j) / (1 + eps) - 1| <= A_j for
    every measured output (r_j its relative error, A_j the spread bound), the columns that set
    each end, and r_j, A_j themselves ((rows, n); A_j 0 where not measured)."""

    lo: torch.Tensor
    hi: torch.Tensor
    at_lo: torch.Tensor
    at_hi: torch.Tensor
    rel: torch.Tensor
    spread: torch.Tensor

    @property
    def consistent(self) -> torch.Tensor:
        return self.lo <= self.hi


def _row_factors(g: torch.Tensor, truth: SoftmaxTruth, spread: torch.Tensor, use: torch.Tensor) -> _RowFactors | None:
    n = g.shape[-1]
    exact = truth.probs.hi + truth.probs.lo
    rel = ((g - truth.probs.hi) - truth.probs.lo) / exact
    use = use & (g > 0) & (exact > 0) & torch.isfinite(rel) & torch.isfinite(spread) & (spread < 0.5)
    if not bool(use.any()):
        return None
    r = torch.log1p(torch.where(use, rel, torch.zeros_like(rel)))
    a = torch.where(use, spread, torch.zeros_like(spread))
    inf = torch.full_like(r, math.inf)
    lo, at_lo = torch.where(use, r - torch.log1p(a), -inf).reshape(-1, n).max(-1)
    hi, at_hi = torch.where(use, r - torch.log1p(-a), inf).reshape(-1, n).min(-1)
    return _RowFactors(lo, hi, at_lo, at_hi, rel.reshape(-1, n), a.reshape(-1, n))


def _worst_row(bad: torch.Tensor, score: torch.Tensor, lead_index: torch.Tensor, truth: SoftmaxTruth,
               n: int) -> tuple[int, tuple[int, ...], torch.Tensor]:
    """Of the ``bad`` rows, the one of the largest ``score``: its flat index, its index over the
    leading dims, and the exact probabilities as (rows, n)."""
    worst = int(torch.argmax(torch.where(bad, score, torch.full_like(score, -1.0))))
    return worst, tuple(int(i) for i in lead_index[worst]), (truth.probs.hi + truth.probs.lo).reshape(-1, n)


def _shared_normalizer_violation(g: torch.Tensor, truth: SoftmaxTruth, f: _RowFactors,
                                 lead_index: torch.Tensor) -> Violation | None:
    """The row whose outputs cannot share one normalizer (its interval of common factors is
    empty), at its worst pair of outputs."""
    n = g.shape[-1]
    bad = ~f.consistent
    if not bool(bad.any()):
        return None
    rows = torch.arange(f.lo.shape[0], device=f.lo.device)
    r = torch.log1p(f.rel)
    gap = r[rows, f.at_lo] - r[rows, f.at_hi]
    allowed = torch.log1p(f.spread[rows, f.at_lo]) - torch.log1p(-f.spread[rows, f.at_hi])
    worst, row, exact = _worst_row(bad, gap / allowed, lead_index, truth, n)
    ja, jb = int(f.at_lo[worst]), int(f.at_hi[worst])
    return Violation(
        "shared-normalizer",
        f"row {row}: the outputs at columns {ja} and {jb} are off the exact softmax by "
        f"{float(f.rel[worst, ja]):+.4g} and {float(f.rel[worst, jb]):+.4g} (relative). Every output of a row "
        f"is divided by the same sum, so whatever that sum's error, the two may differ by at most "
        f"{float(allowed[worst]):.4g} (their exp, its argument, the division and the final rounding); they "
        f"differ by {float(gap[worst]):.4g}. Part of the row is computed differently (a block, a chunk, "
        f"the ragged tail, a cheaper exp?)",
        (*row, ja), float(g.reshape(-1, n)[worst, ja]), float(exact[worst, ja]),
        float(gap[worst]), float(allowed[worst]), "relative gap",
    )


def _summation_bias_violation(g: torch.Tensor, truth: SoftmaxTruth, f: _RowFactors, bias: torch.Tensor,
                              lead_index: torch.Tensor) -> Violation | None:
    """The row whose common factor lies outside its probabilistic bound ``bias`` (NaN: the
    row is not judged), at the factor closest to 1 its outputs allow."""
    n = g.shape[-1]
    bound = torch.log1p(bias.reshape(-1).to(f.lo.device))
    judged = torch.isfinite(bound) & f.consistent
    least = torch.where(f.lo > 0, f.lo, torch.where(f.hi < 0, f.hi, torch.zeros_like(f.lo)))
    bad = judged & (least.abs() > bound)
    if not bool(bad.any()):
        return None
    worst, row, exact = _worst_row(bad, least.abs() / bound, lead_index, truth, n)
    factor = math.expm1(float(least[worst]))
    j = int(f.at_lo[worst] if factor > 0 else f.at_hi[worst])
    return Violation(
        "summation-bias",
        f"row {row}: every output is off the exact softmax by a common factor of at least {factor:+.4g} "
        f"(relative): the row's sum is {'low' if factor > 0 else 'high'} by that much. The row's {n} terms "
        f"round without a bias of their own (their rounding residues balance at the partial sums' spacings), so a "
        f"sum of them rounded to nearest, in any order, stays within {math.expm1(float(bound[worst])):.4g} except with "
        f"probability below {BIAS_FAILURE_PROBABILITY:.0e} (Higham & Mary's probabilistic bound, with terms under "
        f"{BIAS_SMALL_TERM:g} u of the sum taken as lost); the worst case, which the element "
        f"tolerance allows, is about n u. The sum looks biased: rounded toward zero, truncated, or missing terms?",
        (*row, j), float(g.reshape(-1, n)[worst, j]), float(exact[worst, j]),
        abs(factor), math.expm1(float(bound[worst])), "relative",
    )


def evaluate_softmax(
    x: torch.Tensor, got: torch.Tensor, truth: SoftmaxTruth, tol_ulps: torch.Tensor, masked_rows: str = "either",
    spread: torch.Tensor | None = None, bias: torch.Tensor | None = None,
) -> Evaluation:
    """Check a softmax output against the contract and the per-element tolerance (in ULPs);
    with ``spread`` (``verify.tolerance.softmax_spread_bound``), also that each row's outputs
    share one normalizer (``shared-normalizer``), and with ``bias``
    (``verify.tolerance.softmax_bias_bound``, a row's shape) that the normalizer's error stays
    within the probabilistic bound where there is one (``summation-bias``)."""
    fmt = get_format(truth.target)
    g = got.detach().to(torch.float64).to(truth.probs.hi.device)
    ev = Evaluation()
    status = truth.row_status
    finite_row = (status == ROW_FINITE)[..., None].expand_as(g)
    special_input = bool((status == ROW_NONFINITE).any())

    nonfinite = finite_row & ~torch.isfinite(g)
    if nonfinite.any():
        kind = "leak" if special_input else "nan-propagation"
        v = _worst(kind, nonfinite, torch.ones_like(g), g, truth.probs.hi, None, None, "")
        what = "a NaN/inf input row leaked into a finite row" if special_input else "non-finite output in a finite row"
        ev.violations.append(Violation(kind, f"{what}: {v.message}", v.index, v.got, v.expected))
    out_of_range = finite_row & torch.isfinite(g) & ((g < 0) | (g > 1))
    if out_of_range.any():
        ev.violations.append(_worst("range", out_of_range, (g - 0.5).abs(), g, truth.probs.hi, None, None, ""))

    err = metrics.ulp_error(got, truth.probs, fmt)
    # Zeros where the exact value is subnormal in T are counted, and measured like any other
    # output: the tolerance's tiny_c term admits a flush in the compute format (float32
    # subnormals, which cover bfloat16's), but not a float16 output of 4.5e-5 stored as 0.
    flushed = metrics.flushed_to_zero(got, truth.probs, fmt) & finite_row
    measured = finite_row & torch.isfinite(err)
    ev.flushed = int(flushed.sum())
    ev.negative_zeros = int(((g == 0) & torch.signbit(g) & finite_row).sum())
    ratio = err / tol_ulps
    bad = measured & (ratio > 1)
    if bad.any():
        v = _worst("accuracy", bad, ratio, g, truth.probs.hi, err, tol_ulps, "ULP")
        ev.violations.append(v)
    ev.errors = err[measured]
    ev.tolerances = tol_ulps[measured]
    ev.normwise = metrics.normwise_error(torch.where(finite_row, g, truth.probs.hi), truth.probs)
    ev.abs_max = float(metrics.abs_error(g, truth.probs)[measured].max()) if measured.any() else 0.0
    ev.rmse = metrics.rmse(torch.where(measured, g, truth.probs.hi), truth.probs)

    n = g.shape[-1]
    rows = g.reshape(-1, n)
    st = status.reshape(-1)
    lead_index = torch.cartesian_prod(*[torch.arange(s) for s in status.shape]) if status.dim() > 1 else torch.arange(st.numel())[:, None]
    factors = None if spread is None or ev.violations else _row_factors(g, truth, spread.to(g.device), measured)
    if factors is not None:
        v = _shared_normalizer_violation(g, truth, factors, lead_index)
        if v is None and bias is not None:
            v = _summation_bias_violation(g, truth, factors, bias, lead_index)
        if v:
            ev.violations.append(v)
    masked = st == ROW_MASKED
    v = _masked_row_violation(rows[masked], lead_index[masked.cpu()], masked_rows, "row")
    if v:
        ev.violations.append(v)
    nanrows = st == ROW_NONFINITE
    if nanrows.any():
        not_nan = ~torch.isnan(rows[nanrows]).all(-1)
        if not_nan.any():
            r = tuple(int(i) for i in lead_index[nanrows.cpu()][int(torch.nonzero(not_nan)[0])])
            ev.violations.append(
                Violation("nan-propagation", f"row {r} holds NaN or +inf, so the contract wants the whole row NaN; "
                          f"got {rows[nanrows][int(torch.nonzero(not_nan)[0])][:6].tolist()}", r)
            )
    return ev


def value_range(v: torch.Tensor, heads_q: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per (B, Hq, 1, Dv): min and max of the finite values of the head's keys (float64)."""
    v64 = v.detach().to(torch.float64).repeat_interleave(heads_q // v.shape[1], dim=1)
    fin = torch.isfinite(v64)
    lo = torch.where(fin, v64, torch.full_like(v64, float("inf"))).amin(-2, keepdim=True)
    hi = torch.where(fin, v64, torch.full_like(v64, -float("inf"))).amax(-2, keepdim=True)
    return lo, hi


def evaluate_attention(
    got: torch.Tensor, truth: AttentionTruth, tol_units: torch.Tensor, masked_rows: str = "either",
    v: torch.Tensor | None = None, hull_slack: float = 0.0,
) -> Evaluation:
    """Check an attention output against the contract and the tolerance (condition units).

    ``hull_slack`` is how far, relative to max |v|, a correct output may leave the values'
    hull beyond float32-level rounding of the sums (``tolerance.hull_relative_slack``).
    """
    fmt = get_format(truth.target)
    g = got.detach().to(torch.float64).to(truth.out.hi.device)
    ev = Evaluation()
    status = truth.row_status
    finite_el = (status == ROW_FINITE)[..., None].expand_as(g) & ~truth.expected_nonfinite
    special_input = truth.input_has_nonfinite

    nonfinite = finite_el & ~torch.isfinite(g) & ~truth.may_be_nonfinite
    if nonfinite.any():
        kind = "leak" if special_input else "nan-propagation"
        viol = _worst(kind, nonfinite, torch.ones_like(g), g, truth.out.hi, None, None, "")
        what = "a NaN/inf input leaked into an element it cannot reach" if special_input else "non-finite output"
        ev.violations.append(Violation(kind, f"{what}: {viol.message}", viol.index, viol.got, viol.expected))
    should_be_nan = truth.expected_nan & ~torch.isnan(g)
    if should_be_nan.any():
        viol = _worst("nan-propagation", should_be_nan, torch.ones_like(g), g, truth.out.hi, None, None, "")
        ev.violations.append(
            Violation("nan-propagation", f"a NaN input reaches these outputs (through the query or a visible key "
                      f"or value) but they are not NaN: {viol.message}", viol.index, viol.got)
        )

    # Ill-conditioned elements (infinite tolerance) are still a convex combination of the
    # values: outside their hull is wrong whatever the conditioning.  Checked against the hull
    # of the visible keys the row's scores can weigh (the truth's value_lo/value_hi, from
    # tolerance.attention_value_hull) or, without it, of all keys of the head (a superset),
    # with room for float32-level rounding of the sums and for weights that sum to 1 + O(u)
    # once P is rounded (hull_slack).
    outside = torch.zeros_like(finite_el)
    tight = truth.value_lo is not None and truth.value_hi is not None
    if v is not None:
        if tight:
            vmin, vmax = truth.value_lo.to(g.device), truth.value_hi.to(g.device)
        else:
            vmin, vmax = (t.to(g.device) for t in value_range(v, g.shape[1]))
        nk = v.shape[-2]
        # plus float32's underflow of the products and rescales, flushed at worst
        slack = ((hull_slack + (nk + 8) * 2.0**-20) * torch.maximum(vmin.abs(), vmax.abs()) + fmt.smallest_subnormal
                 + underflow_bound(nk, _FLUSHING_FLOAT32))
        outside = finite_el & torch.isinf(tol_units) & torch.isfinite(g) & ((g < vmin - slack) | (g > vmax + slack))
    if outside.any():
        dist = torch.maximum(vmin - g, g - vmax)
        viol = _worst("range", outside, dist, g, truth.out.hi, None, None, "")
        at = tuple(viol.index)
        lo = float((vmin - slack).expand_as(g)[at])
        hi = float((vmax + slack).expand_as(g)[at])
        what = ("the values of the visible keys its scores can weigh (the others' scores are too far below "
                "the best, even with their rounding errors)" if tight else "the values")
        ev.violations.append(Violation("range", f"outside the range of {what}, which no softmax weighting "
                                       f"can leave: {viol.message}; allowed [{lo:.9g}, {hi:.9g}]",
                                       viol.index, viol.got, viol.expected))

    err = metrics.condition_error(got, truth.out, truth.cond, fmt)
    ev.ill_conditioned = int((finite_el & torch.isinf(tol_units)).sum())
    measured = finite_el & torch.isfinite(err) & torch.isfinite(tol_units)
    ratio = err / tol_units
    bad = measured & (ratio > 1)
    if bad.any():
        ev.violations.append(_worst("accuracy", bad, ratio, g, truth.out.hi, err, tol_units, "u*cond"))
    ev.errors = err[measured]
    ev.tolerances = tol_units[measured]
    ev.normwise = metrics.normwise_error(torch.where(finite_el, g, truth.out.hi), truth.out)
    ev.abs_max = float(metrics.abs_error(g, truth.out)[measured].max()) if measured.any() else 0.0
    ev.rmse = metrics.rmse(torch.where(measured, g, truth.out.hi), truth.out)

    masked = status == ROW_MASKED
    if masked.any():
        idx = torch.nonzero(masked.cpu())
        viol = _masked_row_violation(g[masked], idx, masked_rows, "query row (b, h, i)",
                                     truth.may_be_nonfinite.to(g.device)[masked])
        if viol:
            ev.violations.append(viol)
    return ev


def split_lse(result: Any, out_shape: torch.Size, device: torch.device) -> tuple[Any, Any, Violation | None]:
    """``(output, lse)`` of a target declaring ``returns_lse``, and a violation if the result is
    not such a pair or the LSE's shape, dtype or device is wrong (the output is checked apart)."""
    if not isinstance(result, (tuple, list)) or len(result) != 2:
        got = f"a {type(result).__name__}" + (f" of {len(result)}" if isinstance(result, (tuple, list)) else "")
        return result, None, Violation("lse-structure", f"the target declares returns_lse, so it must return "
                                       f"(output, lse); got {got}")
    out, lse = result
    shape = tuple(out_shape[:-1])
    if not isinstance(lse, torch.Tensor):
        return out, lse, Violation("lse-structure", f"expected the LSE as a torch.Tensor of shape {shape}, got "
                                   f"{type(lse).__name__}")
    if tuple(lse.shape) != shape:
        return out, lse, Violation("lse-structure", f"expected the LSE of shape {shape} (the output's without its "
                                   f"last dim), got {tuple(lse.shape)}")
    if not lse.is_floating_point():
        return out, lse, Violation("lse-structure", f"expected a floating LSE, got {lse.dtype}")
    if torch.finfo(lse.dtype).eps > torch.finfo(torch.float32).eps:
        # A bfloat16 LSE is off by up to 2^-8 |lse|, 2^-5 near 8: exp(lse), the weight a merge
        # of partial outputs gives this one, moves by 3%.
        return out, lse, Violation("lse-structure", f"expected the LSE in float32 or wider (the statistics it "
                                   f"comes from are), got {lse.dtype}: store it in float32")
    if lse.device.type != torch.device(device).type:
        return out, lse, Violation("lse-structure", f"expected the LSE on {device}, got {lse.device}")
    return out, lse, None


def evaluate_lse(
    ev: Evaluation, lse: torch.Tensor, truth: SoftmaxTruth | AttentionTruth, tol_units: torch.Tensor,
    out: torch.Tensor, *, want_nan: torch.Tensor, nan_or_inf: torch.Tensor, masked_rows: str = "either",
    empty_row_lse: float = -math.inf,
) -> None:
    """Check a target's LSE per row (see the module docstring) and record its errors in ``ev``.

    ``want_nan`` / ``nan_or_inf``: rows (the LSE's shape) whose LSE must be NaN / NaN or +inf;
    other non-finite rows are not judged.  ``tol_units`` is in units of u_T * max(1, |LSE|), T
    the LSE's dtype (``metrics.lse_error``).  ``empty_row_lse``: what a row with nothing visible
    must hold, -inf (the log of an empty sum) or the +inf a target declares
    (``Capabilities.empty_row_lse``).
    """
    fmt = get_format(lse.dtype)
    dev = truth.lse.hi.device
    g = lse.detach().to(torch.float64).to(dev)
    status = truth.row_status
    finite_row = status == ROW_FINITE

    def row(mask: torch.Tensor) -> tuple[int, ...]:
        return tuple(int(i) for i in torch.nonzero(mask)[0])

    nonfinite = finite_row & ~torch.isfinite(g)
    if nonfinite.any():
        at = row(nonfinite)
        ev.violations.append(Violation("lse-accuracy", f"{int(nonfinite.sum())} row(s) with a finite log-sum-exp got a "
                                       f"non-finite LSE; first at {at}: got {float(g[at])!r}, exact "
                                       f"{float(truth.lse.hi[at])!r}", at, float(g[at]), float(truth.lse.hi[at])))
    err = metrics.lse_error(lse, truth.lse, fmt)
    measured = finite_row & torch.isfinite(err) & torch.isfinite(tol_units)
    ratio = err / tol_units
    bad = measured & (ratio > 1)
    if bad.any():
        v = _worst("lse-accuracy", bad, ratio, g, truth.lse.hi, err, tol_units, LSE_UNIT)
        ev.violations.append(Violation(v.kind, f"LSE: {v.message}", v.index, v.got, v.expected, v.error,
                                       v.tolerance, v.unit))
    ev.lse_errors, ev.lse_tolerances = err[measured], tol_units[measured]

    masked = status == ROW_MASKED
    if masked.any():
        out_nan = torch.isnan(out.detach().to(dev)).all(-1) if out.shape[-1] else torch.zeros_like(masked)
        ok = (g == empty_row_lse) | (torch.isnan(g) & out_nan & (masked_rows != "zero"))
        wrong = masked & ~ok
        if wrong.any():
            at = row(wrong)
            want = ("-inf, the log of an empty sum" if empty_row_lse < 0 else "+inf, as the target declares")
            ev.violations.append(Violation(
                "lse-masked-row", f"{int(wrong.sum())} row(s) with nothing visible; their LSE must be {want} "
                f"(NaN only beside a NaN output row, --masked-rows {masked_rows}); first at {at}: got {float(g[at])!r}",
                at, float(g[at]), empty_row_lse))
    must_nan = (status == ROW_NONFINITE) & want_nan.to(dev) & ~torch.isnan(g)
    may_inf = (status == ROW_NONFINITE) & nan_or_inf.to(dev) & ~want_nan.to(dev) & ~(torch.isnan(g) | (g == float("inf")))
    for wrong, want in ((must_nan, "NaN"), (may_inf, "NaN or +inf")):
        if wrong.any():
            at = row(wrong)
            ev.violations.append(Violation(
                "lse-nan-propagation", f"{int(wrong.sum())} row(s) whose scores a NaN or +inf input reaches; the "
                f"contract wants an LSE of {want}; first at {at}: got {float(g[at])!r}", at, float(g[at])))
