"""Benchmark the Triton FlashAttention forward against torch's attention backends.

Times ``kernels.triton_attention.attention`` side by side with SDPA pinned to each
backend (flash, efficient, cuDNN, math where its N x N matrices are affordable) and
with ``torch.compile(flex_attention)``, on bf16 / fp16, D = 64 / 128, N = 1k / 4k /
16k, causal and not, B*H = 64 (16 at N = 16k).  Each time is the median of
``triton.testing.do_bench``; TFLOP/s counts 4 * B * H * N^2 * D, halved for causal.
Every backend's output is compared with ours (max abs difference) as a smoke test.
Also reports the peak extra memory of our kernel at the largest N against the size
of a naive N x N score matrix.

    python bench/attention.py --out results/attention.json
    python bench/attention.py --dtypes bf16 --dims 128 --ns 4096 --backends ours,flash,flex

Exits with status 0 and a message when no CUDA device is visible.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
BACKENDS = ("ours", "flash", "efficient", "cudnn", "math", "flex")
MATH_MAX_N = 4096  # the math backend materializes B*H*N*N scores (and softmax), fp32


def heads_for(n: int) -> tuple[int, int]:
    """(B, H) with B*H = 64, or 16 at N >= 16k."""
    return (1, 16) if n >= 16384 else (4, 16)


def tflops(b: int, h: int, n: int, d: int, causal: bool, ms: float) -> float:
    flops = 4.0 * b * h * n * n * d * (0.5 if causal else 1.0)
    return flops / (ms * 1e-3) / 1e12


def make_runners(backends, causal: bool, n: int, scale: float, use_tma=None):
    """name -> fn(q, k, v) for every requested backend that can be built here."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from kernels.triton_attention import attention

    runners = {}
    if "ours" in backends:
        runners["ours"] = lambda q, k, v: attention(q, k, v, scale=scale, causal=causal, use_tma=use_tma)
    pinned = {"flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION,
              "cudnn": SDPBackend.CUDNN_ATTENTION, "math": SDPBackend.MATH}
    for name, backend in pinned.items():
        if name not in backends or (name == "math" and n > MATH_MAX_N):
            continue

        def run(q, k, v, backend=backend):
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)

        runners[name] = run
    if "flex" in backends:
        import torch._dynamo
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention

        # A fresh static compile per shape: without the reset, dynamo switches to dynamic
        # shapes after a few recompiles and then to eager (N x N) flex past its recompile limit.
        torch._dynamo.reset()
        flex = torch.compile(flex_attention, dynamic=False)
        block_mask = None
        if causal:
            block_mask = create_block_mask(lambda b, h, qi, kj: kj <= qi, None, None, n, n, device="cuda")
        runners["flex"] = lambda q, k, v: flex(q, k, v, block_mask=block_mask, scale=scale)
    return runners


def bench_case(dtype_name, d, n, causal, backends, warmup, rep, use_tma=None, rounds=2):
    """Every backend on one shape: first calls (compile, autotune), then ``rounds`` timing rounds.

    Rounds alternate the order (forward, reversed, ...) so no backend is always timed first,
    on a GPU still ramping its clocks (on the H200 the first timing in a process read up to
    10% low).  Each round's figure is the ``do_bench`` median; a backend's time is the fastest
    of its rounds (noise only adds time), all rounds kept in ``ms_rounds``.
    """
    from triton.testing import do_bench

    from kernels import triton_attention

    b, h = heads_for(n)
    dtype = DTYPES[dtype_name]
    gen = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=dtype, generator=gen) for _ in range(3))
    scale = 1.0 / math.sqrt(d)
    rows, live = [], []
    reference = None
    for name, fn in make_runners(backends, causal, n, scale, use_tma).items():
        row = {"dtype": dtype_name, "D": d, "N": n, "B": b, "H": h, "causal": causal, "backend": name}
        try:
            tuned_before = len(triton_attention._TUNED)
            t0 = time.perf_counter()
            out = fn(q, k, v)  # first call: compilation / autotuning
            torch.cuda.synchronize()
            row["first_call_s"] = round(time.perf_counter() - t0, 2)
            if name == "ours" and len(triton_attention._TUNED) > tuned_before:
                c = list(triton_attention._TUNED.values())[-1]  # the tuner's pick for this shape
                row["tiling"] = [c["BLOCK_M"], c["BLOCK_N"], c["num_warps"], c["num_stages"]]
            if reference is None:
                reference = out.float()  # ours comes first
            row["max_abs_diff_vs_first"] = float((out.float() - reference).abs().max())
            row["ms_rounds"] = []
            live.append((row, fn))
        except Exception as e:  # a backend unavailable for this shape / build
            row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"
        rows.append(row)
    for i in range(rounds):
        for row, fn in (live if i % 2 == 0 else live[::-1]):
            try:
                row["ms_rounds"].append(do_bench(lambda: fn(q, k, v), warmup=warmup, rep=rep, return_mode="median"))
            except Exception as e:  # a backend that failed while being timed
                row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"
    for row in rows:
        if "error" not in row:
            row["ms"] = min(row["ms_rounds"])
            row["tflops"] = tflops(b, h, n, d, causal, row["ms"])
        print_row(row)
    del q, k, v
    torch.cuda.empty_cache()
    return rows


