"""Does each attention target keep subnormal numbers in its P V product?  (A measurement, not a test.)

The tolerance policy (``verify.tolerance``) must know whether a correct kernel on this hardware
may flush subnormals: TF32 tensor cores flush subnormal V (found on the H200), and it is not
known whether Hopper's bfloat16 or float16 tensor-core products do.  Two cases a target, every
dtype it declares, with Q = K = 0 so that every weight is 1 / Nk and the exact output is the
mean of V over the keys:

  subnormal-v     V the same at every key: entry d = s * 2**(d mod (p - 1)), s the input
                  format's smallest subnormal (p its precision), so the row holds every binade
                  of subnormals; O = V exactly (when P V rounds nowhere), or 0 where a product
                  flushes.
  subnormal-prod  V = 2**(emin + 3) (normal) at every key, Nk = 1024: each product p v_j =
                  2**(emin - 7) is a float32 subnormal for bfloat16 and float32 (emin = -126),
                  a normal number for float16 (its products lie inside float32's normal range).

Each line: the target, dtype, case, the share of output elements equal to the exact value, the
share that came out 0, and the largest |o / exact - 1|.  The last line is JSON with the same.

    python bench/subnormal_probe.py [--device cuda] [--targets a,b,...]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kernels.registry import all_targets  # noqa: E402
from verify.dtypes import get_format  # noqa: E402

DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}
HEAD_DIM = 64


def subnormal_v(dtype: str, device: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    fmt = get_format(dtype)
    nk = 64
    d = torch.arange(HEAD_DIM, dtype=torch.float64)
    row = fmt.smallest_subnormal * torch.pow(2.0, d % (fmt.precision - 1))
    row = torch.where(d % 2 == 1, -row, row)
    v = row.expand(nk, HEAD_DIM).to(DTYPES[dtype])
    exact = v[0].to(torch.float64).expand(16, HEAD_DIM)
    return _qk(dtype, 16, nk, device) + (v[None, None].to(device), exact)


def subnormal_products(dtype: str, device: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    fmt = get_format(dtype)
    nk = 1024
    value = 2.0 ** (fmt.emin + 3)
    v = torch.full((1, 1, nk, HEAD_DIM), value, dtype=DTYPES[dtype])
    exact = torch.full((16, HEAD_DIM), value, dtype=torch.float64)
    return _qk(dtype, 16, nk, device) + (v.to(device), exact)


def _qk(dtype: str, nq: int, nk: int, device: str) -> tuple[torch.Tensor, torch.Tensor]:
    q = torch.zeros(1, 1, nq, HEAD_DIM, dtype=DTYPES[dtype], device=device)
    k = torch.zeros(1, 1, nk, HEAD_DIM, dtype=DTYPES[dtype], device=device)
    return q, k


CASES = {"subnormal-v": subnormal_v, "subnormal-prod": subnormal_products}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--targets", default="", help="comma-separated target names (default: every attention "
                    "target that is not a mutant and runs on the device)")
    args = ap.parse_args()
    wanted = [t for t in args.targets.split(",") if t]
    rows = []
    for target in all_targets("attention"):
        if wanted and target.name not in wanted:
            continue
        if not wanted and target.kind in ("mutant", "control"):
            continue
        if target.unavailable_reason(args.device) is not None:
            continue
        for dtype in DTYPES:
            if not target.caps.supports_dtype(dtype):
                continue
            for case, build in CASES.items():
                q, k, v, exact = build(dtype, args.device)
                try:
                    out = target.fn(q, k, v, scale=1.0, causal=False, mask=None)
                    if isinstance(out, tuple):
                        out = out[0]
                    o = out[0, 0].double().cpu()
                except Exception as exc:  # a backend refusing the shape is a result too
                    rows.append({"target": target.name, "dtype": dtype, "case": case,
                                 "error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"})
                    print(f"{target.name:24s} {dtype:9s} {case:15s} error: {rows[-1]['error']}", flush=True)
                    continue
                rel = (o / exact - 1).abs()
                row = {"target": target.name, "dtype": dtype, "case": case,
                       "exact_share": float((o == exact).double().mean()),
                       "zero_share": float((o == 0).double().mean()),
                       "max_rel_error": float(rel.max())}
                rows.append(row)
                print(f"{target.name:24s} {dtype:9s} {case:15s} exact {row['exact_share']:6.1%}  "
                      f"zero {row['zero_share']:6.1%}  max |o/exact - 1| {row['max_rel_error']:.3g}", flush=True)
    print(json.dumps({"device": torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu",
                      "torch": torch.__version__, "rows": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
