"""Tolerance policy: how far from the exact result a *correct* target may be.

The tolerance of each output element is a first-order rounding-error bound of
the algorithm family (shifted softmax / online softmax / FlashAttention), in
the precision the target claims to compute in, plus the final rounding to the
output dtype.  It follows Blanchard, Higham & Higham, "Accurately computing the
log-sum-exp and softmax functions", IMA J. Numer. Anal. 41(4), 2021 (shifted
formulas, any summation order), extended to the attention product.

Notation: T output format (u_T), c compute precision (u_c), dot precision of
the Q K^T products, n row length, d_j = x_j - max (<= 0), gamma_n = n u_c.

Softmax, element j (absolute):
    safety * [p_j (u_c (2|d_j| + 2 k_exp) + conv_j + eps_S + 2 u_c) + 2 tiny_c] + ulp_T(p_j) / 2
    eps_S = sum_i p_i u_c (2|d_i| + 2 k_exp) + gamma_{n-1}
  2|d_j| covers exp implemented as exp2(d * log2 e) with a rounded product,
  k_exp the exp's own error in ulps (GPU ex2.approx: ~2), conv_j the rounding
  of a wider input into c, 2 u_c the division (or reciprocal and multiply),
  tiny_c intermediates flushed to zero in c.

Softmax, the row's normalizer: every output of a row is divided by one computed sum, so
y^_j = y_j (1 + e_j) / (1 + eps) with one eps a row, |e_j| bounded by the terms above without
eps_S (``softmax_spread_bound``; ``verify.contracts`` checks that one eps fits the row), and
on long rows whose terms round without a bias of their own |eps| within Higham & Mary's
probabilistic bound lambda sqrt(n) u_c (plus the small terms, at their worst) instead of
gamma_{n-1} (``softmax_bias_bound``).

Attention, element (i, d), in units of u_T * sum_j p_j |v_jd| (``verify.metrics``):
    1 (final rounding) + u_P (1 + u_T) / u_T
      + safety * [ sum_j p_j |v_jd| rel_j + c_d (eps_l + gamma_Nk + u_TF32 + 2 u_c) + flush ] / (u_T c_d)
    rel_j = |scale| sum_d|q_d k_jd| (2 u_dot_in + gamma_D + u_c) + u_c (2|d_j| + 2 k_exp)
    eps_l = sum_j p_j rel_j + gamma_Nk + 2 u_c Nk   (rescaling by alpha at every key block)
  u_P = u_in when P is rounded to the input dtype before P V (FlashAttention does), and
  u_TF32 = 2 u_dot when P and V enter a narrower dot format (TF32).  The u_P term takes no
  safety factor: rounding each p_j to nearest moves the output by at most
  u_in sum_j p_j |v_jd| / l = u_in c_d, exactly (l is summed before the rounding), and its
  products with the other first-order terms are far inside their safety margin; the output's
  final rounding scales it by at most 1 + u_T.  ``flush`` is absolute: weights p_j flushed to
  zero below c's smallest normal (2 tiny_c sum_j |v_jd|), P's subnormals in the input format
  where P is rounded to it, and results below c's smallest normal: (Nk + 1) s_c (s_c its
  smallest subnormal) rounded to c's subnormals, (2 Nk + 1) tiny_c flushed to zero where
  the target declares it or takes a TF32 dot (``underflow_bound``).  With 1.25 u_P, a
  kernel that also rounded 1/l to the input dtype (an extra u_in c_d) fit under the tolerance
  in searches of 100 and 300 examples a dtype (a blind mutant, seeds 1 and 2, 2026-12-03).

First-order bounds are rigorous up to O(u^2) terms; ``safety`` (1.25) absorbs
those and equivalent reorderings.  flash-attention's own rule (error <= 2x a
naive same-dtype implementation's, plus FA3's fwd_atol) is reported beside it by the engine.

Rows where the bound on a score's error exceeds ILL_CONDITIONED_ARGUMENT_ERROR
are ill-conditioned in the compute precision (e.g. |scale q.k| ~ 1e30 in
float32): they get an infinite tolerance, are counted separately, and only the
contract's hull check applies: the output is a convex combination of the values of
the visible keys whose scores, even with their error bounds, can weigh
(``attention_value_hull``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from verify import metrics
from verify.capabilities import Capabilities
from verify.dtypes import FloatFormat, get_format
from verify.oracle import AttentionTruth, SoftmaxTruth
from verify.rounding import round_to_format, ulp


#: A bound on the error of exp's argument above this makes a first-order analysis meaningless.
ILL_CONDITIONED_ARGUMENT_ERROR = 0.25


@dataclass(frozen=True)
class ToleranceModel:
    """Precision claims of a target, and the policy's constants."""

    compute: FloatFormat
    dot: FloatFormat
    probs_rounded_to_input: bool = True
    flushes_subnormals: bool = False  # see underflow_bound
    exp_ulps: float = 2.0
    safety: float = 1.25

    @classmethod
    def for_target(cls, caps: Capabilities, dtype: str) -> "ToleranceModel":
        compute, dot = get_format(caps.compute_format(dtype)), get_format(caps.dot_format(dtype))
        return cls(
            compute=compute,
            dot=dot,
            probs_rounded_to_input=caps.probs_rounded_to_input,
            # declared, or implied by a dot narrower than the compute format (TF32's tensor cores
            # read subnormal V as 0)
            flushes_subnormals=caps.flushes_subnormals or dot.precision < compute.precision,
        )

    def describe(self) -> str:
        p = ", P rounded to input dtype" if self.probs_rounded_to_input else ""
        ftz = ", subnormals flushed" if self.flushes_subnormals else ""
        return (f"compute {self.compute.name}, dot {self.dot.name}{p}{ftz}, exp {self.exp_ulps:g} ulp, "
                f"safety {self.safety:g}")


