"""How far float32 sums of a softmax row's exponentials stray, against the bound of
``verify.tolerance.softmax_bias_bound`` (a measurement behind it, not a test).

Row families (each row checked for whether the bias check judges it): well mixed
(``strategies.values.well_mixed``'s uniform entries), normal entries of spread 1, 2, 4 and 8,
normal entries with half of them masked (-inf), normal entries with one outlier 12 above,
two levels e^10 apart.  Each judged row's exponentials are summed in float32 seven ways:
rounded to nearest one entry after another, the same over the row sorted ascending and
descending, pairwise (a balanced tree), in blocks of 128 then across the blocks, online (blocks
of 1024 under a running maximum, the partial sum rescaled at each new one), and one entry after
another rounded toward zero.  Each sum's relative error is divided by the row's bound without
its safety factor (the bound / ``model.safety``).  Then two structured families the check does
not judge (a dominant entry over n - 1 equal ones; most entries in a band narrower than an ulp
of the sum): their sums rounded to nearest, against the bound distinct, balanced terms would get, show
why.

Prints a table, then as its LAST line one JSON object
{"nearest_max": X, "toward_zero_min": {family: Y}, "structured_max": Z, "lambda": L}: X the
largest error / bound of the sums rounded to nearest over the judged rows, Y each family's
smallest of the sums rounded toward zero, Z the largest of the structured rows it does not judge (rounded to nearest),
L the bound's lambda.  A structured row the check judges counts in X.

    python bench/summation_bias.py [--rows 8] [--lengths 2048,16384]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Callable

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from verify import oracle, tolerance  # noqa: E402
from verify.capabilities import Capabilities  # noqa: E402

Family = Callable[[int, int, torch.Generator], torch.Tensor]


def _add(s: torch.Tensor, v: torch.Tensor, toward_zero: bool) -> torch.Tensor:
    exact = s.double() + v.double()  # exact: two float32 of these magnitudes
    r = exact.float()
    if toward_zero:
        r = torch.where(r.double().abs() > exact.abs(), torch.nextafter(r, torch.zeros_like(r)), r)
    return r


def sequential(p: torch.Tensor, toward_zero: bool = False) -> torch.Tensor:
    s = torch.zeros(p.shape[0], dtype=torch.float32)
    for j in range(p.shape[1]):
        s = _add(s, p[:, j], toward_zero)
    return s


def pairwise(p: torch.Tensor) -> torch.Tensor:
    while p.shape[1] > 1:
        if p.shape[1] % 2:
            p = torch.cat([p, torch.zeros_like(p[:, :1])], 1)
        p = p[:, 0::2] + p[:, 1::2]  # float32 adds, rounded to nearest
    return p[:, 0]


def blocked(p: torch.Tensor, block: int = 128) -> torch.Tensor:
    n = p.shape[1]
    pad = (-n) % block
    q = torch.cat([p, torch.zeros(p.shape[0], pad, dtype=p.dtype)], 1).reshape(p.shape[0], -1, block)
    partial = sequential(q.reshape(-1, block)).reshape(p.shape[0], -1)
    return sequential(partial)


def online(x32: torch.Tensor, block: int = 1024) -> torch.Tensor:
    """The sum of exp(x - max) as an online kernel forms it: blocks under a running maximum,
    the partial sum rescaled by exp(m_old - m_new) at each new one (all in float32)."""
    m = torch.full(x32.shape[:1], -math.inf)
    s = torch.zeros(x32.shape[:1])
    for b in range(0, x32.shape[1], block):
        xb = x32[:, b:b + block]
        m_new = torch.maximum(m, xb.amax(-1))
        s = s * torch.exp(m - m_new) + sequential(torch.exp(xb - m_new[:, None]))
        m = m_new
    return s


def _errors(x: torch.Tensor) -> dict[str, torch.Tensor]:
    """|sum / exact - 1| of each row, each way of summing."""
    x32 = x.float()
    p = torch.exp(x32 - x32.amax(-1, keepdim=True))
    exact = torch.exp(x.double() - x.double().amax(-1, keepdim=True)).sum(-1)
    sums = {"sequential": sequential(p), "ascending": sequential(torch.sort(p, -1).values),
            "descending": sequential(torch.sort(p, -1, descending=True).values), "pairwise": pairwise(p),
            "blocked-128": blocked(p), "online-1024": online(x32), "toward-zero": sequential(p, True)}
    return {k: (s.double() / exact - 1).abs() for k, s in sums.items()}


def _normal(spread: float) -> Family:
    return lambda rows, n, g: spread * torch.randn(rows, n, generator=g, dtype=torch.float64)


def _masked(rows: int, n: int, g: torch.Generator) -> torch.Tensor:
    x = 2 * torch.randn(rows, n, generator=g, dtype=torch.float64)
    return x.masked_fill(torch.rand(rows, n, generator=g) < 0.5, -math.inf)


def _outlier(rows: int, n: int, g: torch.Generator) -> torch.Tensor:
    x = torch.randn(rows, n, generator=g, dtype=torch.float64)
    x[:, n // 3] += 12
    return x


def _two_levels(rows: int, n: int, g: torch.Generator) -> torch.Tensor:
    x = 0.1 * torch.randn(rows, n, generator=g, dtype=torch.float64)
    x[:, ::2] -= 10
    return x


def _dominant(rows: int, n: int, g: torch.Generator) -> torch.Tensor:
    x = torch.full((rows, n), -1.0, dtype=torch.float64)
    x[:, 0] = 0.0
    return x


def _band(rows: int, n: int, g: torch.Generator) -> torch.Tensor:
    """Fifteen sixteenths of the entries within ~3e-4 of -2 (distinct in float32, but their
    exponentials in a band narrower than an ulp of the sum), the rest spread over [-1, 1]."""
    x = -2 + 1e-4 * torch.randn(rows, n, generator=g, dtype=torch.float64)
    x[:, :n // 16] = 2 * torch.rand(rows, n // 16, generator=g, dtype=torch.float64) - 1
    return x


FAMILIES: dict[str, Family] = {
    "well-mixed": lambda rows, n, g: 2.7 * torch.rand(rows, n, generator=g, dtype=torch.float64) - 1.35,
    "normal-1": _normal(1.0), "normal-2": _normal(2.0), "normal-4": _normal(4.0), "normal-8": _normal(8.0),
    "half-masked": _masked, "outlier": _outlier, "two-levels": _two_levels,
}
STRUCTURED: dict[str, Family] = {"dominant-tied": _dominant, "narrow-band": _band}
NEAREST = ("sequential", "ascending", "descending", "pairwise", "blocked-128", "online-1024")


def _bound_if_distinct(x: torch.Tensor, model: tolerance.ToleranceModel) -> torch.Tensor:
    """The bound a row would get were its terms distinct and balanced, without the safety
    factor: sum_j p_j rel_e_j + lambda sqrt(n - 1) u + the small terms + the division."""
    u = model.compute.unit_roundoff
    p, rel_e, _, _ = tolerance._softmax_terms(x, oracle.softmax_truth(x), model)
    small = p < tolerance.BIAS_SMALL_TERM * u
    lost = torch.where(small, p.clamp(max=u), torch.zeros_like(p)).sum(-1)
    spread = tolerance.BIAS_LAMBDA * math.sqrt(x.shape[-1] - 1) * u
    return tolerance._weighted(p, rel_e).sum(-1) + spread + lost + (2 + tolerance.NORMALIZER_MARGIN) * u


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=8)
    ap.add_argument("--lengths", default="2048,16384")
    args = ap.parse_args()
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(0)
    model = tolerance.ToleranceModel.for_target(Capabilities(), "float32")
    nearest, toward, structured = [], {}, []
    print(f"{'dtype':9} {'n':>6} {'family':13} judged  error / bound (no safety), rounded to nearest: "
          + " ".join(NEAREST) + " | toward zero (min)")
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        for n in (int(v) for v in args.lengths.split(",")):
            for name, family in {**FAMILIES, **STRUCTURED}.items():
                x = family(args.rows, n, gen).to(dtype)
                bound = tolerance.softmax_bias_bound(x, oracle.softmax_truth(x), model) / model.safety
                judged = torch.isfinite(bound)
                head = f"{str(dtype)[6:]:9} {n:6d} {name:13} {int(judged.sum()):2d}/{args.rows:<2d}  "
                errors = _errors(x)
                if name in STRUCTURED:
                    # rows it judges are held to their bound; the others, to what distinct terms would get
                    worst_in = max(float((errors[k] / bound)[judged].max()) if judged.any() else 0.0 for k in NEAREST)
                    nearest.append(worst_in)
                    worst = max(float((errors[k] / _bound_if_distinct(x, model))[~judged].max())
                                if (~judged).any() else 0.0 for k in NEAREST)
                    structured.append(worst)
                    print(head + f"worst sum rounded to nearest: judged rows {worst_in:.3f} of their bound, the "
                          f"others {worst:.2f} of the bound distinct terms would get")
                    continue
                if not bool(judged.any()):
                    print(head + "no row qualifies")
                    continue
                ratios = [float((errors[k] / bound)[judged].max()) for k in NEAREST]
                nearest += ratios
                tz = float((errors["toward-zero"] / bound)[judged].min())
                toward[name] = min(toward.get(name, math.inf), tz)
                print(head + " ".join(f"{r:5.3f}" for r in ratios) + f" | {tz:6.2f}")
    print(json.dumps({"nearest_max": max(nearest), "toward_zero_min": toward, "structured_max": max(structured),
                      "lambda": tolerance.BIAS_LAMBDA}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
