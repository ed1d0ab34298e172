"""Registers of the cooperative (and spans) softmax kernels compiled for a CUDA target, on any machine.

The cooperative schedule may launch only as many programs as a SM holds at once (partners
wait on each other), so its speed follows from the compiled kernel's registers: on sm_90 a SM
has 65536 registers and 2048 threads.  This compiles ``_softmax_cooperative_kernel`` for a
target without a GPU (Triton's own ptxas), reads the cubin's resource usage with Triton's
bundled ``cuobjdump --dump-resource-usage`` and prints, per configuration, the registers a
thread, the bytes of stack a thread (register spills: ptxas spills to the stack frame, which
cuobjdump reports as STACK, not as LOCAL) and how many programs a SM the registers allow -- the
number the launch's ``_resident_per_sm`` reads from the driver on a GPU.  The plan and the
compile-time arguments are the launch's own (``_cooperative_plan``,
``cooperative_constexprs``, ``programs_per_sm``), so the kernel compiled here is the one a
launch on 132 SMs compiles.

    python bench/kernel_registers.py --table            # every COOP_LONG and SPANS_LONG launch
    python bench/kernel_registers.py --spans --dtypes fp32 --n 1048576 --chunk 4096 --warps 8   # a spans launch
    python bench/kernel_registers.py --dtypes bf16,fp16 --n 65536 --chunk 2048 --warps 2 --lag --no-early-poll
    python bench/kernel_registers.py --table --json     # one JSON object a line
    python bench/kernel_registers.py --global-widths --n 262145 --dtypes bf16   # ALIGN's 16-byte accesses

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
import re
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from kernels import triton_softmax  # noqa: E402

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
#: The kernel's runtime arguments, in order, with the positions compiled as multiples of 16.
_ARGS = ("X", "Y", "LSE", "SLOTS", "n_rows", "n_cols", "stride_xr", "stride_yr", "n_chunks", "spin_limit")
_ALIGNED = ("X", "Y", "LSE", "SLOTS", "n_cols", "stride_xr", "stride_yr")
#: SMs of an H200: only the number of groups depends on it, not the compiled kernel.
SMS = 132
#: Rows enough to fill every resident program.
ROWS = 4096
#: The spans kernel's runtime arguments, and those compiled as multiples of 16.
_SPANS_ARGS = ("X", "Y", "LSE", "SLOTS", "MAXES", "n_rows", "n_cols", "stride_xr", "stride_yr", "n_spans", "span",
               "spin_limit")
_SPANS_ALIGNED = ("X", "Y", "LSE", "SLOTS", "MAXES", "n_cols", "stride_xr", "stride_yr", "span")


def plan_for(n_cols: int, dtype: str, precise: bool) -> triton_softmax._Plan:
    """The cooperative plan a GPU launch takes for rows of ``n_cols`` (``TUNING`` applies)."""
    plan = triton_softmax._cooperative_plan(ROWS, n_cols, DTYPES[dtype], SMS, precise and dtype == "fp32")
    if plan is None:
        raise ValueError(f"rows of {n_cols} do not fit the cooperative schedule's grid")
    return plan


def spans_plan_for(n_cols: int, dtype: str, precise: bool) -> triton_softmax._Plan:
    """The spans plan a GPU launch takes for rows of ``n_cols`` (``TUNING`` applies; the
    schedule forced on)."""
    saved = triton_softmax.TUNING["spans"]
    triton_softmax.TUNING["spans"] = True
    try:
        plan = triton_softmax._spans_plan(ROWS, n_cols, DTYPES[dtype], SMS, precise and dtype == "fp32")
    finally:
        triton_softmax.TUNING["spans"] = saved
    if plan is None:
        raise ValueError(f"rows of {n_cols} do not fit the spans schedule's grid")
    return plan


def _compile(kernel, names: tuple[str, ...], aligned: tuple[str, ...], dtype: str, consts: dict, arch: int):
    """``kernel`` compiled for sm_``arch`` with the runtime arguments ``names`` (pointers to
    ``dtype`` rows, the rest int32; those in ``aligned`` compiled as multiples of 16) and the
    compile-time arguments ``consts`` (num_warps among them)."""
    consts = dict(consts)
    warps = consts.pop("num_warps")
    signature = dict.fromkeys(names, "i32")
    signature.update(X=f"*{dtype}", Y=f"*{dtype}", LSE="*fp32", SLOTS="*i64", MAXES="*fp32")
    signature = {name: signature[name] for name in names}
    signature.update(dict.fromkeys(consts, "constexpr"))
    attrs = {(names.index(name),): [["tt.divisibility", 16]] for name in aligned}
    source = ASTSource(kernel, signature, consts, attrs)
    return triton.compile(source, target=GPUTarget("cuda", arch, 32), options={"num_warps": warps})


def resource_usage(plan: triton_softmax._Plan, dtype: str, precise: bool, arch: int = 90) -> dict[str, int]:
    """``{"REG": ..., "STACK": ..., "SHARED": ..., "LOCAL": ...}`` of the cooperative kernel (or
    the spans kernel, for a spans plan) compiled for ``plan`` and ``dtype`` rows, writing y (no
    LSE), as the launch would compile it (``triton_softmax.cooperative_constexprs``,
    ``spans_constexprs``).

    Raises:
        RuntimeError: cuobjdump is missing or does not report the kernel.
    """
    precise = precise and dtype == "fp32"
    if plan.name == "spans":
        kernel, names, aligned = triton_softmax._softmax_spans_kernel, _SPANS_ARGS, _SPANS_ALIGNED
        consts = triton_softmax.spans_constexprs(plan, 1 << 20, precise, write_y=True, write_lse=False)
    else:
        kernel, names, aligned = triton_softmax._softmax_cooperative_kernel, _ARGS, _ALIGNED
        consts = triton_softmax.cooperative_constexprs(plan, precise, write_y=True, write_lse=False)
    compiled = _compile(kernel, names, aligned, dtype, consts, arch)
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


def global_accesses(plan: triton_softmax._Plan, dtype: str, align: int, arch: int = 90) -> dict[str, int]:
    """The global loads and stores in the PTX of the cooperative kernel compiled for ``plan``
    and ``dtype`` rows off 16-byte boundaries (the pointers aligned, the row length and strides
    specialized as no multiple of 16), with the constexpr ALIGN = ``align``: instruction ->
    static count, e.g. ``{"ld.global.v4.b32": 24, "st.global.b16": 1}`` (a v4.b32 access moves
    16 bytes, a b16 one 2)."""
    consts = {**triton_softmax.cooperative_constexprs(plan, False, write_y=True, write_lse=False), "ALIGN": align}
    ptx = _compile(triton_softmax._softmax_cooperative_kernel, _ARGS, ("X", "Y", "LSE", "SLOTS"), dtype, consts,
                   arch).asm["ptx"]
    counts: dict[str, int] = {}
    for op in re.findall(r"\b(?:ld|st)\.global(?:\.[a-z0-9]+)*", ptx):
        counts[op] = counts.get(op, 0) + 1
    return dict(sorted(counts.items()))


def _table_rows() -> list[tuple[str, str, int, bool, bool]]:
    """(label, dtype, row length, precise, spans) for every COOP_LONG and SPANS_LONG launch,
    at its longest row."""
    rows = []
    for spans, table in ((False, triton_softmax.COOP_LONG), (True, triton_softmax.SPANS_LONG)):
        for path, launches in table.items():
            dtypes = ("fp32",) if path in ("precise", "fast") else ("bf16", "fp16")
            rows += [(f"{'spans ' if spans else ''}{path} <= {launch.max_cols}", dtype, launch.max_cols,
                      path != "fast", spans) for launch in launches for dtype in dtypes]
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--table", action="store_true",
                   help="every launch of kernels.triton_softmax.COOP_LONG and SPANS_LONG")
    p.add_argument("--spans", action="store_true", help="the spans schedule (--chunk: its block, --warps, "
                   "--per-sm; --lag)")
    p.add_argument("--dtypes", default="fp32,bf16,fp16")
    p.add_argument("--n", type=int, default=65536, help="row length (sets the chunks a row); default 65536")
    p.add_argument("--chunk", type=int, help="TUNING['coop_chunk'] (default: as the launch decides)")
    p.add_argument("--warps", type=int, help="TUNING['coop_warps']")
    p.add_argument("--per-sm", type=int, help="TUNING['coop_programs_per_sm'] (only reported: the compile ignores it)")
    p.add_argument("--lag", action=argparse.BooleanOptionalAction, help="TUNING['coop_lag']")
    p.add_argument("--early-poll", action=argparse.BooleanOptionalAction, help="TUNING['coop_early_poll']")
    p.add_argument("--hold-x", action=argparse.BooleanOptionalAction,
                   help="TUNING['coop_hold_x'] (16-bit inputs with the lag)")
    p.add_argument("--fast", action="store_true", help="float32: the fast path (precise by default)")
    p.add_argument("--arch", type=int, default=90, help="compute capability, e.g. 90 for sm_90 (H100, H200)")
    p.add_argument("--json", action="store_true", help="print one JSON object a configuration instead")
    p.add_argument("--global-widths", action="store_true",
                   help="the PTX's global loads and stores of the --n launch (16-bit rows off 16-byte boundaries) "
                        "without and with TUNING['coop_align']'s ALIGN = 8, one JSON object each")
    args = p.parse_args(argv)
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")  # the default, without triton 3.9's warning

    if args.global_widths:
        for dtype in args.dtypes.split(","):
            plan = plan_for(args.n, dtype, False)
            for align in ((0, 16 // DTYPES[dtype].itemsize) if DTYPES[dtype].itemsize == 2 else (0,)):
                print(json.dumps({"dtype": dtype, "n": args.n, "chunk": plan.block, "warps": plan.num_warps,
                                  "lag": plan.lag, "hold_x": plan.hold_x, "ALIGN": align,
                                  **global_accesses(plan, dtype, align, arch=args.arch)}), flush=True)
        return 0

    if args.table:
        configs = _table_rows()
    elif args.spans:
        triton_softmax.TUNING.update(spans_block=args.chunk, spans_warps=args.warps, spans_per_sm=args.per_sm,
                                     spans_lag=args.lag)
        configs = [(f"spans N = {args.n}", dtype, args.n, not args.fast, True) for dtype in args.dtypes.split(",")]
    else:
        triton_softmax.TUNING.update(cooperative=True, coop_chunk=args.chunk, coop_warps=args.warps,
                                     coop_programs_per_sm=args.per_sm, coop_lag=args.lag,
                                     coop_early_poll=args.early_poll, coop_hold_x=args.hold_x)
        configs = [(f"N = {args.n}", dtype, args.n, not args.fast, False) for dtype in args.dtypes.split(",")]
    if not args.json:
        print(f"# triton {triton.__version__}, sm_{args.arch}")
    for label, dtype, n_cols, precise, spans in configs:
        try:
            plan = (spans_plan_for if spans else plan_for)(n_cols, dtype, precise)
            usage = resource_usage(plan, dtype, precise, arch=args.arch)
        except (RuntimeError, OSError, ValueError) as e:
            print(f"bench/kernel_registers.py: {e}", file=sys.stderr)
            return 2
        fit = triton_softmax.programs_per_sm(usage["REG"], plan.num_warps, usage["SHARED"])
        precise = precise and dtype == "fp32"
        if spans:
            triton_softmax.TUNING["spans"] = True
            launch = triton_softmax.spans_launch(n_cols, DTYPES[dtype], precise)
            triton_softmax.TUNING["spans"] = None
            asked = launch.per_sm
        else:
            launch = triton_softmax.long_row_launch(n_cols, DTYPES[dtype], precise)
            asked = triton_softmax.TUNING["coop_programs_per_sm"] or (launch.per_sm if launch else 1)
        if args.json:
            print(json.dumps({"launch": label, "schedule": plan.name, "dtype": dtype, "n": n_cols, "chunk": plan.block,
                              "warps": plan.num_warps, "chunks": plan.num_chunks, "lag": plan.lag,
                              "early_poll": plan.early_poll, "hold_x": plan.hold_x, "precise": precise,
                              "per_sm_asked": asked, "per_sm_fit": fit,
                              "spill_ok": bool(getattr(launch, "spill_ok", False)), **usage}), flush=True)
            continue
        print(f"{label:<18} {dtype:>4} chunk {plan.block:>5} x {plan.num_warps} warps  lag={int(plan.lag)} "
              f"early={int(plan.early_poll)} precise={int(precise)}:  {usage['REG']:>3} registers, "
              f"spills {usage.get('STACK', 0)} B, {fit} a SM, {asked} asked", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
