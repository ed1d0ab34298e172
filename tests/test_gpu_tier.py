"""The GPU tier (``pytest -m gpu``): the whole suite on CUDA at real sizes.

Our Triton kernels, torch.softmax and the references must show no violation in
every dtype they declare; every mutant (torch and Triton forms) must be killed on the GPU;
the oracle's GPU fast path must agree with its CPU path.  Peers (SDPA backends,
FlexAttention) are measured by ``python -m verify run --device cuda`` in
bench/gpu_tier.sh, where a deviation is a finding to report, not a test failure.
Per-cell results are appended to $FLASHVERIFY_OUT/gpu-cells.jsonl when set (one JSON object
per line and one write per test, so pytest-xdist workers can share the file).
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from kernels.mutants import all_mutants
from kernels.registry import get_target
from reports.check_report import cell_to_dict
from verify import mutation, oracle, search

pytestmark = pytest.mark.gpu

EXAMPLES = int(os.environ.get("FLASHVERIFY_GPU_EXAMPLES", "25"))
CELL_BUDGET_S = float(os.environ.get("FLASHVERIFY_GPU_CELL_BUDGET_S", "60"))
STRICT_TARGETS = ["triton-softmax", "triton-softmax-fast", "triton-attention", "triton-attention-tf32", "torch.softmax",
                  "ref-blocked-attention", "ref-online-softmax"]


@pytest.fixture(autouse=True)
def _cached_memory_back_to_the_device():
    """After each test its cached blocks go back to the device: the workers share one GPU, and
    a wide case (8 GiB inputs) waits for memory that another worker's allocator would keep."""
    yield
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def _append_jsonl(name: str, rows: list[dict]) -> None:
    """Append rows to $FLASHVERIFY_OUT/name when set: one write, so xdist workers can share the file."""
    out = os.environ.get("FLASHVERIFY_OUT")
    if not out:
        return
    text = "".join(json.dumps(r, default=str) + "\n" for r in rows)
    fd = os.open(Path(out) / name, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _record(cells) -> None:
    _append_jsonl("gpu-cells.jsonl", [{k: v for k, v in cell_to_dict(c).items() if k != "features"} for c in cells])


def _with_probe_round(target, opts: search.CheckOptions, at_least: int = 0) -> search.CheckOptions:
    """``opts`` with ``at_least`` examples, or twice the probe round's and two more, the fewest
    that have one (search.probe_round), which every dtype of ``target`` then runs."""
    round_examples = max(search.probe_round_examples(target, d, opts) for d in target.caps.dtypes)
    opts = dataclasses.replace(opts, max_examples=max(at_least, 2 * round_examples + 2))
    assert all(search.probe_round(target, d, opts) for d in target.caps.dtypes)
    return opts


@pytest.mark.parametrize("name", STRICT_TARGETS)
def test_gpu_target_has_no_violation(name: str) -> None:
    """Each cell searches EXAMPLES examples, or twice its probe round's and two more, the fewest that
    have one (search.probe_round): with 25, attention cells ran no probe round once the attention
    strategy drew 13 probes (3f0d281), so the GPU tier of 89d138f forced none of them through our
    kernels (H100, 2026-12-06)."""
    target = get_target(name)
    opts = search.CheckOptions(device="cuda", seed=20261129, profile=search.PROFILES["gpu"], budget_s=CELL_BUDGET_S,
                               artifact_dir=os.environ.get("FLASHVERIFY_OUT", ".flashverify") + "/cex")
    opts = _with_probe_round(target, opts, EXAMPLES)
    cells = search.check_target(target, opts)
    _record(cells)
    for c in cells:
        assert c.status in ("passed", "unsupported"), f"{c.dtype}: {c.violation.one_line()}\n{c.counterexample}"
    # Whether the cell's many-tiles probe climbs (c.tiles_probe, in gpu-cells.jsonl) is a matter
    # of its budget and of the speed the workers beside it leave: with 3 workers on an H100 every
    # attention cell tried the first rung, with 6 triton-attention-tf32's did not (2026-12-05).
    # test_gpu_attention_many_tiles_first_rung runs that rung with no budget.
    assert any(c.status == "passed" and c.examples > 0 for c in cells)


#: The wide-offsets tests hold 8 to 48 GiB of the device each: run by one worker, one after the
#: other (``--dist loadgroup``).  Beside triton-attention's on an H100 (79 GiB), torch.softmax's
#: float32 case waited 90 s for memory and was not tried (2026-12-05 19:30); beside five
#: workers' other cells two of them were not tried either (21:36-21:48), so bench/gpu_tier.sh
#: runs them after the rest, with no other worker.
WIDE_GROUP = pytest.mark.xdist_group("wide-offsets")


@WIDE_GROUP
@pytest.mark.parametrize("name", ["triton-softmax", "triton-softmax-fast", "torch.softmax"])
def test_gpu_softmax_is_right_past_2_31_elements(name: str) -> None:
    """The wide-offsets probe runs, and passes, in every dtype but float64.  No budget: the
    test above stops at its cell's budget, which waiting for the one-wide-case-a-device lock
    behind other workers' cases spent before the probe in a 6-worker run (2026-12-02).  The
    examples: twice the probe round's, the fewest that have one (search.probe_round); a fixed 12
    had none once the softmax strategy drew 9 probes (H100, 2026-12-05)."""
    target = get_target(name)
    opts = search.CheckOptions(device="cuda", seed=20261202, profile=search.PROFILES["gpu"],
                               artifact_dir=os.environ.get("FLASHVERIFY_OUT", ".flashverify") + "/cex")
    opts = _with_probe_round(target, opts)
    cells = search.check_target(target, opts)
    _record(cells)
    for c in cells:
        assert c.status in ("passed", "unsupported"), f"{c.dtype}: {c.violation.one_line()}\n{c.counterexample}"
        if c.status == "passed" and c.dtype != "float64":
            assert c.wide_probe.startswith("wide-offsets: 2 case(s)"), c.wide_probe


@WIDE_GROUP
@pytest.mark.parametrize("name", ["triton-attention", "triton-attention-tf32"])
def test_gpu_attention_is_right_past_2_31_elements(name: str) -> None:
    """Two wide-offsets cases a dtype (the probe's simplest, then one drawn): the heads of a
    block repeated until Q, K, V and the output each pass 2**31 elements, every repetition
    checked (verify.engine)."""
    from hypothesis import Phase, find, settings

    target = get_target(name)
    opts = search.CheckOptions(device="cuda", profile=search.PROFILES["gpu"], compare_naive=False)
    for dtype in target.caps.dtypes:
        if search.wide_offsets_allowed(dtype, "cuda"):
            continue  # float64
        strategy = search._strategy(target, dtype, opts, probe="wide-offsets")
        seen = []
        find(strategy, lambda case: seen.append(case) or len(seen) >= 2,
             settings=settings(max_examples=2, phases=[Phase.generate], database=None))
        for case in seen[:2]:  # find replays its last example once more
            out = search.run_case(target, case, opts)
            assert out.evaluation.ok, f"{dtype}: {out.evaluation.violations[0].one_line()}\n{case.describe()}"


@pytest.mark.parametrize("name", ["triton-attention", "triton-attention-tf32", "ref-blocked-attention"])
def test_gpu_attention_many_tiles_first_rung(name: str) -> None:
    """The many-tiles probe's first rung (TILES_RUNGS: 258 queries and keys over 48 pairs, more
    query tiles than the SMs) in every dtype but float64, with no budget: two cases a dtype (the
    probe's simplest, causal and square, then one drawn), each within the contract."""
    from hypothesis import Phase, find, settings

    from strategies.attention import TILES_RUNGS

    target = get_target(name)
    opts = search.CheckOptions(device="cuda", profile=search.PROFILES["gpu"], compare_naive=False)
    tried = 0
    for dtype in target.caps.dtypes:
        if dtype == "float64":
            continue  # the float64 profile keeps every case small: the oracle's exact path takes each row
        strategy = search._strategy(target, dtype, opts, probe="many-tiles", tiles=TILES_RUNGS[0][0])
        seen = []
        find(strategy, lambda case: seen.append(case) or len(seen) >= 2,
             settings=settings(max_examples=2, phases=[Phase.generate], database=None))
        for case in seen[:2]:  # find replays its last example once more
            # Nk the rung's length, Nq that or about half of it (causal then cuts on another diagonal)
            s = case.spec
            assert s.seq_k >= TILES_RUNGS[0][0] and s.seq_q in (s.seq_k, s.seq_k // 2 + 1), case.describe()
            out = search.run_case(target, case, opts)
            assert out.evaluation.ok, f"{dtype}: {out.evaluation.violations[0].one_line()}\n{case.describe()}"
            tried += 1
    assert tried >= 2


#: Mutants whose kill may be an illegal memory access, which leaves the CUDA context unusable:
#: they run in a process of their own, so the rest of this worker's tests keep theirs.
CONTEXT_LOSING = ("32-bit offset overflow",)


@pytest.mark.parametrize("mutant", [m for m in all_mutants()[0] if m.bug_class not in CONTEXT_LOSING],
                         ids=lambda m: m.name)
def test_gpu_mutant_is_killed(mutant) -> None:
    """Each mutant (torch and Triton forms) is killed on the GPU within 300 examples per dtype, as in CI.

    On the H200 (2026-11-29) 100 examples per dtype left two to four mutants alive
    (gqa-modulo, head-dim-unmasked, ...): the GPU profile's larger cases are fewer per second.
    """
    opts = search.CheckOptions(device="cuda", max_examples=300, seed=7, compare_naive=False, shrink=False,
                               profile=search.PROFILES["gpu"], artifact_dir=".flashverify/gpu-mutants")
    r = mutation.run_one(mutant, opts)
    _append_jsonl("gpu-mutants.jsonl", [r.to_dict()])
    if r.status == "unavailable":  # e.g. a mutant declared for the CPU only
        pytest.skip(r.violation)
    assert r.status == "killed", f"{mutant.name} survived 300 examples per dtype on the GPU"


@pytest.mark.parametrize("mutant", [m for m in all_mutants()[0] if m.bug_class in CONTEXT_LOSING],
                         ids=lambda m: m.name)
def test_gpu_mutant_that_may_lose_the_context_is_killed_in_a_process_of_its_own(mutant, tmp_path) -> None:
    root = Path(__file__).resolve().parents[1]
    r = subprocess.run([sys.executable, "-m", "verify", "mutants", "--device", "cuda", "--only", mutant.name,
                        "--max-examples", "300", "--seed", "7", "--no-shrink", "--json", str(tmp_path / "kill.json")],
                       cwd=tmp_path, env=dict(os.environ, PYTHONPATH=str(root)), capture_output=True, text=True,
                       timeout=400)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    result = json.loads((tmp_path / "kill.json").read_text())["results"][0]
    _append_jsonl("gpu-mutants.jsonl", [result])
    assert result["status"] == "killed", result


def test_oracle_gpu_fast_path_matches_cpu() -> None:
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 4, 300, 96, generator=gen).to(torch.bfloat16) for _ in range(3))
    k = k[:, :2]
    v = v[:, :2]
    cpu = oracle.attention_truth(q, k, v, scale=0.1, causal=True)
    gpu = oracle.attention_truth(q.cuda(), k.cuda(), v.cuda(), scale=0.1, causal=True)
    diff = (gpu.out.hi.cpu() + gpu.out.lo.cpu() - cpu.out.hi - cpu.out.lo).abs()
    assert bool((diff <= gpu.out.bound.cpu() + cpu.out.bound).all())
    x = torch.randn(64, 5000, generator=gen) * 30
    a, b = oracle.softmax_truth(x), oracle.softmax_truth(x.cuda())
    assert bool(((a.probs.hi - b.probs.hi.cpu()).abs() <= a.probs.bound + b.probs.bound.cpu()).all())
