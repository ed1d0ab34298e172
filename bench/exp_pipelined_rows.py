"""Experiment: whole rows, one program each, the next rows' loads pipelined through shared memory.

A persistent grid walks rows with ``tl.range(..., num_stages=S)``; the loop body holds no
loop, so Triton's pipeliner issues row r + S - 1's load as cp.async into shared memory while
row r is reduced and stored from registers.  One HBM read and one write an element, no
exchange between programs.  Rows must fit one program: BLOCK_N elements in registers, and
S - 1 (or S) BLOCK_N-wide buffers in shared memory (227 KiB a SM on sm_90).

    python bench/exp_pipelined_rows.py --compile            # registers, spills, shared, cp.async (no GPU)
    python bench/exp_pipelined_rows.py --bench --out r.json  # on the GPU, graph-timed % of copy
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from kernels.triton_softmax import _divide, _exp, _sum  # noqa: E402
from kernels.triton_support import safe_max  # noqa: E402

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


@triton.jit
def _rows_pipelined_kernel(X, Y, n_rows, n_cols, stride_xr, stride_yr,
                           BLOCK_N: tl.constexpr, STAGES: tl.constexpr, PRECISE: tl.constexpr):
    cols = tl.arange(0, BLOCK_N)
    in_row = cols < n_cols
    for row in tl.range(tl.program_id(0), n_rows, tl.num_programs(0), num_stages=STAGES):
        r64 = row.to(tl.int64)
        x = tl.load(X + r64 * stride_xr + cols, mask=in_row, other=float("-inf")).to(tl.float32)
        shift = safe_max(tl.max(x, axis=0))
        p = _exp(x, shift, PRECISE)
        l = _sum(p, 0, PRECISE)
        y = _divide(p, l, PRECISE)
        tl.store(Y + r64 * stride_yr + cols, y.to(Y.dtype.element_ty), mask=in_row)


def configs(dtype: str, n: int) -> list[dict]:
    """(warps, stages, per_sm, precise) tried for rows of n."""
    out = []
    precise_opts = (2, False) if dtype == "fp32" else (False,)  # 2: float64 sums (SUM_F64)
    for precise in precise_opts:
        for warps in (16, 32):
            for stages in (1, 2, 3):
                out.append(dict(warps=warps, stages=stages, per_sm=1, precise=precise))
        out.append(dict(warps=16, stages=2, per_sm=2, precise=precise))
    return out


def compile_report(dtype: str, n: int, cfg: dict, arch: int = 90) -> dict:
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    sig = {"X": f"*{dtype}", "Y": f"*{dtype}", "n_rows": "i32", "n_cols": "i32", "stride_xr": "i32",
           "stride_yr": "i32", "BLOCK_N": "constexpr", "STAGES": "constexpr", "PRECISE": "constexpr"}
    consts = {"BLOCK_N": n, "STAGES": cfg["stages"], "PRECISE": cfg["precise"]}
    attrs = {(i,): [["tt.divisibility", 16]] for i in (0, 1, 3, 4, 5)}
    src = ASTSource(_rows_pipelined_kernel, sig, consts, attrs)
    c = triton.compile(src, target=GPUTarget("cuda", arch, 32), options={"num_warps": cfg["warps"]})
    cuobjdump = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    with tempfile.TemporaryDirectory() as tmp:
        cubin = Path(tmp) / "k.cubin"
        cubin.write_bytes(c.asm["cubin"])
        res = subprocess.run([str(cuobjdump), "--dump-resource-usage", str(cubin)], capture_output=True, text=True)
    line = next((ln for ln in res.stdout.splitlines() if "REG:" in ln), "")
    fields = dict(part.split(":", 1) for part in line.split() if ":" in part)
    ptx = c.asm["ptx"]
    return {"REG": int(fields.get("REG", -1)), "STACK": int(fields.get("STACK", -1)),
            "SHARED": c.metadata.shared, "cp_async": len(re.findall(r"cp\.async", ptx))}


def bench(dtypes: list[str], ns: list[int], total: int, rep: int) -> list[dict]:
    from triton.testing import do_bench_cudagraph

    from kernels.triton_softmax import schedule_for, softmax
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    out = []
    for dtype in dtypes:
        for n in ns:
            rows = total // n
            x = torch.randn(rows, n, device="cuda").mul_(3).to(DTYPES[dtype])
            y = torch.empty_like(x)
            nbytes = 2 * x.numel() * x.element_size()
            ref = torch.softmax(x[:256].double(), dim=-1)

            def timed(label, fn, extra=None):
                ms = do_bench_cudagraph(fn, rep=rep, return_mode="median")
                r = {"dtype": dtype, "N": n, "impl": label, "graph_ms": ms, "GBps": nbytes / ms / 1e6, **(extra or {})}
                out.append(r)
                return r

            copy = timed("copy", lambda: y.copy_(x))
            timed("torch", lambda: torch.softmax(x, dim=-1))
            for precise in ((True, False) if dtype == "fp32" else (True,)):
                timed(f"ours precise={precise}", lambda p=precise: softmax(x, precise=p),
                      {"schedule": schedule_for(rows, n, x.dtype, x.device, precise=precise)})
            for cfg in configs(dtype, n):
                grid = (min(rows, sms * cfg["per_sm"]),)

                def run(cfg=cfg, grid=grid):
                    _rows_pipelined_kernel[grid](x, y, rows, n, x.stride(0), y.stride(0), BLOCK_N=n,
                                                 STAGES=cfg["stages"], PRECISE=cfg["precise"], num_warps=cfg["warps"])
                label = f"pipe w{cfg['warps']} s{cfg['stages']} pps{cfg['per_sm']} p{int(cfg['precise'])}"
                try:
                    y.zero_()
                    run()
                    torch.cuda.synchronize()
                except Exception as e:  # out of shared memory, registers: report and go on
                    print(f"{dtype} N={n} {label}: {type(e).__name__}: {str(e)[:120]}", flush=True)
                    continue
                err = float((y[:256].double() - ref).abs().max())
                timed(label, run, {"max_abs_err": err})
            for r in out:
                if r["dtype"] == dtype and r["N"] == n:
                    r["of_copy"] = r["GBps"] / copy["GBps"]
                    print(f"{dtype:>4} N={n:<7} {r['impl']:<26} {r['graph_ms']:7.3f} ms {100 * r['of_copy']:5.1f}% of copy"
                          + (f"  err {r['max_abs_err']:.1e}" if "max_abs_err" in r else "")
                          + (f"  [{r['schedule']}]" if "schedule" in r else ""), flush=True)
            del x, y
            torch.cuda.empty_cache()
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--compile", action="store_true")
    p.add_argument("--bench", action="store_true")
    p.add_argument("--dtypes", default="bf16,fp16,fp32")
    p.add_argument("--ns", default="32768")
    p.add_argument("--elements", type=int, default=1 << 26)
    p.add_argument("--rep", type=int, default=20)
    p.add_argument("--out", type=Path)
    a = p.parse_args(argv)
    dtypes, ns = a.dtypes.split(","), [int(v) for v in a.ns.split(",")]
    if a.compile:
        print(f"# triton {triton.__version__}")
        for dtype in dtypes:
            for n in ns:
                for cfg in configs(dtype, n):
                    try:
                        r = compile_report(dtype, n, cfg)
                    except Exception as e:
                        r = {"error": f"{type(e).__name__}: {str(e)[:100]}"}
                    print(dtype, n, cfg, r, flush=True)
    if a.bench:
        res = bench(dtypes, ns, a.elements, a.rep)
        if a.out:
            a.out.write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