def _conversion(u_c: float, fin: FloatFormat, c: FloatFormat) -> float:
    """u_c if inputs must be rounded into the compute precision, else 0."""
    return u_c if fin.precision > c.precision else 0.0


def _weighted(p: torch.Tensor, rel: torch.Tensor) -> torch.Tensor:
    """p * rel, with 0 where p == 0 (an exactly-zero weight carries no error even if rel overflowed)."""
    return torch.where(p > 0, p * rel, torch.zeros_like(p))


def _gamma(n: int, u: float) -> float:
    return n * u / (1 - n * u) if n * u < 1 else float("inf")


def _finite_rows(x: torch.Tensor, truth: SoftmaxTruth):
    """x in float64 with non-finite rows zeroed, the row max (keepdim), |x - max| (0 where it
    overflows or x is -inf), the oracle's probabilities (0 outside finite rows), and the mask."""
    x64 = x.detach().to(torch.float64).to(truth.probs.hi.device)
    finite_row = (truth.row_status == 0)[..., None]
    xs = torch.where(finite_row, x64, torch.zeros_like(x64))
    m = xs.max(-1, keepdim=True).values
    absd = (xs - m).abs()
    absd = torch.where(torch.isfinite(absd), absd, torch.zeros_like(xs))
    p = torch.where(finite_row, truth.probs.hi, torch.zeros_like(xs))
    return xs, m, absd, p, finite_row


def _exp_error(absd: torch.Tensor, model: ToleranceModel) -> torch.Tensor:
    """Relative error of exp(x - m) in the compute precision: the rounded argument, then exp itself."""
    return model.compute.unit_roundoff * (2 * absd + 2 * model.exp_ulps)


def _sum_error(p: torch.Tensor, rel_e: torch.Tensor, u_c: float) -> torch.Tensor:
    """Relative error bound of S = sum_j exp(d_j): weighted exp errors plus gamma_{n-1} (keepdim)."""
    return _weighted(p, rel_e).sum(-1, keepdim=True) + _gamma(max(p.shape[-1] - 1, 0), u_c)


def _softmax_terms(x: torch.Tensor, truth: SoftmaxTruth, model: ToleranceModel):
    """The oracle's probabilities p (0 outside finite rows), each element's relative error
    bound of exp(d_j) in c including the input's conversion (rel_e), the row sum's relative
    error bound eps_S (keepdim), and the mask of finite rows (keepdim)."""
    c = model.compute
    u_c = c.unit_roundoff
    xs, m, absd, p, finite_row = _finite_rows(x, truth)
    conv = torch.zeros_like(xs)
    if _conversion(u_c, get_format(x.dtype), c):
        conv = u_c * (xs.abs() + m.abs())
        conv = torch.where(torch.isfinite(conv), conv, torch.full_like(conv, float("inf")))
    rel_e = _exp_error(absd, model) + conv
    return p, rel_e, _sum_error(p, rel_e, u_c), finite_row


def softmax_tolerance_ulps(
    x: torch.Tensor, truth: SoftmaxTruth, target: str | FloatFormat, model: ToleranceModel
) -> torch.Tensor:
    """Per-element tolerance in ULPs of T for softmax outputs of finite rows (NaN elsewhere)."""
    fmt = get_format(target)
    c = model.compute
    p, rel_e, eps_S, finite_row = _softmax_terms(x, truth, model)
    rel_p = rel_e + eps_S + 2 * c.unit_roundoff
    tol_abs = model.safety * (_weighted(p, rel_p) + 2 * c.smallest_normal) + ulp(p, fmt) / 2
    tol = tol_abs / ulp(p, fmt)
    return torch.where(finite_row.expand_as(tol), tol, torch.full_like(tol, float("nan")))


#: Room, in units of u_c, for parts of one row whose normalizers differ by a few roundings
#: (chunks of a split row, each merging the chunk statistics itself).
NORMALIZER_MARGIN = 4.0


