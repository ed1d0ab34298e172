"""Benchmark the Triton softmax against torch.softmax and a device-to-device copy.

For rows x N inputs (N = 1024, 4096, 16384, 65536, 1M; rows chosen so every input
holds the same number of elements, several times the L2), reports GB/s counted as
bytes read + bytes written (one read of x, one write of y) over the median time of
``triton.testing.do_bench``, next to ``torch.softmax`` and to ``y.copy_(x)`` on the same
tensors measured in the same run: the copy is the bandwidth ceiling.

Each line also gives the same calls timed from a CUDA graph (``do_bench_cudagraph``: GPU time
alone, "graph" and its ratio to torch.softmax's), the host time a call takes to return
("host", microseconds) and the SM clock nvidia-smi reports.  do_bench clears the L2 before
every call and times it with events; when a call's host time exceeds the clear's and the
kernel's GPU time, the GPU waits for the launch and do_bench counts the wait.  The Python
wrapper and Triton's launcher cost 40-150 us a call on the H200 machine's CPU (torch.softmax
10-35), near that edge for inputs of 2**26 elements: on some calls do_bench then reads far below
the graph timing (BENCHMARKS.md, eleventh session).

    python bench/softmax.py --out results/softmax.json
    python bench/softmax.py --dtypes fp32 --ns 65536 --sweep   # also time schedule variants
    python bench/softmax.py --ns 16384,65536 --sweep --variants coop   # cooperative variants only
    python bench/softmax.py --ns 1048576 --sweep --variants spans   # the spans schedule's launch shapes

Each "ours" line ends with the schedule that ran (kernels.triton_softmax.schedule_for).

Exits with status 0 and a message when no CUDA device is visible.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
#: A variant whose one untimed call takes longer than this is reported and skipped.
SLOW_CALL_S = 0.1


def sweep_variants(n: int, dtype_name: str):
    """(label, softmax kwargs, TUNING overrides) schedule variants worth timing at row length n.

    Variants of the single-pass, online and split schedules say ``cooperative: False`` where
    the default would otherwise take the cooperative schedule; ``coop_off`` is the default
    of before the cooperative schedule existed.
    """
    variants = [("auto", {}, {})]
    off = {"cooperative": False}
    if n <= 16384:
        variants += [(f"warps{w}", {}, {"rows_warps": w, **off}) for w in (4, 8, 16, 32)]
        if n >= 4096:
            variants.append(("online4096", {"block_size": 4096, "num_chunks": 1}, {}))
        if n >= 8192:
            variants.append(("online8192", {"num_chunks": 1}, {}))
        if n <= 4096:
            # rows per program of the single-pass kernel (default: 2048 // N, at least 1)
            variants += [(f"rows_r{r}_w{w}", {}, {"rows_block_r": r, "rows_warps": w, **off})
                         for r, w in ((1, 4), (2, 4), (2, 8), (4, 4), (4, 8), (8, 8), (8, 16))]
    else:
        variants += [(f"chunks{nc}", {"num_chunks": nc}, {}) for nc in (1, 8, 16, 32)]
        if dtype_name != "fp32" and n % 8:
            # split rows off 16-byte boundaries in chunks of the row, not of its aligned body
            variants += [(f"chunks{nc}_noalign", {"num_chunks": nc}, {"split_align": False}) for nc in (8, 16, 32)]
        variants += [(f"online_pps{pps}_b{bs}_w{w}", {"num_chunks": 1},
                      {"online_programs_per_sm": pps, "stream_block": bs, "stream_warps": w})
                     for pps, bs, w in ((1, 4096, 8), (2, 4096, 8), (4, 4096, 8), (1, 8192, 16), (2, 8192, 16))]
    if n > 16384:
        # L2 eviction hints on the two-sweep schedules (first sweep kept, second dropped): the
        # default takes them except on the precise float32 path without kept exponentials
        # (keep_p off), so each variant flips it
        if dtype_name == "fp32":
            variants += [("hints_off", {}, {"l2_hints": False}),
                         ("fast_hints_off", {"precise": False}, {"l2_hints": False}),
                         # the precise online sweep of before: the exponential computed twice
                         ("keep_p_off", {}, {"keep_p": False}),
                         ("keep_p_off_hints_on", {}, {"keep_p": False, "l2_hints": True})]
        else:
            variants.append(("hints_off", {}, {"l2_hints": False}))
    if n > 16384:
        # per-lane running statistics in the first sweep (fast exponential only: float32
        # variants take the fast path), over launch shapes of the online and split schedules
        fast, tag = ({"precise": False}, "fast_lanes") if dtype_name == "fp32" else ({}, "lanes")
        lanes = {"lane_stats": True}
        variants.append((tag, fast, lanes))
        for bs, w in ((4096, 8), (4096, 16), (8192, 16), (8192, 32), (16384, 16), (16384, 32)):
            variants += [(f"{tag}_chunks{nc}_b{bs}_w{w}", {**fast, "num_chunks": nc},
                          {**lanes, "stream_block": bs, "stream_warps": w}) for nc in (8, 16, 32)]
            variants += [(f"{tag}_pps{pps}_b{bs}_w{w}", {**fast, "num_chunks": 1},
                          {**lanes, "online_programs_per_sm": pps, "stream_block": bs, "stream_warps": w})
                         for pps in (1, 2, 3, 4, 6)]
    if n >= 8192:
        if n <= 16384:  # longer rows never take the cooperative schedule by default
            variants.append(("coop_off", {}, off))
        # chunk width x warps of the cooperative schedule (default 8192 x 16); 16384 spills
        # registers at 16 warps when compiled for sm_90, hence 32 warps there
        variants += [(f"coop_c{c}_w{w}", {}, {"cooperative": True, "coop_chunk": c, "coop_warps": w})
                     for c, w in ((4096, 8), (4096, 16), (8192, 8), (8192, 16), (8192, 32), (16384, 32))]
    if n >= 16384:
        # several programs a SM: more rows in flight while a group waits for its partners
        variants += [(f"coop_pps{k}_c{c}_w{w}", {}, {"cooperative": True, "coop_chunk": c, "coop_warps": w,
                                                     "coop_programs_per_sm": k})
                     for k in (2, 3, 4) for c, w in ((1024, 2), (2048, 4), (4096, 4), (4096, 8), (8192, 8), (8192, 16))
                     if c < n]
        # the best of those on the precise float32 path (68-70% at N = 16384 and 65536), with fewer groups
        variants += [(f"coop_pps3_c4096_w4_g{g}", {}, {"cooperative": True, "coop_chunk": 4096, "coop_warps": 4,
                                                       "coop_programs_per_sm": 3, "coop_groups": g})
                     for g in (6, 12, 18)]
    if n >= 32768 and dtype_name != "fp32":
        # 16-bit rows: more programs a SM (the launch caps them at what the registers allow)
        variants += [(f"coop16_pps{k}_c{c}_w{w}", {}, {"cooperative": True, "coop_chunk": c, "coop_warps": w,
                                                       "coop_programs_per_sm": k})
                     for k in (4, 6, 8) for c, w in ((4096, 4), (8192, 4), (8192, 8), (16384, 8))]
    if n >= 32768 and dtype_name == "fp32":
        # the fast path on the long-row cooperative launch shapes
        variants += [(f"fast_coop_pps{k}_c{c}_w4", {"precise": False},
                      {"cooperative": True, "coop_chunk": c, "coop_warps": 4, "coop_programs_per_sm": k})
                     for k in (2, 3, 4) for c in (2048, 4096)]
        variants += [(f"fast_coop_pps{k}_c4096_w{w}", {"precise": False},
                      {"cooperative": True, "coop_chunk": 4096, "coop_warps": w, "coop_programs_per_sm": k})
                     for k, w in ((5, 4), (6, 4), (8, 4), (8, 2))]
    if n >= 32768:
        # publish a row ahead of the poll (coop_lag), over launch shapes of the long-row
        # cooperative schedule; the launch caps programs a SM at what the registers allow
        # (lagn: without the early poll; lag16x: 16-bit holding exponentials, not the input; lag16xn:
        # both, the default of 16-bit rows past 262144)
        early, late = {"coop_early_poll": True}, {"coop_early_poll": False}
        paths = ([("lag", {}, early), ("lagn", {}, late), ("fast_lag", {"precise": False}, early)]
                 if dtype_name == "fp32" else
                 [("lag16", {}, {"coop_hold_x": True, **early}), ("lag16n", {}, {"coop_hold_x": True, **late}),
                  ("lag16x", {}, {"coop_hold_x": False, **early}), ("lag16xn", {}, {"coop_hold_x": False, **late})])
        variants += [(f"{tag}_pps{k}_c{c}_w{w}", kw, {"cooperative": True, "coop_lag": True, "coop_chunk": c,
                                                       "coop_warps": w, "coop_programs_per_sm": k, **extra})
                     for tag, kw, extra in paths
                     for k, c, w in ((3, 4096, 4), (4, 4096, 4), (4, 4096, 8), (4, 8192, 8), (4, 8192, 4),
                                     (5, 2048, 4), (6, 2048, 4), (8, 2048, 4), (8, 2048, 2),
                                     (6, 2048, 2), (8, 1024, 2), (10, 1024, 2))]
        # a bound, not a schedule (wrong outputs: TUNING's coop_exchange): the lag launches of
        # 4096 and 8192 x 4 warps with no wait on the partners, to split the long rows' time
        # between the exchange and the rest
        variants += [(f"noexch_{tag}_pps{k}_c{c}_w4", kw, {"cooperative": True, "coop_lag": True, "coop_chunk": c,
                                                          "coop_warps": 4, "coop_programs_per_sm": k,
                                                          "coop_exchange": False, **extra})
                     for tag, kw, extra in paths for k, c in ((3, 4096), (4, 8192))]
        # the narrow launch shapes without the lag
        tag, kw, shapes = (("fast_coop", {"precise": False}, ((5, 4), (6, 4), (8, 4))) if dtype_name == "fp32"
                           else ("coop16", {}, ((6, 4), (8, 2))))
        variants += [(f"{tag}_pps{k}_c2048_w{w}", kw, {"cooperative": True, "coop_chunk": 2048, "coop_warps": w,
                                                       "coop_programs_per_sm": k}) for k, w in shapes]
    if dtype_name != "fp32" and n % 8 and n > 65536:
        # 16-bit rows off 16-byte boundaries (--ns 262145): the cooperative launch with
        # windows from the boundary before each row (TUNING's coop_align; off: 25.5% of copy against
        # 35.2% at 262145, H100, 2026-12-07)
        variants.append(("coop_align", {}, {"coop_align": True, "unaligned_online": False}))
        # the default before 2026-12-07 (the cooperative launch) where the default is now online
        variants.append(("unaligned_online_off", {}, {"unaligned_online": False, "unaligned_split": False}))
        variants.append(("unaligned_split_off", {}, {"unaligned_split": False}))
        # the same windows on the launch of rows up to 262144 (holding the input: 249 registers
        # and no spill for sm_90, against 255 and 88 bytes a thread for the default past it), and
        # on narrower chunks (fewer registers a thread)
        variants.append(("coop_align_hold", {}, {"coop_align": True, "coop_hold_x": True, "coop_early_poll": True,
                                                 "unaligned_online": False}))
        variants += [(f"coop_align_c4096_pps{k}", {}, {"coop_align": True, "cooperative": True, "coop_lag": True,
                                                      "coop_chunk": 4096, "coop_warps": 4, "coop_programs_per_sm": k})
                     for k in (4, 6)]
    if n in (32768, 65536) and dtype_name != "fp32":
        # 16-bit rows whole in registers: the single-pass kernel, and the persistent single pass
        # with prefetch (the cooperative kernel with one chunk a row)
        variants += [(f"rows_b{n}_w{w}", {"block_size": n}, {"rows_warps": w}) for w in (16, 32)]
        variants.append((f"coop1_c{n}_w32", {}, {"cooperative": True, "coop_chunk": n, "coop_warps": 32}))
    if n >= 16384 and dtype_name == "fp32":
        # the precise path at 2 warps a program (the fast path's best up to 65536)
        variants += [(f"coop_pps{k}_c{c}_w2", {}, {"cooperative": True, "coop_chunk": c, "coop_warps": 2,
                                                   "coop_programs_per_sm": k})
                     for k, c in ((6, 4096), (8, 4096), (8, 2048), (12, 2048))]
    if n <= 4096:
        # one chunk per row (no exchange), many persistent groups: a single pass that
        # prefetches each program's next row
        variants += [(f"coop1_w{w}_g{g}", {}, {"cooperative": True, "coop_chunk": n, "coop_warps": w,
                                               "coop_groups": g})
                     for w in (2, 4, 8) for g in (528, 1056, 2112, 4224) if n // w >= 128]
    if dtype_name == "fp32" and n >= 4096:
        # the precise path summing its exponentials in float64 (sum_f64; the default where one
        # program holds the row, see SUM64_WARPS): the default launch, then cooperative launch
        # shapes (with the lag from 262144, as COOP_LONG has it)
        f64 = {"sum_f64": True}
        variants.append(("f64", {}, f64))
        if n <= 16384:  # the default sums in float64 here: the compensated sum for comparison
            variants.append(("f64_off", {}, {"sum_f64": False}))
            variants += [(f"f64_coop1_w{w}", {}, {**f64, "cooperative": True, "coop_chunk": 16384, "coop_warps": w})
                         for w in (16, 32) if n > 8192]
        else:
            lag = n > 262144
            variants += [(f"f64_coop_c{c}_w{w}_s{k}" + ("_lag" if lag else ""), {},
                          {**f64, "cooperative": True, "coop_chunk": c, "coop_warps": w, "coop_programs_per_sm": k,
                           "coop_lag": lag})
                         for c, w, k in ((2048, 2, 8), (2048, 4, 6), (2048, 4, 8), (4096, 4, 3), (4096, 4, 4),
                                         (4096, 8, 4), (8192, 8, 2)) if c < n]
    if dtype_name == "fp32" and n in (32768, 65536):
        # the precise path in 16384-wide chunks, one program a SM (2 or 4 programs a row): the
        # one-chunk launch of 16384 rows with a small exchange, with either sum, with and
        # without the lag (all spill a little for sm_90: 56-280 bytes a thread, triton 3.6)
        variants += [(f"wide_c16384_w{w}_{'f64' if use64 else 'comp'}" + ("_lag" if lag else ""), {},
                      {"cooperative": True, "coop_chunk": 16384, "coop_warps": w, "coop_programs_per_sm": 1,
                       "sum_f64": use64, "coop_lag": lag, "coop_early_poll": lag})
                     for w in (16, 32) for use64 in (True, False) for lag in (False, True)]
    if 16384 <= n <= 65536:
        # whole rows a program, the next rows pipelined through shared memory (PIPELINED_16BIT);
        # pipe_off: the launch the default took before it
        kw = {"precise": False} if dtype_name == "fp32" else {}
        variants.append(("pipe_off", kw, {"pipelined": False}))
        variants += [(f"pipe_s{st}_w{w}_pps{k}", kw, {"pipelined": True, "pipe_stages": st, "pipe_warps": w,
                                                      "pipe_per_sm": k})
                     for st, w, k in ((2, 32, 1), (3, 32, 1), (4, 32, 1), (3, 16, 1), (4, 16, 1), (3, 32, 2))]
    if dtype_name != "fp32" and 16384 < n <= 131072 and n % 8:
        # the online launch's rows off 16-byte boundaries without the aligned-body path
        variants.append(("align_off", {}, {"align_rows": False}))
    if 2048 < n <= 32768 and n & (n - 1):
        # the single pass's rows held whole in next_pow2(n) lanes, not in pieces
        variants.append(("pieces_off", {}, {"row_pieces": False}))
        variants += [(f"pieces_w{w}", {}, {"pieces_warps": w, **off}) for w in (2, 4, 8, 16)]
        if dtype_name == "fp32":
            variants.append(("fast_pieces_off", {"precise": False}, {"row_pieces": False}))
    if n >= 65536:
        # the spans schedule (SPANS_LONG): spans streamed through the L2 with the cooperative
        # exchange; block x warps, programs a SM (capped by the registers), rows in flight, lag
        paths = [("spans", {})] + ([("fast_spans", {"precise": False})] if dtype_name == "fp32" else [])
        shapes = ((2048, 8, 4, 2, True), (2048, 8, 4, 1, True), (2048, 8, 4, 4, True), (2048, 8, 4, 2, False),
                  (2048, 8, 2, 2, True), (2048, 8, 3, 2, True), (2048, 8, 6, 2, True), (1024, 4, 8, 2, True),
                  (1024, 4, 8, 4, True), (1024, 4, 4, 2, True), (4096, 8, 4, 2, True), (4096, 16, 2, 2, True))
        variants += [(f"{tag}_b{b}_w{w}_k{k}_g{g}" + ("" if lag else "_nolag"), kw,
                      {"spans": True, "spans_block": b, "spans_warps": w, "spans_per_sm": k, "spans_groups": g,
                       "spans_lag": lag})
                     for tag, kw in paths for b, w, k, g, lag in shapes]
    if dtype_name == "fp32":
        variants.append(("fast", {"precise": False}, {}))
        if 8192 <= n <= 16384:
            variants.append(("fast_coop", {"precise": False}, {"cooperative": True}))
    return variants


def cpu_us_per_call(fn, calls: int = 100) -> float:
    """Host microseconds one call of ``fn`` takes to return (launches are asynchronous): the
    mean over ``calls`` calls without synchronizing.  do_bench clears the L2 before each timed
    call, and the GPU idles waiting for the launch whenever a call's host time passes that
    clear's plus the kernel's GPU time, which do_bench then counts as kernel time."""
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    elapsed = time.perf_counter() - start
    torch.cuda.synchronize()
    return elapsed / calls * 1e6


#: nvidia-smi fields read after every timing (reading only: the clocks are never set here).
_GPU_FIELDS = ("clocks.sm", "clocks.mem", "power.draw", "temperature.gpu", "clocks_event_reasons.active")


def gpu_state() -> dict:
    """The GPU's SM and memory clocks (MHz), power (W), temperature (C) and active clock-event
    (throttle) reasons as nvidia-smi reports them now; {} where nvidia-smi cannot say.  A
    schedule bound by its own work slows down when the SM clock drops, while the copy, bound by
    HBM, does not: this tells such a drop from a slower kernel."""
    for fields in (_GPU_FIELDS, _GPU_FIELDS[:-1]):
        try:
            out = subprocess.run(["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits",
                                  "-i", str(torch.cuda.current_device())], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return {}
        if out.returncode == 0 and out.stdout.strip():
            return dict(zip(fields, (v.strip() for v in out.stdout.strip().split(","))))
    return {}


def bench_case(dtype_name: str, n: int, total: int, sweep: bool, warmup: float, rep: float,
               only: list[str] | None = None, polls: bool = False) -> list[dict]:
    from triton.testing import do_bench, do_bench_cudagraph

    import triton

    from kernels import triton_softmax
    from kernels.triton_softmax import schedule_for, softmax

    dtype = DTYPES[dtype_name]
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    rows = max(1, total // n)
    x = torch.randn(rows, n, device="cuda", dtype=torch.float32).mul_(3).to(dtype)
    y = torch.empty_like(x)
    nbytes = 2 * x.numel() * x.element_size()
    out = []

    def record(name, fn, check=None, schedule=None):
        ms = do_bench(fn, warmup=warmup, rep=rep, return_mode="median")
        # The same calls replayed from a CUDA graph: GPU time alone, whatever the host's speed.
        graph_ms = do_bench_cudagraph(fn, rep=rep, return_mode="median")
        r = {"dtype": dtype_name, "N": n, "rows": rows, "impl": name, "ms": ms, "GBps": nbytes / (ms * 1e-3) / 1e9,
             "graph_ms": graph_ms, "graph_GBps": nbytes / (graph_ms * 1e-3) / 1e9,
             "cpu_us": cpu_us_per_call(fn), "gpu": gpu_state()}
        if check is not None:
            r["max_abs_diff_vs_torch"] = check
        if schedule is not None:
            r["schedule"] = schedule
        out.append(r)
        return r

    copy = record("copy", lambda: y.copy_(x))
    ref = torch.softmax(x.float()[:64], dim=-1)
    tor = record("torch.softmax", lambda: torch.softmax(x, dim=-1))
    variants = sweep_variants(n, dtype_name) if sweep else [("auto", {}, {})]
    if dtype_name == "fp32" and not sweep:
        variants.append(("fast", {"precise": False}, {}))  # the triton-softmax-fast target
    if only:
        variants = [v for v in variants if v[0] == "auto"
                    or any(v[0] == k[1:] if k.startswith("=") else k in v[0] for k in only)]
    defaults = dict(triton_softmax.TUNING)
    for label, kw, tuning in variants:
        triton_softmax.TUNING.update(tuning)
        try:
            got = softmax(x[:64], **kw).float()
            diff = float((got - ref.to(dtype).float()).abs().max())
            name = "ours" if label == "auto" else f"ours[{label}]"
            schedule = schedule_for(rows, n, dtype, x.device, **kw)
            # A cooperative launch whose programs cannot all be resident waits out its spin
            # limit on every row (correct, but seconds a call): time one call (after one that
            # compiles the full shape's kernel) before do_bench.
            softmax(x, **kw)
            torch.cuda.synchronize()
            grids = []
            t0 = time.perf_counter()
            with triton_softmax.recording_cooperative_grids(grids):
                softmax(x, **kw)
            torch.cuda.synchronize()
            once = time.perf_counter() - t0
            if grids:  # the grid the residency cap let through, as programs a SM
                schedule += f" {grids[0][0] / sms:.2f}/SM"
            if once > SLOW_CALL_S:
                print(f"{dtype_name:>5} N={n:<8} {name}: one call took {once:.2f} s; not timed "
                      f"(a cooperative launch whose partners are not all resident?)", flush=True)
                continue
            r = record(name, lambda kw=kw: softmax(x, **kw), diff, schedule)
            if polls and grids:
                # One more call that counts its polls (a kernel compiled with two atomics a row):
                # how often a program's first poll of a row found a partner missing.
                with triton_softmax.counting_cooperative_polls() as counts:
                    softmax(x, **kw)
                if counts:
                    extra, again = counts[0].tolist()
                    precise = kw.get("precise", True)
                    plan = (triton_softmax._spans_plan(rows, n, dtype, sms, precise)
                            or triton_softmax._cooperative_plan(rows, n, dtype, sms, precise))
                    pairs = rows * (plan.num_chunks if plan else 1)
                    r["polls"] = {"extra": extra, "polled_again": again, "row_programs": pairs}
        except triton.runtime.errors.OutOfResources as e:  # a sweep's launch past the SM's shared memory
            print(f"{dtype_name:>5} N={n:<8} ours[{label}]: not launched: {e}", flush=True)
        finally:
            triton_softmax.TUNING.update(defaults)
    for r in out:
        r["of_copy"] = r["GBps"] / copy["GBps"]
        r["over_torch"] = tor["ms"] / r["ms"]
        r["graph_of_copy"] = r["graph_GBps"] / copy["graph_GBps"]
        r["graph_over_torch"] = tor["graph_ms"] / r["graph_ms"]
        if "polls" in r:
            q = r["polls"]
            r["schedule"] += (f" polls: {100 * q['polled_again'] / max(1, q['row_programs']):.1f}% again, "
                              f"{q['extra'] / max(1, q['polled_again']):.0f} extra each")
        print(f"{dtype_name:>5} N={n:<8} rows={rows:<7} {r['impl']:<28} {r['ms']:8.3f} ms {r['GBps']:8.0f} GB/s "
              f"{100 * r['of_copy']:5.1f}% of copy  {r['over_torch']:5.2f}x torch"
              + (f"  diff {r['max_abs_diff_vs_torch']:.1e}" if "max_abs_diff_vs_torch" in r else "")
              + (f"  [{r['schedule']}]" if "schedule" in r else "")
              + f"  graph {100 * r['graph_of_copy']:5.1f}% {r['graph_over_torch']:4.2f}x"
              + f"  host {r['cpu_us']:.0f} us/call"
              + (f"  {r['gpu'].get('clocks.sm', '?')} MHz" if r["gpu"] else ""), flush=True)
    del x, y
    torch.cuda.empty_cache()
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, help="write results as JSON here")
    p.add_argument("--dtypes", default="fp32,bf16")
    p.add_argument("--ns", default="1024,4096,16384,65536,1048576")
    p.add_argument("--elements", type=int, default=1 << 26, help="elements per input (rows = elements // N)")
    p.add_argument("--sweep", action="store_true", help="also time schedule variants")
    p.add_argument("--variants", default="", help="with --sweep: only variants whose label contains one of "
                   "these comma-separated strings (e.g. coop,fast), or whose label is one given as =label; "
                   "'auto' is always timed")
    p.add_argument("--rounds", type=int, default=1, help="time every case this many times, each on a fresh "
                   "input allocation (results swing between allocations: see BENCHMARKS.md)")
    p.add_argument("--warmup", type=float, default=25.0, help="do_bench warm-up, ms")
    p.add_argument("--rep", type=float, default=100.0, help="do_bench measuring time, ms")
    p.add_argument("--polls", action="store_true", help="after timing a cooperative launch, count in one more "
                   "call how often its programs polled a row's slots more than once (shown after the schedule)")
    args = p.parse_args(argv)

    if not torch.cuda.is_available():
        print("bench/softmax.py: no CUDA device visible; nothing to measure.", file=sys.stderr)
        return 0
    import triton

    env = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
           "cuda": torch.version.cuda, "python": platform.python_version(), "argv": sys.argv}
    print(f"# {env['device']}  torch {env['torch']}  triton {env['triton']}  {env['date']}", flush=True)
    rows = []
    for dtype_name in args.dtypes.split(","):
        for n in (int(s) for s in args.ns.split(",")):
            for r in range(args.rounds):
                got = bench_case(dtype_name, n, args.elements, args.sweep, args.warmup, args.rep,
                                 [v for v in args.variants.split(",") if v], args.polls)
                rows += [dict(row, round=r) for row in got]
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"environment": env, "results": rows}, indent=1))
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