def print_row(r):
    if "error" in r:
        print(f"{r['dtype']:>5} D={r['D']:<4} N={r['N']:<6} causal={int(r['causal'])}  {r['backend']:<10} "
              f"unavailable: {r['error']}", flush=True)
    else:
        print(f"{r['dtype']:>5} D={r['D']:<4} N={r['N']:<6} causal={int(r['causal'])}  {r['backend']:<10} "
              f"{r['ms']:9.3f} ms {r['tflops']:8.1f} TFLOP/s   diff {r['max_abs_diff_vs_first']:.2e}"
              f"   first call {r['first_call_s']:.1f}s" + (f"   tiling {tuple(r['tiling'])}" if "tiling" in r else ""),
              flush=True)


#: Tilings timed by --sweep (BLOCK_M, BLOCK_N, num_warps, num_stages), per head dim.
SWEEP_CONFIGS = {
    64: [(64, 64, 4, 3), (64, 64, 4, 2), (128, 64, 4, 3), (128, 64, 4, 2), (128, 64, 8, 3),
         (128, 128, 8, 3), (64, 128, 4, 3)],
    128: [(64, 64, 4, 3), (64, 64, 4, 2), (64, 128, 4, 2), (128, 64, 8, 3), (128, 64, 8, 2),
          (128, 128, 8, 2), (128, 32, 4, 3), (128, 64, 8, 4), (128, 128, 8, 3), (128, 64, 4, 3)],
}


def sweep_case(dtype_name, d, n, causal, warmup, rep):
    """Time our kernel at fixed tilings, pointer loads and TMA descriptors, without autotuning."""
    from triton.testing import do_bench

    from kernels.triton_attention import attention

    b, h = heads_for(n)
    dtype = DTYPES[dtype_name]
    q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=dtype) for _ in range(3))
    from kernels import triton_attention

    rows = []
    # P: pointer loads, T: TMA descriptors, F: pointer loads with the scores scaled before the
    # max (the FMA-contractible order that overflows for huge scores): what the safe order costs.
    for variant, use_tma, multiply_first in (("P", False, False), ("T", True, False), ("F", False, True)):
        for bm, bn, w, st in SWEEP_CONFIGS[d]:
            cfg = {"BLOCK_M": bm, "BLOCK_N": bn, "num_warps": w, "num_stages": st}
            row = {"dtype": dtype_name, "D": d, "N": n, "causal": causal, "tma": use_tma,
                   "multiply_first": multiply_first, "variant": variant, "config": [bm, bn, w, st]}
            triton_attention.TUNING["multiply_first"] = multiply_first
            try:
                fn = lambda: attention(q, k, v, scale=d**-0.5, causal=causal, config=cfg, use_tma=use_tma)  # noqa: E731
                fn()
                ms = do_bench(fn, warmup=warmup, rep=rep, return_mode="median")
                row.update(ms=ms, tflops=tflops(b, h, n, d, causal, ms))
            except Exception as e:
                row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''}"
            finally:
                triton_attention.TUNING["multiply_first"] = False
            rows.append(row)
    best = max((r for r in rows if "tflops" in r), key=lambda r: r["tflops"], default=None)
    line = "  ".join(f"{r['variant']}{tuple(r['config'])}:{r.get('tflops', float('nan')):.0f}" for r in rows)
    print(f"sweep {dtype_name} D={d} N={n} causal={int(causal)} best "
          f"{best['variant'] + str(tuple(best['config'])) if best else '-'}  |  {line}", flush=True)
    return rows