def softmax_spread_bound(
    x: torch.Tensor, truth: SoftmaxTruth, target: str | FloatFormat, model: ToleranceModel
) -> torch.Tensor:
    """Per-element bound A_j on a softmax output's relative error apart from its row's
    normalizer (NaN outside finite rows, inf where p_j = 0).

    Every output of a row is divided by the same computed sum S^ = S (1 + eps), so a correct
    output is y^_j = y_j (1 + e_j) / (1 + eps) with one eps a row and
        |e_j| <= A_j = safety [u_c (2|d_j| + 2 k_exp) + conv_j + (2 + NORMALIZER_MARGIN) u_c
                               + 2 tiny_c / p_j] + ulp_T(p_j (1 + D_j)) / (2 p_j (1 - D_j))
                               + oracle bound_j / p_j:
    the terms of the element tolerance without eps_S, and the final rounding taken at the
    largest value the output may have before it, p_j (1 + D_j) with D_j the element's whole
    relative bound (a common factor can carry p_j into the next binade, where the ulp is
    twice as large), over the smallest, p_j (1 - D_j).  ``verify.contracts`` checks that one
    eps fits every element of the row.  eps_S (with gamma_{n-1}) grows with the row; A_j does not,
    so an error confined to some elements (a block, a chunk, the ragged tail, a cheaper exp
    on long rows) cannot hide under the long row's summation bound.
    """
    fmt = get_format(target)
    c = model.compute
    p, rel_e, eps_S, finite_row = _softmax_terms(x, truth, model)
    own = model.safety * (rel_e + (2 + NORMALIZER_MARGIN) * c.unit_roundoff)
    whole = (model.safety * (rel_e + eps_S + 2 * c.unit_roundoff)).clamp(max=0.5)
    rounding = ulp(p * (1 + whole), fmt) / (2 * (1 - whole))
    floor = model.safety * 2 * c.smallest_normal + rounding + truth.probs.bound
    spread = torch.where(p > 0, own + floor / p, torch.full_like(p, float("inf")))
    return torch.where(finite_row.expand_as(spread), spread, torch.full_like(spread, float("nan")))


#: The summation-bias check judges rows of at least BIAS_MIN_LENGTH entries whose terms round
#: without a bias of their own (see ``softmax_bias_bound``).
BIAS_MIN_LENGTH = 2048
#: Terms below BIAS_SMALL_TERM u_c of the row's sum may be lost whole, or in part, to the
#: partial sums (rounded to nearest, a term under half an ulp of the partial sum is): the
#: bound takes each at its worst, min(p_j, u_c).
BIAS_SMALL_TERM = 4.0
#: The rounding-balance test: at the partial sums' coarsest spacings, the sum of the other
#: terms' rounding residues stays within BIAS_BALANCE sqrt(sum_v c_v^2) (c_v: how often each
#: distinct term occurs); residues spread evenly have a standard deviation of 0.29 of that.
BIAS_BALANCE = 2.0
#: Repeated terms: up to this many copies of each on average (sum_v c_v^2 <= BIAS_REPEATS n)
#: the random part stays lambda sqrt(n - 1) u_c, as measured (the check judged rows with a
#: sixteenth of their terms distinct from 2026-12-03 to 12-07, sums within 1.30 sqrt(n) u_c);
#: past it, it grows as sqrt(sum_v c_v^2 / BIAS_REPEATS).
BIAS_REPEATS = 16.0
#: The spacings, in units of u_c times the row's sum: ulp(S) and the three binades below it,
#: each at three scalings (an online kernel sums blocks in frames that differ by exp(m - m_b)).
BIAS_SPACINGS = tuple(2.0 ** -k * f for k in (-1, 0, 1, 2) for f in (1.0, 0.75, 0.6))
#: Elements of p that ``_sum_rounding_bound`` takes at a time.
BIAS_CHUNK = 1 << 24
#: lambda of the probabilistic bound lambda sqrt(n) u_c, and the bound on the chance that a
#: sum rounded to nearest exceeds it (2 n exp(-lambda^2 / 2) at n = 2**16: 1.7e-9).
BIAS_LAMBDA = 8.0
BIAS_FAILURE_PROBABILITY = 2.0 * 2 ** 16 * math.exp(-BIAS_LAMBDA ** 2 / 2)


def _records(x: torch.Tensor) -> torch.Tensor:
    """How many times the running maximum of each row (last dim) rises, scanning forward."""
    top = torch.cummax(x, -1).values
    before = torch.cat([torch.full_like(x[..., :1], -math.inf), top[..., :-1]], -1)
    return (x > before).sum(-1)


def _multiplicity_energy(values: torch.Tensor, counted: torch.Tensor) -> torch.Tensor:
    """sum_v c_v^2 per row (last dim), c_v how many ``counted`` entries hold the value v."""
    key = torch.where(counted, values, torch.full_like(values, math.nan))
    srt = torch.sort(key, -1).values  # NaN (not counted) sort last
    new_run = torch.ones_like(srt, dtype=torch.bool)
    new_run[..., 1:] = srt[..., 1:] != srt[..., :-1]
    run = torch.cumsum(new_run.to(torch.int64), -1) - 1
    counts = torch.zeros(srt.shape, dtype=torch.float64, device=srt.device)
    counts.scatter_add_(-1, run, (~torch.isnan(srt)).to(torch.float64))
    return (counts * counts).sum(-1)


