"""How far float32 sums of a softmax row's exponentials stray, in units of sqrt(n) u (a
measurement behind ``verify.tolerance.softmax_bias_bound``, not a test).

Rows the bias check judges (well mixed: ``strategies.values.well_mixed``'s uniform entries,
each row confirmed to qualify), summed in float32 five ways: rounded to nearest one entry
after another, the same over the sorted row, pairwise (a balanced tree), in blocks of 128
then across the blocks, and one after another rounded toward zero.  Then a structured row
the check does not judge (one entry over n - 1 equal ones), to show why: its sum rounded to
nearest is biased too.  Prints a table, then as its LAST line one JSON object
{"nearest_max": X, "toward_zero_min": Y, "lambda": L}: X the largest |error| / (sqrt(n) u)
of the sums rounded to nearest over the judged rows, Y the smallest of the sums rounded
toward zero, L the bound's lambda.

    python bench/summation_bias.py [--rows 16] [--lengths 2048,4096,16384]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from verify import oracle, tolerance  # noqa: E402
from verify.capabilities import Capabilities  # noqa: E402

U = 2.0 ** -24


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


def _errors(x: torch.Tensor) -> dict[str, torch.Tensor]:
    """|sum - exact| / (sqrt(n) u) of each row, each way of summing."""
    x32 = x.float()
    p = torch.exp(x32 - x32.amax(-1, keepdim=True))
    exact = p.double().sum(-1)
    scale = math.sqrt(p.shape[1]) * U
    sums = {"sequential": sequential(p), "sorted": sequential(torch.sort(p, -1).values),
            "pairwise": pairwise(p), "blocked-128": blocked(p), "toward-zero": sequential(p, True)}
    return {k: (s.double() / exact - 1).abs() / scale for k, s in sums.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=16)
    ap.add_argument("--lengths", default="2048,4096,16384")
    args = ap.parse_args()
    gen = torch.Generator().manual_seed(0)
    model = tolerance.ToleranceModel.for_target(Capabilities(), "float32")
    nearest, toward = [], []
    print(f"{'dtype':9} {'n':>6} {'half-width':>10}  max |error| / (sqrt(n) u): sequential sorted pairwise blocked | toward zero (min)")
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        for n in (int(v) for v in args.lengths.split(",")):
            for half in (0.2, 1.35):
                x = ((torch.rand(args.rows, n, generator=gen, dtype=torch.float64) * 2 - 1) * half).to(dtype)
                judged = torch.isfinite(tolerance.softmax_bias_bound(x, oracle.softmax_truth(x), model))
                if not bool(judged.any()):
                    print(f"{str(dtype)[6:]:9} {n:6d} {half:10.2f}  no row qualifies")
                    continue
                err = {k: v[judged] for k, v in _errors(x).items()}
                rn = [float(err[k].max()) for k in ("sequential", "sorted", "pairwise", "blocked-128")]
                nearest += rn
                toward.append(float(err["toward-zero"].min()))
                print(f"{str(dtype)[6:]:9} {n:6d} {half:10.2f}  " + " ".join(f"{v:6.2f}" for v in rn)
                      + f" | {toward[-1]:6.1f}   ({int(judged.sum())} of {args.rows} rows judged)")
    n = 16384
    structured = torch.full((1, n), -1.0)
    structured[0, 0] = 0.0
    qualifies = bool(torch.isfinite(tolerance.softmax_bias_bound(structured, oracle.softmax_truth(structured), model)).all())
    e = _errors(structured)["sequential"]
    print(f"structured row (1 entry over {n - 1} equal ones): sequential, rounded to nearest, "
          f"{float(e[0]):.1f} sqrt(n) u; judged: {qualifies}")
    print(json.dumps({"nearest_max": max(nearest), "toward_zero_min": min(toward), "lambda": tolerance.BIAS_LAMBDA}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
