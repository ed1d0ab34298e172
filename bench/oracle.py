"""Throughput of the certified oracle on this machine (benchmark, not a test).

Prints a table, then as its LAST line one JSON object:
  {"softmax_elements_per_s": X, "attention_head_512_512_128_s": Y, ...}
X: certified softmax outputs per second (float32 inputs and target, 1024 rows x 4096,
   N(0, 1) logits scaled by 10, a masked quarter; every value carries its 1e-3 ULP bound).
Y: seconds for one attention head, Nq = Nk = 512, D = 128, float32, causal.
Each figure is the median of --repeat runs after one warm-up.

    python bench/oracle.py [--repeat 5] [--device cpu|cuda]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from verify import oracle  # noqa: E402


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def median_seconds(fn, repeat: int, device: str) -> float:
    fn()
    _sync(device)
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        _sync(device)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--attention-n", type=int, default=512)
    ap.add_argument("--check-head", action="store_true",
                    help="also time checking one bf16 head of our Triton attention end to end (target, oracle, "
                         "tolerance, contract), as the GPU tier does")
    args = ap.parse_args()
    dev = args.device
    gen = torch.Generator().manual_seed(0)
    results: dict[str, float] = {}

    rows, n = 1024, 4096
    x = (torch.randn(rows, n, generator=gen) * 10).to(dev)
    x[:, : n // 4][torch.rand(rows, n // 4, generator=gen).to(dev) < 0.5] = -math.inf
    for dtype in ("float32", "bfloat16", "float16"):
        xt = x.to(getattr(torch, dtype))
        fallback = int(oracle.softmax_truth(xt).fallback_rows.sum())
        s = median_seconds(lambda: oracle.softmax_truth(xt), args.repeat, dev)
        results[f"softmax_{dtype}_elements_per_s"] = rows * n / s
        print(f"softmax {dtype:<9} {rows}x{n}: {s * 1e3:8.1f} ms  {rows * n / s / 1e6:7.2f} M certified elements/s"
              f"  (mpmath fallback rows: {fallback})")
    xs = (torch.randn(8, 64, generator=gen) * 10).double().to(dev)
    s = median_seconds(lambda: oracle.softmax_truth(xs), 1, dev)
    results["softmax_float64_elements_per_s"] = xs.numel() / s
    print(f"softmax float64   8x64 (every row through mpmath): {xs.numel() / s:,.0f} elements/s")

    N, D = args.attention_n, 128
    q, k, v = (torch.randn(1, 1, N, D, generator=gen).to(dev) for _ in range(3))
    for causal in (False, True):
        fallback = int(oracle.attention_truth(q, k, v, scale=D**-0.5, causal=causal).fallback_rows.sum())
        s = median_seconds(lambda: oracle.attention_truth(q, k, v, scale=D**-0.5, causal=causal), args.repeat, dev)
        results[f"attention_head_{N}_{N}_{D}_{'causal' if causal else 'full'}_s"] = s
        print(f"attention float32 1x1x{N}x{N}x{D} causal={causal}: {s:.3f} s  (fallback rows: {fallback})")

    if args.check_head:
        from kernels.registry import get_target
        from verify.engine import check_attention_input

        target = get_target("triton-attention")
        qb, kb, vb = (t.to(torch.bfloat16) for t in (q, k, v))
        out = check_attention_input(target, qb, kb, vb, scale=D**-0.5, causal=False, mask=None, compare_naive=False)
        s = median_seconds(lambda: check_attention_input(target, qb, kb, vb, scale=D**-0.5, causal=False, mask=None,
                                                         compare_naive=False), args.repeat, dev)
        results[f"check_head_{N}_{N}_{D}_bf16_s"] = s
        print(f"check of triton-attention bf16 1x1x{N}x{N}x{D} end to end: {s:.3f} s "
              f"(violations: {len(out.evaluation.violations)}, max error {out.evaluation.max_error:.3g} u*cond)")

    summary = {
        "softmax_elements_per_s": round(results["softmax_float32_elements_per_s"]),
        f"attention_head_{N}_{N}_{D}_s": round(max(results[f"attention_head_{N}_{N}_{D}_full_s"],
                                                    results[f"attention_head_{N}_{N}_{D}_causal_s"]), 4),
        "device": dev,
        "detail": {k: round(v, 4) for k, v in results.items()},
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