def softmax_bias_bound(x: torch.Tensor, truth: SoftmaxTruth, model: ToleranceModel) -> torch.Tensor:
    """Per row (shape ``x.shape[:-1]``), a probabilistic bound on the relative error of the
    row's normalizer, NaN where the row does not qualify.

    The element tolerance holds the sum S to the worst case gamma_{n-1} ~ n u_c, which a sum
    rounded toward zero (relative error ~ n u_c / 3, measured) also meets.  Under the
    probabilistic model of rounding (each rounding error independent with mean zero), a sum of
    n terms in any order is within lambda sqrt(n-1) u_c of S (first order) except with
    probability at most 2 n exp(-lambda^2 / 2) (Higham & Mary, "A new approach to probabilistic
    rounding error analysis", SIAM J. Sci. Comput. 41(5), 2019).  The model fails where the
    terms themselves round one way:
    - a term below half an ulp of the partial sum is lost whole.  Terms p_j < BIAS_SMALL_TERM
      u_c (p normalized to sum 1) are taken at their worst, min(p_j, u_c) each;
    - a term repeated, or many terms in a band narrower than an ulp, round the same way at the
      same spacing.  The row qualifies only if, at each of the partial sums' coarsest spacings
      h (ulp(S) and three binades below it, each at three scalings: ``BIAS_SPACINGS``), the
      other terms' residues r_j = round(p_j / h) - p_j / h sum to within
      BIAS_BALANCE sqrt(sum_v c_v^2) (c_v how often each distinct term occurs; residues spread
      evenly give 0.29 of that);
    - an online kernel rescales its sum at each new running maximum, with whatever bias its
      exp has: the running maximum may rise at most 3 ln(n) + 10 times scanning either way
      (an iid row: ln(n) + 0.6 on average; a sorted one at every step).
    And the row is long (n >= BIAS_MIN_LENGTH) and finite (-inf entries are exact zeros).
    Repeated terms' errors are alike within a binade, so past BIAS_REPEATS copies a term on
    average the random part counts them together: sqrt(max(n - 1, sum_v c_v^2 / BIAS_REPEATS))
    in place of sqrt(n - 1); a row where that and the small terms come to the worst case
    gamma_{n-1} or more (a dominant entry over many equal ones) is not judged: the element
    tolerance already holds it there.

    bound = safety [sum_j p_j rel_e_j + lambda sqrt(max(n-1, sum_v c_v^2 / BIAS_REPEATS)) u_c
                    + sum_{p_j < BIAS_SMALL_TERM u_c} min(p_j, u_c) + (2 + NORMALIZER_MARGIN) u_c]:
    the exponentials' errors that enter S, the sum's rounding, the small terms, the division.
    ``bench/summation_bias.py`` (2026-12-07, 8 rows a family): float32 sums of the rows it
    judges (well mixed, normal with spreads 1 to 8, half masked, an outlier, two levels e^10
    apart; float32, float16 and bfloat16 inputs, n = 2048 and 16384) rounded to nearest,
    sequential, sorted both ways, pairwise, blocked and online, stayed within 0.46 of the bound
    without its safety factor (narrow-band rows it judged, 7 of 8 float32 rows of 2048, within
    0.52); rows of a narrow band it does not judge went to 4.5 of
    the bound distinct terms would get, and a dominant entry over equal ones to 2.0.
    """
    c = model.compute
    n = x.shape[-1]
    if n < BIAS_MIN_LENGTH:
        return torch.full(x.shape[:-1], float("nan"), dtype=torch.float64, device=truth.probs.hi.device)
    p, rel_e, _, finite_row = _softmax_terms(x, truth, model)
    finite_row = finite_row[..., 0]
    xs = torch.where(finite_row[..., None], x.detach().to(torch.float64).to(p.device), torch.zeros_like(p))
    rounding = _sum_rounding_bound(p, xs, finite_row, c)
    return model.safety * (_weighted(p, rel_e).sum(-1) + rounding + (2 + NORMALIZER_MARGIN) * c.unit_roundoff)


