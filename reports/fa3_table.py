"""FlashAttention-3's numerical-error experiment (Shah et al. 2024, sec. 4.3, Table 3), reproduced.

The paper draws every entry of Q, K and V from N(0, 1) + N(0, 100) * Bernoulli(0.001)
(standard-normal values plus, at rate 0.001, outliers of standard deviation 10, as
in LLM activations) and reports the RMSE of the attention output against an FP64
reference.  Here the reference is the suite's certified oracle
(``verify.oracle.attention_truth``, exact to 1e-3 of the dtype's unit roundoff), so
the RMSE is that of the kernel alone.  Two rows frame the targets:

* *exact, rounded once*: the exact output rounded to the dtype, the floor no kernel
  returning that dtype can go below;
* *naive same-dtype*: materialized softmax(QK^T)V computed entirely in the input dtype,
  the counterpart of the paper's "baseline attention".

On a GPU the sizes follow the paper's regime (B=2, H=8, N=2048, D=128); on a CPU a
CPU-sized version (B=1, H=2, N=256, D=64), labelled as such.  RMSE per element
depends only weakly on the sizes, so the numbers stay comparable in magnitude.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import torch

from kernels import reference
from verify import metrics, oracle
from verify.dtypes import get_format

PAPER_SOURCE = ("Shah et al., FlashAttention-3: Fast and Accurate Attention with Asynchrony and Low-precision, "
                "2024, sec. 4.3, Table 3 (RMSE against an FP64 reference)")
#: Table 3 of the paper, RMSE of the output against FP64.
PAPER = {
    "float16": {"baseline": 3.2e-4, "FlashAttention-2": 1.9e-4, "FlashAttention-3": 1.9e-4},
    "float8_e4m3fn": {"baseline": 2.4e-2, "FlashAttention-3": 9.1e-3},
}
OUTLIER_RATE = 1e-3
OUTLIER_STD = 10.0  # N(0, 100)


@dataclass(frozen=True)
class Setting:
    batch: int
    heads: int
    seq: int
    head_dim: int
    label: str


CPU_SETTING = Setting(1, 2, 256, 64, "CPU-sized version (B=1, H=2, N=256, D=64); the paper's sizes need a GPU")
GPU_SETTING = Setting(2, 8, 2048, 128, "GPU, the paper's regime (B=2, H=8, N=2048, D=128)")


def outlier_normal(shape: tuple[int, ...], generator: torch.Generator) -> torch.Tensor:
    """N(0, 1) + N(0, 100) * Bernoulli(0.001), in float64 on the CPU."""
    base = torch.randn(shape, generator=generator, dtype=torch.float64)
    spikes = torch.randn(shape, generator=generator, dtype=torch.float64) * OUTLIER_STD
    keep = torch.rand(shape, generator=generator, dtype=torch.float64) < OUTLIER_RATE
    return base + spikes * keep


def make_inputs(setting: Setting, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    shape = (setting.batch, setting.heads, setting.seq, setting.head_dim)
    return outlier_normal(shape, g), outlier_normal(shape, g), outlier_normal(shape, g)


def _paper_for(dtype: str, role: str) -> dict[str, float]:
    table = PAPER.get(dtype, {})
    if role == "baseline":
        return {"baseline": table["baseline"]} if "baseline" in table else {}
    if role == "target":
        return {k: v for k, v in table.items() if k != "baseline"}
    return {}


def run(targets: list, device: str, *, dtypes: tuple[str, ...] = ("float16", "bfloat16"), seed: int = 0,
        setting: Setting | None = None, timeout: float = 120.0) -> dict[str, Any]:
    """The experiment for every attention target given (already filtered to those that run on ``device``).

    Returns the ``fa3`` section of report.json (see reports/schema.json).
    """
    from verify.engine import call_target, output_only

    t_start = time.perf_counter()
    if setting is None:
        setting = GPU_SETTING if device.startswith("cuda") else CPU_SETTING
    q64, k64, v64 = make_inputs(setting, seed)
    scale = 1.0 / math.sqrt(setting.head_dim)
    outliers = int(sum(int((t.abs() > 5).sum()) for t in (q64, k64, v64)))
    rows: list[dict[str, Any]] = []
    attention = [t for t in targets if t.op == "attention"]
    fp8 = [t for t in attention if t.caps.supports_dtype("float8_e4m3fn")]
    run_dtypes = tuple(dtypes) + (("float8_e4m3fn",) if fp8 else ())
    for dtype in run_dtypes:
        fmt = get_format(dtype)
        q, k, v = (t.to(fmt.torch_dtype).to(device) for t in (q64, k64, v64))
        t0 = time.perf_counter()
        truth = oracle.attention_truth(q, k, v, scale=scale, target=fmt)
        oracle_s = time.perf_counter() - t0
        floor_out, _ = truth.out.rounded(fmt)
        floor = metrics.rmse(floor_out, truth.out)

        def add(label: str, role: str, target: str | None, out: torch.Tensor | None, secs: float,
                error: str | None = None) -> None:
            r = metrics.rmse(out, truth.out) if out is not None else None
            nonfinite = int((~torch.isfinite(out)).sum()) if out is not None else 0
            rows.append({
                "label": label, "role": role, "target": target, "dtype": dtype, "rmse": r,
                "rmse_over_floor": (r / floor) if (r is not None and floor > 0) else None,
                "nonfinite_outputs": nonfinite, "seconds": round(secs, 4), "error": error,
                "paper": _paper_for(dtype, role),
            })

        add(f"exact, rounded once to {dtype} (floor)", "floor", None, floor_out, oracle_s)
        if fmt.torch_dtype.is_floating_point and fmt.precision >= 8:
            t0 = time.perf_counter()
            base = reference.naive_attention(q, k, v, scale=scale)
            add(f"naive attention computed in {dtype} (the paper's baseline)", "baseline", None, base,
                time.perf_counter() - t0)
        for target in attention:
            if not target.caps.supports_dtype(dtype):
                continue
            out, viol, secs = call_target(output_only(target), (q, k, v), dict(scale=scale, causal=False, mask=None), timeout)
            if viol is not None:
                add(target.name, "target", target.name, None, secs, viol.message)
            else:
                add(target.name, "target", target.name, out, secs)
    return {
        "source": PAPER_SOURCE,
        "distribution": "N(0,1) + N(0,100) * Bernoulli(0.001)",
        "setting": {"batch": setting.batch, "heads": setting.heads, "seq": setting.seq,
                    "head_dim": setting.head_dim, "scale": scale, "causal": False, "label": setting.label},
        "device": device, "seed": seed, "outlier_entries": outliers,
        "metric": ("RMSE of the output against the certified oracle (verify.oracle.attention_truth, "
                   "verify.metrics.rmse)"),
        "paper": PAPER,
        "fp8_note": None if fp8 else ("no selected target supports float8_e4m3fn: the paper's FP8 rows are shown "
                                      "for reference only"),
        "rows": rows,
        "seconds": round(time.perf_counter() - t_start, 3),
    }