def host_overhead_us(calls: int = 200) -> dict:
    """Host time per call (enqueue only, no synchronization) at a tiny shape, microseconds."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from kernels.triton_attention import attention

    q, k, v = (torch.randn(1, 1, 128, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    cases = {
        "ours_pointer": lambda: attention(q, k, v, scale=0.125, use_tma=False),
        "ours_tma": lambda: attention(q, k, v, scale=0.125, use_tma=True),
    }

    def flash():
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            return F.scaled_dot_product_attention(q, k, v, scale=0.125)

    cases["sdpa_flash"] = flash
    result = {}
    for name, fn in cases.items():
        for _ in range(10):
            fn()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        result[name] = (time.perf_counter() - t0) / calls * 1e6
        torch.cuda.synchronize()
    print("# host time per call (us): " + "  ".join(f"{k} {v:.1f}" for k, v in result.items()), flush=True)
    return result


def memory_case(n: int, d: int, dtype_name: str) -> dict:
    """Peak memory allocated during our forward beyond inputs and output, vs a naive score matrix."""
    from kernels.triton_attention import attention

    b, h = heads_for(n)
    dtype = DTYPES[dtype_name]
    q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=dtype) for _ in range(3))
    out = attention(q, k, v, scale=d**-0.5)  # warm: compile and tune outside the measurement
    del out
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    out = attention(q, k, v, scale=d**-0.5)
    torch.cuda.synchronize()
    peak_extra = torch.cuda.max_memory_allocated() - base
    out_bytes = out.numel() * out.element_size()
    naive = b * h * n * n * dtype.itemsize
    return {"N": n, "D": d, "B": b, "H": h, "dtype": dtype_name,
            "peak_extra_bytes": peak_extra, "output_bytes": out_bytes,
            "peak_extra_beyond_output_bytes": peak_extra - out_bytes,
            "naive_scores_bytes": naive, "naive_scores_fp32_bytes": b * h * n * n * 4}


def environment() -> dict:
    import triton

    return {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
            "cuda": torch.version.cuda, "python": platform.python_version(), "argv": sys.argv}


def summarize(rows):
    """Ours over SDPA flash and over flex, per case."""
    out = []
    by_case = {}
    for r in rows:
        if "tflops" in r:
            by_case.setdefault((r["dtype"], r["D"], r["N"], r["causal"]), {})[r["backend"]] = r["tflops"]
    for case, t in sorted(by_case.items()):
        if "ours" not in t:
            continue
        s = {"dtype": case[0], "D": case[1], "N": case[2], "causal": case[3], "ours_tflops": t["ours"]}
        for other in ("flash", "flex", "cudnn"):
            if other in t:
                s[f"ours_over_{other}"] = t["ours"] / t[other]
        out.append(s)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, help="write results as JSON here")
    p.add_argument("--dtypes", default="bf16,fp16")
    p.add_argument("--dims", default="64,128")
    p.add_argument("--ns", default="1024,4096,16384")
    p.add_argument("--causal", default="both", choices=("both", "yes", "no"))
    p.add_argument("--backends", default=",".join(BACKENDS))
    p.add_argument("--warmup", type=float, default=25.0, help="do_bench warm-up, ms")
    p.add_argument("--rep", type=float, default=100.0, help="do_bench measuring time, ms")
    p.add_argument("--rounds", type=int, default=2,
                   help="timing rounds per shape, alternating the backends' order; the fastest round counts")
    p.add_argument("--memory-n", type=int, default=16384, help="N of the memory measurement (0: skip)")
    p.add_argument("--use-tma", default="auto", choices=("auto", "yes", "no"),
                   help="ours: TMA descriptors (auto: when the hardware and strides allow) or pointer loads")
    p.add_argument("--sweep", action="store_true",
                   help="instead of the comparison, time our kernel at fixed tilings (pointer and TMA paths)")
    args = p.parse_args(argv)

    if not torch.cuda.is_available():
        print("bench/attention.py: no CUDA device visible; nothing to measure.", file=sys.stderr)
        return 0
    backends = [b for b in args.backends.split(",") if b]
    if "ours" in backends:  # ours first: the others are compared with it
        backends = ["ours"] + [b for b in backends if b != "ours"]
    causals = {"both": (False, True), "yes": (True,), "no": (False,)}[args.causal]
    env = environment()
    print(f"# {env['device']}  torch {env['torch']}  triton {env['triton']}  {env['date']}", flush=True)

    cases = [(dt, int(d), int(n), c) for dt in args.dtypes.split(",") for d in args.dims.split(",")
             for n in args.ns.split(",") for c in causals]
    if args.sweep:
        sweep = [r for case in cases for r in sweep_case(*case, args.warmup, args.rep)]
        host = host_overhead_us()
        if args.out:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps({"environment": env, "sweep": sweep, "host_us": host}, indent=1))
            print(f"wrote {args.out}")
        return 0
    rows = []
    for case in cases:
        use_tma = {"auto": None, "yes": True, "no": False}[args.use_tma]
        rows += bench_case(*case, backends, args.warmup, args.rep, use_tma, rounds=max(1, args.rounds))
    host = host_overhead_us()
    summary = summarize(rows)
    print("\n# ours / other (TFLOP/s ratio)")
    for s in summary:
        ratios = "  ".join(f"{k[len('ours_over_'):]} {v:.2f}x" for k, v in s.items() if k.startswith("ours_over_"))
        print(f"{s['dtype']:>5} D={s['D']:<4} N={s['N']:<6} causal={int(s['causal'])}  ours {s['ours_tflops']:7.1f}  "
              f"{ratios}")
    memory = None
    if args.memory_n:
        d0 = int(args.dims.split(",")[-1])
        memory = memory_case(args.memory_n, d0, args.dtypes.split(",")[0])
        print(f"\n# memory at N={memory['N']} D={memory['D']} B*H={memory['B'] * memory['H']}: peak extra "
              f"{memory['peak_extra_bytes'] / 2**20:.1f} MiB (output {memory['output_bytes'] / 2**20:.1f} MiB) vs "
              f"naive scores {memory['naive_scores_bytes'] / 2**30:.2f} GiB ({memory['dtype']}), "
              f"{memory['naive_scores_fp32_bytes'] / 2**30:.2f} GiB (fp32)")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"environment": env, "results": rows, "summary": summary,
                                        "memory": memory, "host_us": host}, indent=1))
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