def _sum_rounding_bound(p: torch.Tensor, order: torch.Tensor, finite_row: torch.Tensor, c: FloatFormat) -> torch.Tensor:
    """The rounding part of ``softmax_bias_bound`` (no safety factor, no exponentials' errors,
    no division): lambda sqrt(max(n - 1, sum_v c_v^2 / BIAS_REPEATS)) u_c plus the small terms
    at their worst, per row of ``p`` (probabilities, last dim, 0 outside ``finite_row``); NaN
    where the row does not qualify.  ``order``: values in the order the row is summed (the
    input, or the scores), for the running maximum's records.  Rows go BIAS_CHUNK elements at a
    time: the tests hold several temporaries of p's size (a 16k x 16k head is 2 GiB a copy)."""
    n = p.shape[-1]
    lead = p.shape[:-1]
    p2, order2, fin2 = p.reshape(-1, n), order.reshape(-1, n), finite_row.reshape(-1)
    step = max(1, BIAS_CHUNK // n)
    parts = [_sum_rounding_rows(p2[r:r + step], order2[r:r + step], fin2[r:r + step], c)
             for r in range(0, p2.shape[0], step)]
    return (torch.cat(parts) if parts else p2.new_zeros(0)).reshape(lead)


def _sum_rounding_rows(p: torch.Tensor, order: torch.Tensor, finite_row: torch.Tensor, c: FloatFormat) -> torch.Tensor:
    """``_sum_rounding_bound`` of rows (2-D)."""
    u_c = c.unit_roundoff
    n = p.shape[-1]
    small = p < BIAS_SMALL_TERM * u_c
    counted = ~small
    lost = torch.where(small, torch.clamp(p, max=u_c), torch.zeros_like(p)).sum(-1)
    energy = _multiplicity_energy(round_to_format(p, c), counted).clamp(min=1.0)
    balance = torch.zeros_like(lost)
    for spacing in BIAS_SPACINGS:
        y = p / (spacing * u_c)
        residues = torch.where(counted, torch.round(y) - y, torch.zeros_like(y)).sum(-1)
        balance = torch.maximum(balance, residues.abs())
    records = torch.maximum(_records(order), _records(order.flip(-1)))
    spread = BIAS_LAMBDA * torch.sqrt(torch.clamp(energy / BIAS_REPEATS, min=n - 1)) * u_c
    qualifies = (finite_row & (balance <= BIAS_BALANCE * energy.sqrt())
                 & (records <= 3 * math.log(n) + 10) & (spread + lost < _gamma(n - 1, u_c)))
    return torch.where(qualifies, spread + lost, torch.full_like(lost, float("nan")))


def lse_tolerance_units(
    x: torch.Tensor, truth: SoftmaxTruth, target: str | FloatFormat, model: ToleranceModel,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """Per-row tolerance of the log-sum-exp in units of u_T * max(1, |LSE|) (``metrics.lse_error``;
    T the LSE's format), NaN for non-finite rows.

    log S^ = log S + log(1 + eps_S): the sum's relative error enters as an absolute one.  With
    ``bias`` (``softmax_bias_bound``, a row's shape), a row it judges takes its probabilistic
    bound (less the safety factor, applied once below) for eps_S in place of the worst case
    gamma_{n-1}: the LSE is the log of the sum the outputs divide by, so one held to ~8 sqrt(n)
    u there cannot be ~n u off here."""
    fmt = get_format(target)
    c = model.compute
    u_c = c.unit_roundoff
    xs, m, absd, p, finite_row = _finite_rows(x, truth)
    m, finite_row = m[..., 0], finite_row[..., 0]
    eps_S = _sum_error(p, _exp_error(absd, model), u_c)[..., 0]
    if bias is not None:
        judged = torch.isfinite(bias).to(eps_S.device)
        eps_S = torch.where(judged, torch.minimum(eps_S, bias.to(eps_S.device) / model.safety), eps_S)
    lse = torch.where(finite_row, truth.lse.hi, torch.zeros_like(m))
    log_s = lse - m
    conv = u_c * m.abs() if _conversion(u_c, get_format(x.dtype), c) else 0.0
    err = eps_S + 2 * model.exp_ulps * u_c * log_s.abs() + 2 * u_c * m.abs() + u_c * lse.abs() + conv
    return _lse_units(err, lse, truth.lse.bound, finite_row, fmt, model)


def _lse_units(err: torch.Tensor, lse: torch.Tensor, oracle_bound: torch.Tensor, finite_row: torch.Tensor,
               fmt: FloatFormat, model: ToleranceModel) -> torch.Tensor:
    """An LSE error bound ``err`` (absolute) as a tolerance in units of u_T * max(1, |LSE|):
    with the safety factor, the oracle's own uncertainty and the final rounding to T; inf where
    the bound overflows, NaN outside finite rows."""
    bound = torch.where(finite_row, oracle_bound, torch.zeros_like(lse))
    tol = (model.safety * err + bound + ulp(lse, fmt) / 2) / metrics.lse_scale(lse, fmt)
    tol = torch.where(torch.isfinite(tol), tol, torch.full_like(tol, float("inf")))
    return torch.where(finite_row, tol, torch.full_like(tol, float("nan")))


def attention_lse_tolerance_units(
    q_dtype: torch.dtype, truth: AttentionTruth, target: str | FloatFormat, model: ToleranceModel
) -> torch.Tensor:
    """Per-row tolerance of the attention log-sum-exp ``LSE_i = log sum_j exp(s_ij)`` over the
    visible keys, in units of u_T * max(1, |LSE|) (``metrics.lse_error``; T the LSE's format);
    NaN outside finite rows.

    The LSE is 1-Lipschitz in the max norm of the scores: score errors delta_j move it by at
    most max_j delta_j, and to first order by sum_j p_j delta_j.  With the notation above,
      err = sum_j p_j (delta_j + u_c (2|d_j| + 2 k_exp)) + gamma_Nk + 2 u_c Nk
            + 2 k_exp u_c |log S| + 2 u_c (|m| + |LSE|)
      delta_j = |scale| sum_d |q_d k_jd| (2 u_dot_in + gamma_D + u_c)
    (the shifted exponentials, their sum rescaled at every key block, the log, adding the max
    back and a change of base).  Rows whose largest delta_j passes ILL_CONDITIONED_ARGUMENT_ERROR
    take max_j delta_j, which holds at any size, in place of the first-order sum.  Rows of at
    least BIAS_MIN_LENGTH keys whose terms round without bias (``softmax_bias_bound``'s tests on
    p and the scores' order) take its probabilistic bound, plus 2 u_c, for gamma_Nk + 2 u_c Nk.
    """
    if truth.probs is None or truth.abs_scores is None or truth.shifted is None:
        raise ValueError("the attention LSE tolerance needs the truth's per-score fields (a whole case or one slice)")
    fmt = get_format(target)
    fin = get_format(q_dtype)
    c = model.compute
    u_c = c.unit_roundoff
    D = truth.out.hi.shape[-1]
    Nk = truth.probs.shape[-1]
    u_dot_in = model.dot.unit_roundoff if fin.precision > model.dot.precision else 0.0
    p = truth.probs
    finite_row = truth.row_status == 0
    delta = truth.abs_scores * (2 * u_dot_in + _gamma(D, u_c) + u_c)
    delta = torch.where(p > 0, delta, torch.zeros_like(delta))
    absd = torch.where(torch.isfinite(truth.shifted), truth.shifted.abs(), torch.zeros_like(p))
    weighted_delta = _weighted(p, delta).sum(-1)
    exp_part = _weighted(p, u_c * (2 * absd + 2 * model.exp_ulps)).sum(-1)
    largest = delta.amax(-1)
    scores = torch.where(largest > ILL_CONDITIONED_ARGUMENT_ERROR, largest, weighted_delta)
    lse = torch.where(finite_row, truth.lse.hi, torch.zeros_like(largest))
    # the max score weighs 1/S: log S = -log(max_j p_j)
    log_s = -torch.log(torch.where(finite_row, p.amax(-1), torch.ones_like(largest)))
    m = lse - log_s
    sum_part = torch.full_like(largest, _gamma(Nk, u_c) + 2 * u_c * Nk)
    if Nk >= BIAS_MIN_LENGTH:
        # a row whose terms round without bias: its sum within the probabilistic bound (the
        # rescales at each new running maximum, few there, inside its lambda), as for softmax.
        # The scores' order from ``shifted`` (-inf where not visible); a row that is not finite
        # (NaN there) is NaN whatever p and the order hold.
        rounding = _sum_rounding_bound(p, truth.shifted, finite_row, c)
        sum_part = torch.where(torch.isfinite(rounding), torch.minimum(sum_part, rounding + 2 * u_c), sum_part)
    err = (scores + exp_part + sum_part + 2 * model.exp_ulps * u_c * log_s.abs()
           + 2 * u_c * (m.abs() + lse.abs()))
    return _lse_units(err, lse, truth.lse.bound, finite_row, fmt, model)


def probs_rounding_parts(q_dtype: torch.dtype, model: ToleranceModel) -> tuple[float, float]:
    """(``u_P``, ``u_TF32``): the relative error of one weight as it enters the P V product,
    beyond the compute precision, from P rounded to the input dtype (FlashAttention: ``u_in``)
    and from P and V rounded to a narrower dot format (TF32: ``2 u_dot``).  0 where it does not
    happen."""
    fin = get_format(q_dtype)
    c = model.compute
    u_p = fin.unit_roundoff if (model.probs_rounded_to_input and fin.precision < c.precision) else 0.0
    # operands of the P V product rounded to a narrower dot format (TF32): P and V each once
    u_dot = 2 * model.dot.unit_roundoff if model.dot.precision < min(fin.precision, c.precision) else 0.0
    return u_p, u_dot


def probs_rounding(q_dtype: torch.dtype, model: ToleranceModel) -> float:
    """Relative error of one weight as it enters the P V product, beyond the compute precision
    (the sum of :func:`probs_rounding_parts`).  Zero when neither rounding happens."""
    return sum(probs_rounding_parts(q_dtype, model))


def hull_relative_slack(q_dtype: torch.dtype, target: str | FloatFormat, model: ToleranceModel) -> float:
    """How far, relative to max |v|, a correct output may sit outside the hull of the values.

    ``O = sum_j fl(p_j) v_j / l`` with ``l = sum_j p_j`` taken before ``p`` is rounded
    (FlashAttention), so the weights sum to ``1 + O(u_p)``, not 1; the output's final
    rounding to the target format adds ``u_out``.  Float32-level rounding of the sums is
    added by the contract, which knows ``Nk``.
    """
    u_p = probs_rounding(q_dtype, model)
    u_out = get_format(target).unit_roundoff
    return u_p + u_out + u_p * u_out


def attention_tolerance_units(
    q: torch.Tensor, v: torch.Tensor, truth: AttentionTruth, target: str | FloatFormat, model: ToleranceModel
) -> torch.Tensor:
    """Per-element tolerance in condition units (see module docstring); NaN outside finite rows."""
    fmt = get_format(target)
    fin = get_format(q.dtype)
    c = model.compute
    u_c = c.unit_roundoff
    D = q.shape[-1]
    Nk = v.shape[-2]
    group = q.shape[1] // v.shape[1]
    dev = truth.out.hi.device
    vabs = v.detach().to(torch.float64).to(dev).repeat_interleave(group, dim=1).abs()
    vabs = torch.nan_to_num(vabs, nan=0.0, posinf=0.0)
    u_dot_in = model.dot.unit_roundoff if fin.precision > model.dot.precision else 0.0
    p = truth.probs
    absd = torch.where(torch.isfinite(truth.shifted), truth.shifted.abs(), torch.zeros_like(p))
    rel = truth.abs_scores * (2 * u_dot_in + _gamma(D, u_c) + u_c) + u_c * (2 * absd + 2 * model.exp_ulps)
    pr = _weighted(p, rel)
    eps_l = pr.sum(-1, keepdim=True) + _gamma(Nk, u_c) + 2 * u_c * Nk
    u_p, u_tf32 = probs_rounding_parts(q.dtype, model)
    cond = truth.cond
    weighted = pr @ vabs
    flush = (2 * c.smallest_normal + (fin.smallest_subnormal / 2 if u_p + u_tf32 else 0.0)) * vabs.sum(-2, keepdim=True)
    num = weighted + cond * (eps_l + _gamma(Nk, u_c) + u_tf32 + 2 * u_c) + flush + underflow_bound(Nk, model)
    denom = torch.clamp(fmt.unit_roundoff * cond, min=fmt.smallest_subnormal)
    # P's rounding to the input dtype is an exact first-order bound: no safety factor (module doc).
    tol = 1.0 + (model.safety * num + u_p * (1.0 + fmt.unit_roundoff) * cond) / denom
    # Where a score's error bound reaches ~1, exp() turns it into an O(1) relative error and a
    # first-order bound says nothing about the output's digits; the contract checks such rows
    # against the hull of the values their keys can weigh (attention_value_hull).  Such rows get
    # an infinite tolerance and are counted.
    ill = ill_conditioned_rows(q.dtype, D, truth, model)
    tol = torch.where(ill[..., None], torch.full_like(tol, float("inf")), tol)
    finite = (truth.row_status == 0)[..., None] & ~truth.expected_nonfinite
    return torch.where(finite, tol, torch.full_like(tol, float("nan")))


def underflow_bound(n_keys: int, model: ToleranceModel) -> float:
    """Absolute error of one attention output from results below the compute format c's
    smallest normal tiny_c: (Nk + 1) s_c with IEEE gradual underflow (s_c c's smallest
    subnormal), (2 Nk + 1) tiny_c where the target flushes them to zero.

    There no relative bound holds.  A product p_j v_jd, a rescale of the accumulator by alpha,
    or the final division by l whose result is below tiny_c rounds to c's subnormal grid, an
    absolute error of up to s_c / 2 (additions are exact there); flushed to zero instead, less
    than tiny_c.  An output has at most Nk products, at most Nk rescales (one a key block) and
    one division, (2 Nk + 1) s_c / 2 in all, bounded by (Nk + 1) s_c, which float64 holds
    where s_c / 2 rounds to 0 (a float64 case failed at 2 subnormals against that 0, 2026-12-07);
    dividing by l >= 1 only shrinks the accumulator's part.  Flushing counts where the model
    says so (``ToleranceModel.for_target``: the target declares
    ``Capabilities.flushes_subnormals``, or takes a dot narrower than its compute format, TF32,
    whose tensor cores read subnormal V as 0, found on the H200 with v = -4e-42).  It matters
    only where outputs lie within a few thousand s_c (or tiny_c) of 0: V drawn near its
    format's smallest normal (the near-underflow kind).
    """
    c = model.compute
    return (2 * n_keys + 1) * c.smallest_normal if model.flushes_subnormals else (n_keys + 1) * c.smallest_subnormal


def score_error_bound(q_dtype: torch.dtype, head_dim: int, truth: AttentionTruth, model: ToleranceModel) -> torch.Tensor:
    """(B, Hq, Nq, Nk): first-order bound on the error of exp's argument for each visible key,
    ``|scale| sum_d |q_d k_jd| (2 u_dot_in + gamma_D + u_c) + 2 u_c |d_j|`` (the score's dot
    product, then the shift by the row max); 0 for keys the row does not see."""
    if truth.abs_scores is None or truth.shifted is None:
        raise ValueError("the score error bound needs the truth's per-score fields (a whole case or one slice)")
    visible = truth.visible if truth.visible is not None else torch.isfinite(truth.shifted)
    bound = _argument_error(truth.abs_scores, truth.shifted, q_dtype, head_dim, model)
    return torch.where(visible, bound, torch.zeros_like(bound))


def _argument_error(abs_scores: torch.Tensor, shifted: torch.Tensor, q_dtype: torch.dtype, head_dim: int,
                    model: ToleranceModel) -> torch.Tensor:
    """score_error_bound's formula, elementwise, on any slice of the per-score fields."""
    u_c = model.compute.unit_roundoff
    u_dot_in = model.dot.unit_roundoff if get_format(q_dtype).precision > model.dot.precision else 0.0
    absd = torch.where(torch.isfinite(shifted), shifted.abs(), torch.zeros_like(shifted))
    return abs_scores * (2 * u_dot_in + _gamma(head_dim, u_c) + u_c) + u_c * 2 * absd


def ill_conditioned_rows(q_dtype: torch.dtype, head_dim: int, truth: AttentionTruth,
                         model: ToleranceModel) -> torch.Tensor:
    """(B, Hq, Nq): the rows attention_tolerance_units gives an infinite tolerance for their
    scores: some visible score's argument error may pass ILL_CONDITIONED_ARGUMENT_ERROR (or is
    unbounded), and only the hull judges them.  Unlike that tolerance it does not read the
    truth's output or condition number, so it holds for a truth whose uncertified rows have
    neither yet."""
    bound = score_error_bound(q_dtype, head_dim, truth, model)
    return (bound.amax(-1) > ILL_CONDITIONED_ARGUMENT_ERROR) | ~torch.isfinite(bound).all(-1)


#: The value hull of an ill-conditioned row (attention_value_hull): a computed score is taken to
#: be within HULL_MARGIN times its first-order error bound of the exact one, and keys that even
#: so fall HULL_CUTOFF below the least the row's best score can be are left out of the hull,
#: their largest possible total weight (at most exp(-HULL_CUTOFF) each) added to its slack.
HULL_MARGIN = 4.0
HULL_CUTOFF = 40.0
#: Elements of the (rows, keys, Dv) selection a chunk of attention_value_hull builds at once.
HULL_CHUNK = 1 << 22


def attention_value_hull(
    q: torch.Tensor, v: torch.Tensor, truth: AttentionTruth, model: ToleranceModel, tol: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per output element (B, Hq, Nq, Dv): bounds that the output of a kernel within ``model``
    lies in, for the rows ``tol`` (attention_tolerance_units of the same truth and model) calls
    ill-conditioned (infinite tolerance); -inf and +inf for every other element (the tolerance
    governs those).  Score error bounds are evaluated for those rows alone.

    Contract: an attention output is sum_j w_j v_j / sum_j w_j with w_j = exp(s'_j - max s'),
    s'_j the computed score of a visible key.  With |s'_j - s_j| <= delta_j (HULL_MARGIN times
    score_error_bound) and L = max_j (s_j - delta_j) - max s, the row's best computed score is at
    least L above the exact max, so a key with d_j + delta_j < L - HULL_CUTOFF weighs at most
    exp(d_j + delta_j - L) against a total of at least 1.  The output is then within the hull of
    the other visible keys' values, give or take 2 tau max_j |v_jd|, tau the sum of those
    weights' bounds.  Masked keys never enter.  The rounding of the sums and of P is left to the
    contract's slack (``hull_relative_slack``).  A row with one clear winner is held to that
    key's value row, where the hull of all keys let a kernel answer with any value row (a
    masked one included) once the scores were ill-conditioned.
    """
    shape = truth.out.hi.shape
    lo = torch.full(shape, -math.inf, dtype=torch.float64, device=truth.out.hi.device)
    hi = torch.full_like(lo, math.inf)
    rows = torch.isinf(tol).any(-1) & (truth.row_status == 0)
    if not rows.any():
        return lo, hi
    group = shape[1] // v.shape[1]
    v64 = torch.nan_to_num(v.detach().to(torch.float64).to(lo.device), nan=0.0, posinf=0.0, neginf=0.0)
    nk = v64.shape[-2]
    for b, h in torch.nonzero(rows.any(-1)).tolist():
        values = v64[b, h // group]  # (Nk, Dv)
        which = torch.nonzero(rows[b, h]).flatten()
        step = max(1, HULL_CHUNK // (nk * values.shape[-1]))
        for start in range(0, which.numel(), step):
            i = which[start:start + step]
            d = truth.shifted[b, h, i]
            visible = torch.isfinite(d)
            delta = HULL_MARGIN * _argument_error(truth.abs_scores[b, h, i], d, q.dtype, q.shape[-1], model)
            delta = torch.where(visible, delta, torch.zeros_like(delta))
            finite = torch.isfinite(delta).all(-1, keepdim=True)
            least = torch.where(visible, d - delta, torch.full_like(d, -math.inf)).amax(-1, keepdim=True)
            reach = torch.where(visible, d + delta - least, torch.full_like(d, -math.inf))
            kept = visible & ((reach >= -HULL_CUTOFF) | ~finite)
            tau = torch.where(visible & ~kept, torch.exp(reach), torch.zeros_like(d)).sum(-1, keepdim=True)
            mag = torch.where(visible[..., None], values.abs(), torch.zeros(())).amax(-2)
            sel = kept[..., None]
            low = torch.where(sel, values, torch.full((), math.inf, dtype=torch.float64)).amin(-2)
            high = torch.where(sel, values, torch.full((), -math.inf, dtype=torch.float64)).amax(-2)
            lo[b, h, i] = low - 2 * tau * mag
            hi[b, h, i] = high + 2 * tau * mag
    return lo, hi
