"""Registers of the cooperative softmax kernel compiled for a CUDA target, on any machine.

The cooperative schedule may launch only as many programs as a SM holds at once (partners
wait on each other), so its speed follows from the compiled kernel's registers: on sm_90 a SM
has 65536 registers and 2048 threads.  This compiles ``_softmax_cooperative_kernel`` for a
target without a GPU (Triton's own ptxas), reads the cubin's resource usage with Triton's
bundled ``cuobjdump --dump-resource-usage`` and prints, per configuration, the registers a
thread, the local memory (spills) and how many programs a SM the registers allow -- the
number the launch's ``_resident_per_sm`` reads from the driver on a GPU.

    python bench/kernel_registers.py --table            # every COOP_LONG launch
    python bench/kernel_registers.py --dtypes bf16,fp16 --chunk 2048 --warps 2 --lag --early-poll
    python bench/kernel_registers.py --table --json     # one JSON object a line

Triton's interpreter cannot compile: run it without ``TRITON_INTERPRET=1``.

The count depends on the Triton version: the H200 machine has triton 3.6 (a virtual
environment with ``pip install triton==3.6.0`` reproduces its counts, BENCHMARKS.md).
Pointers and the row length and strides are compiled as multiples of 16, as a launch on
contiguous rows of a multiple-of-16 length specializes them.

Exit status 0; 2 with a message when the cubin cannot be produced or read.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from kernels import triton_softmax  # noqa: E402

TYPES = {"fp32": "fp32", "bf16": "bf16", "fp16": "fp16"}
#: The kernel's runtime arguments, in order, with the positions compiled as multiples of 16.
_ARGS = ("X", "Y", "LSE", "SLOTS", "n_rows", "n_cols", "stride_xr", "stride_yr", "n_chunks", "spin_limit")
_ALIGNED = ("X", "Y", "LSE", "SLOTS", "n_cols", "stride_xr", "stride_yr")
REGISTERS_PER_SM = 65536
THREADS_PER_SM = 2048


def resource_usage(dtype: str, chunk: int, warps: int, *, lag: bool = False, early_poll: bool = False,
                   hold_x: bool | None = None, precise: bool = True, arch: int = 90) -> dict[str, int]:
    """``{"REG": ..., "STACK": ..., "SHARED": ..., "LOCAL": ...}`` of the cooperative kernel for
    ``dtype`` rows held ``chunk`` elements a program at ``warps`` warps, writing y (no LSE).
    ``hold_x`` None: as the launch decides (with the lag, 16-bit inputs hold the input chunk).

    Raises:
        RuntimeError: cuobjdump is missing or does not report the kernel.
    """
    element = TYPES[dtype]
    signature = dict.fromkeys(_ARGS, "i32")
    signature.update(X=f"*{element}", Y=f"*{element}", LSE="*fp32", SLOTS="*i64")
    consts = dict(CHUNK=chunk, BLOCK_S=max(32 * warps, 64), COOP=True, PRECISE=precise and dtype == "fp32",
                  WRITE_Y=True, WRITE_LSE=False, LAG=lag, EARLY_POLL=lag and early_poll,
                  HOLD_X=lag and dtype != "fp32" if hold_x is None else hold_x)
    signature.update(dict.fromkeys(consts, "constexpr"))
    attrs = {(_ARGS.index(name),): [["tt.divisibility", 16]] for name in _ALIGNED}
    source = ASTSource(triton_softmax._softmax_cooperative_kernel, signature, consts, attrs)
    compiled = triton.compile(source, target=GPUTarget("cuda", arch, 32), options={"num_warps": warps})
    cuobjdump = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    if not cuobjdump.exists():
        raise RuntimeError(f"{cuobjdump} not found: this Triton build ships no cuobjdump")
    with tempfile.TemporaryDirectory() as tmp:
        cubin = Path(tmp) / "kernel.cubin"
        cubin.write_bytes(compiled.asm["cubin"])
        out = subprocess.run([str(cuobjdump), "--dump-resource-usage", str(cubin)], capture_output=True, text=True)
    line = next((ln for ln in out.stdout.splitlines() if "REG:" in ln), None)
    if line is None:
        raise RuntimeError(f"cuobjdump reported no resource usage: {out.stderr.strip() or out.stdout.strip()}")
    fields = dict(part.split(":", 1) for part in line.split() if ":" in part)
    return {key: int(fields[key]) for key in ("REG", "STACK", "SHARED", "LOCAL") if key in fields}


def programs_per_sm(registers: int, warps: int) -> int:
    """Programs of ``warps`` warps at ``registers`` a thread one sm_90 SM holds (registers are
    allocated per warp in units of 256, as _resident_per_sm computes it)."""
    warp_registers = -(-registers * 32 // 256) * 256
    return min(REGISTERS_PER_SM // (warp_registers * warps), THREADS_PER_SM // (32 * warps))


def _table_rows() -> list[tuple[str, str, triton_softmax.LongRowLaunch]]:
    rows = []
    for path, launches in triton_softmax.COOP_LONG.items():
        dtypes = ("fp32",) if path in ("precise", "fast") else ("bf16", "fp16")
        rows += [(path, dtype, launch) for launch in launches for dtype in dtypes]
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--table", action="store_true", help="every launch of kernels.triton_softmax.COOP_LONG")
    p.add_argument("--dtypes", default="fp32,bf16,fp16")
    p.add_argument("--chunk", type=int, default=4096)
    p.add_argument("--warps", type=int, default=4)
    p.add_argument("--lag", action="store_true")
    p.add_argument("--early-poll", action="store_true")
    p.add_argument("--fast", action="store_true", help="float32: the fast path (precise by default)")
    p.add_argument("--arch", type=int, default=90, help="compute capability, e.g. 90 for sm_90 (H100, H200)")
    p.add_argument("--json", action="store_true", help="print one JSON object a configuration instead")
    args = p.parse_args(argv)
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")  # the default, without triton 3.9's warning

    if args.table:
        configs = [(f"{path} <= {launch.max_cols}", dtype, launch.chunk, launch.warps, launch.lag,
                    launch.early_poll, path != "fast", launch.per_sm) for path, dtype, launch in _table_rows()]
    else:
        configs = [("", dtype, args.chunk, args.warps, args.lag, args.early_poll, not args.fast, None)
                   for dtype in args.dtypes.split(",")]
    if not args.json:
        print(f"# triton {triton.__version__}, sm_{args.arch}")
    for label, dtype, chunk, warps, lag, early, precise, per_sm in configs:
        try:
            usage = resource_usage(dtype, chunk, warps, lag=lag, early_poll=early, precise=precise, arch=args.arch)
        except (RuntimeError, OSError) as e:
            print(f"bench/kernel_registers.py: {e}", file=sys.stderr)
            return 2
        fit = programs_per_sm(usage["REG"], warps)
        if args.json:
            print(json.dumps({"launch": label, "dtype": dtype, "chunk": chunk, "warps": warps, "lag": lag,
                              "early_poll": early, "precise": precise and dtype == "fp32", "per_sm_asked": per_sm,
                              "per_sm_fit": fit, **usage}), flush=True)
            continue
        asked = f", {per_sm} asked" if per_sm else ""
        print(f"{label:<18} {dtype:>4} chunk {chunk:>5} x {warps} warps  lag={int(lag)} early={int(early)} "
              f"precise={int(precise and dtype == 'fp32')}:  {usage['REG']:>3} registers, local {usage['LOCAL']}, "
              f"{fit} a SM{asked}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
