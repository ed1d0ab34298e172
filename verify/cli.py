"""Command line: python -m verify {check,run,fuzz,targets,replay,mutants}.

Exit codes: 0 no violation; 1 a violation (the shrunk counterexample is printed
and saved, with the one command that replays it); 2 a problem before any
verification (bad arguments, a target that cannot be loaded), explained in one
paragraph, never a bare traceback; 3 an internal error of the suite itself.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path

from verify.output_paths import OutputPathError, directory_for_writing, file_for_writing

EXIT_OK, EXIT_VIOLATION, EXIT_USAGE, EXIT_INTERNAL = 0, 1, 2, 3


class UsageError(Exception):
    """A problem with what was asked, found before any verification ran."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse's default exits 2 too; keep the message short
        self.print_usage(sys.stderr)
        command = self.prog.split()[-1]
        where = "python -m verify" if command == "verify" else f"python -m verify {command}"
        print(f"error: {message}. Run `{where} --help` for the options.", file=sys.stderr)
        sys.exit(EXIT_USAGE)


def parse_dtypes(names: list[str] | None) -> tuple[str, ...] | None:
    """Canonical dtype names from the command line (None: every dtype), or a UsageError."""
    from verify.dtypes import get_format

    if not names:
        return None
    try:
        return tuple(dict.fromkeys(get_format(d).name for d in names))  # bf16 and bfloat16 are one cell
    except ValueError as e:
        raise UsageError(str(e)) from None


def positive_seconds(value: float, flag: str) -> float:
    """``value`` if it is a finite number of seconds above 0, else a UsageError naming ``flag``."""
    if not (math.isfinite(value) and value > 0):
        raise UsageError(f"{flag} must be a positive number of seconds, got {value:g}")
    return value


def device_arg(device: str) -> str:
    """``--device`` as given (cpu, cuda or cuda:K) if this machine can run it, else a UsageError."""
    if device.split(":")[0] not in ("cpu", "cuda"):
        raise UsageError(f"--device must be cpu or cuda, got {device!r}")
    if device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise UsageError(f"--device {device} was asked for, but torch sees no CUDA device here; use --device cpu")
    return device


def output_directory(value: str, flag: str) -> Path:
    """A report directory, checked (not made) before any work: a UsageError if it cannot be written."""
    try:
        return directory_for_writing(value, flag)
    except OutputPathError as e:
        raise UsageError(str(e)) from None


def output_file(value: str, flag: str) -> Path:
    """A report file, checked (not made) before any work: a UsageError if it cannot be written."""
    try:
        return file_for_writing(value, flag)
    except OutputPathError as e:
        raise UsageError(str(e)) from None


def _add_check(sub) -> None:
    p = sub.add_parser("check", help="search for inputs on which a target violates its contract")
    p.add_argument("--op", choices=("softmax", "attention"), required=True)
    p.add_argument("--target", required=True, help="registered NAME, MODULE:FUNC or PATH/FILE.py:FUNC")
    p.add_argument("--dtype", "--dtypes", action="extend", nargs="+", dest="dtypes", metavar="D",
                   help="dtypes to check (one or more, repeatable); default: every dtype the target supports")
    p.add_argument("--device", default="cpu", help="cpu or cuda (default cpu)")
    p.add_argument("--max-examples", type=int, default=100, help="examples per dtype (default 100)")
    p.add_argument("--seed", type=int, default=None,
                   help="seed of the draws (probe sizes still follow the measured speed; see the README)")
    p.add_argument("--masked-rows", choices=("declared", "nan", "zero", "either"), default="declared",
                   help="what a fully masked row must give: all NaN, all 0, or either (all of the row one or "
                        "the other, the same one for every such row of a call); default 'declared': what the "
                        "target declares, else either")
    p.add_argument("--report", metavar="DIR", help="write DIR/report.json")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds one target call may take (default 120)")
    p.add_argument("--profile", choices=("cpu", "gpu"), default=None,
                   help="case sizes (default: gpu on cuda, cpu otherwise)")


def _resolve_check(args):
    from verify.loader import TargetLoadError, load_target
    from verify.search import PROFILES, CheckOptions

    if args.max_examples < 1:
        raise UsageError(f"--max-examples must be at least 1, got {args.max_examples}")
    positive_seconds(args.timeout, "--timeout")
    if args.report is not None:
        output_directory(args.report, "--report")
    device = device_arg(args.device)
    try:
        target = load_target(args.target, args.op)
    except TargetLoadError as e:
        raise UsageError(f"cannot load target {args.target!r}: {e}") from None
    dtypes = parse_dtypes(args.dtypes)
    why = target.unavailable_reason(device)
    if why:
        raise UsageError(f"target {target.name} cannot run here: {why}")
    missing = [d for d in dtypes or () if not target.caps.supports_dtype(d)]
    if missing:  # checking nothing must not pass
        raise UsageError(f"target {target.name} does not declare {', '.join(missing)}: it declares "
                         f"{', '.join(target.caps.dtypes)}; pick --dtype from those, or leave it out for all of them")
    profile = PROFILES[args.profile or ("gpu" if device.startswith("cuda") else "cpu")]
    opts = CheckOptions(dtypes=dtypes, device=device, max_examples=args.max_examples, seed=args.seed,
                        masked_rows=args.masked_rows, timeout=args.timeout, profile=profile)
    return target, opts


def cmd_check(args) -> int:
    from verify import artifacts
    from verify.engine import TargetHang
    from verify.search import check_target
    from reports.check_report import cell_line, write_check_report

    target, opts = _resolve_check(args)
    print(f"checking {target.name} ({args.op}) on {opts.device}: {target.description}")
    try:
        cells = check_target(target, opts)
    except TargetHang as e:
        print(f"VIOLATION hang: {e}", flush=True)
        os._exit(EXIT_VIOLATION)  # the hung thread cannot be joined
    failed = hung = False
    for cell in cells:
        print(cell_line(cell))
        if cell.probe_round.startswith("probe round not run"):
            print(f"  note: {cell.probe_round}")
        if cell.status == "violated":
            failed = True
            v = cell.violation
            hung = hung or v.kind == "hang"
            print(f"  VIOLATION {v.kind}: {v.message}")
            if v.error is not None:
                print(f"  worst element {v.index}: got {v.got!r}, exact {v.expected!r}, "
                      f"error {v.error:.4g} {v.unit} vs tolerance {v.tolerance:.4g}")
            if cell.counterexample:
                as_found = v.kind == "hang" or cell.context_lost  # saved as found, not shrunk
                print(f"  {'counterexample' if as_found else 'shrunk counterexample'}: {cell.counterexample}")
            if cell.artifact:
                print(f"  saved to {cell.artifact}")
                print(f"  replay: {artifacts.replay_command(cell.artifact)}")
    if args.report:
        path = write_check_report(cells, Path(args.report), vars(args))
        print(f"report: {path}")
    if hung:  # a hung call's thread cannot be joined: leave without waiting for it
        sys.stdout.flush()
        os._exit(EXIT_VIOLATION)
    return EXIT_VIOLATION if failed else EXIT_OK


def cmd_targets(args) -> int:
    from kernels.registry import all_targets

    import torch

    rows = []
    cuda_here = torch.cuda.is_available()
    for t in sorted(all_targets(args.op), key=lambda t: (t.op, t.name)):
        c = t.caps
        # "here": this machine, so a CUDA target needs a CUDA device too
        avail = {d: (t.unavailable_reason(d) is None and (d == "cpu" or cuda_here)) for d in ("cpu", "cuda")}
        rows.append({
            "name": t.name, "op": t.op, "kind": t.kind, "dtypes": list(c.dtypes), "devices": list(c.devices),
            "available_here": [d for d, ok in avail.items() if ok],
            "causal": c.causal, "bool_mask": c.bool_mask, "gqa": c.gqa, "neg_inf": c.neg_inf,
            "special_values": c.special_values, "layout_alignment": c.layout_alignment,
            "unit_last_stride": c.unit_last_stride, "zero_strides": c.zero_strides, "vector_input": c.vector_input,
            "empty_inputs": c.empty_inputs,
            "length": [c.min_length, c.max_length],
            "head_dim": [c.head_dim_min, c.head_dim_max], "head_dim_multiple": c.head_dim_multiple,
            "compute": c.compute_precision or "float32 (float64 for float64)",
            "dot": c.dot_precision or "= compute", "description": t.description,
        })
    if args.json:
        print(json.dumps(rows, indent=2))
        return EXIT_OK
    for r in rows:
        extra = "" if r["op"] == "softmax" else (
            f" causal={'y' if r['causal'] else 'n'} mask={'y' if r['bool_mask'] else 'n'} "
            f"gqa={'y' if r['gqa'] else 'n'} D={r['head_dim'][0]}..{r['head_dim'][1]}"
            + (f" (multiples of {r['head_dim_multiple']})" if r["head_dim_multiple"] > 1 else ""))
        here = ",".join(r["available_here"]) or "not here"
        print(f"{r['name']:<28} {r['op']:<9} dtypes={','.join(r['dtypes'])} devices={','.join(r['devices'])} "
              f"[{here}]{extra}\n    {r['description']}")
    return EXIT_OK


def cmd_replay(args) -> int:
    from verify import artifacts
    from verify.engine import DeviceContextLost, TargetHang, check_attention_input, check_softmax_input
    from verify.loader import TargetLoadError, load_target

    if args.device is not None:
        device_arg(args.device)
    if args.timeout is not None:
        positive_seconds(args.timeout, "--timeout")
    try:
        art = artifacts.load(args.file)
    except artifacts.ArtifactError as e:
        raise UsageError(str(e)) from None
    try:
        target = load_target(art.target, art.op)
    except TargetLoadError as e:
        raise UsageError(f"the artifact names target {art.target!r}, which cannot be loaded: {e}") from None
    device = args.device or art.device
    if device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():  # recorded there (an asked-for cuda was refused above)
            raise UsageError(f"the artifact was recorded on {art.device}; no CUDA here. Add --device cpu to try it on CPU.")
    # The policy the rows were held to; an artifact from before it was recorded kept what was asked,
    # where "either" (then the default) meant what the target declares.
    asked = art.options.get("masked_rows", "declared")
    masked = art.options.get("masked_rows_checked") or ("declared" if asked == "either" else asked)
    timeout = args.timeout or art.options.get("timeout") or 120.0
    try:
        inp, how = artifacts.replay_inputs(art, device)
    except artifacts.ArtifactError as e:
        raise UsageError(str(e)) from None
    except KeyError as e:
        raise UsageError(f"{args.file}: the artifact has no input {e}; it is damaged or not a flashverify "
                         "counterexample") from None
    print(f"replaying {art.kind} of {art.target} ({art.op}, {art.dtype}) on {device}: {art.description}")
    print(f"inputs: {how}")
    try:
        if art.op == "softmax":
            # Every check at any size: a probe's case had the second calls' checks whatever its size.
            out = check_softmax_input(target, inp["x"], masked_rows=masked, tile=inp.get("tile", 1), timeout=timeout,
                                      call_checks_at_any_size=True)
        else:
            out = check_attention_input(target, inp["q"], inp["k"], inp["v"], scale=inp["scale"],
                                        causal=inp["causal"], mask=inp["mask"], masked_rows=masked,
                                        tile=inp.get("tile", 1), timeout=timeout, call_checks_at_any_size=True)
    except TargetHang as hang:
        print(f"VIOLATION hang: {hang}", flush=True)
        os._exit(EXIT_VIOLATION)  # the hung thread cannot be joined
    except DeviceContextLost as lost:
        print(f"VIOLATION {lost.violation.one_line()}")
        return EXIT_VIOLATION
    ev = out.evaluation
    if ev.violations:
        for v in ev.violations:
            print(f"VIOLATION {v.one_line()}")
        return EXIT_VIOLATION
    from reports.report_md import ratio_text

    print(f"no violation: max error {ev.max_error:.4g} ({ratio_text(ev.max_ratio)} of tolerance)")
    return EXIT_OK


def cmd_mutants(args) -> int:
    from verify import mutation
    from verify.search import PROFILES, CheckOptions

    device_arg(args.device)
    if args.max_examples < 1:
        raise UsageError(f"--max-examples must be at least 1, got {args.max_examples}")
    if args.budget is not None:
        positive_seconds(args.budget, "--budget")
    if args.only:
        mutants, controls = mutation.all_mutants()
        known = {m.name for m in mutants + controls}
        unknown = [n for n in args.only if n not in known]
        if unknown:
            raise UsageError(f"--only {unknown[0]}: no mutant or control of that name; `python -m verify targets` "
                             "lists them (the names starting with a bug class, and control-*)")
    if args.json:
        output_file(args.json, "--json")
    per = max(5.0, args.budget / 25) if args.budget else None
    opts = CheckOptions(device=args.device, max_examples=args.max_examples, seed=args.seed, budget_s=per,
                        profile=PROFILES["gpu" if args.device.startswith("cuda") else "cpu"],
                        compare_naive=False, shrink=not args.no_shrink)
    print(f"{'mutant':<32} {'result':<14} {'to first failure':<26} {'bug class':<28} reference")
    results = mutation.run_all(opts, names=args.only, progress=lambda r: print(mutation.table_line(r), flush=True))
    summ = mutation.summary(results)
    print(json.dumps(summ))
    if args.json:
        out = Path(args.json)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({"summary": summ, "results": [r.to_dict() for r in results]}, indent=2))
    lost_at = next((i for i, r in enumerate(results) if r.context_lost), None)
    skipped = [] if lost_at is None else [r.name for r in results[lost_at + 1:]]  # run_all ran none of these
    if skipped:
        print(f"NOT RUN after a lost CUDA context: {', '.join(skipped)}; run them with --only NAME")
    if results and all(r.status == "unavailable" for r in results):  # nothing was checked: not a pass
        print(f"error: no mutant or control could run on {args.device}", file=sys.stderr)
        return EXIT_USAGE
    return EXIT_VIOLATION if summ["survivors"] or summ["controls_failed"] or skipped else EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m verify", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    _add_check(sub)
    from verify.campaign_cli import add_run_parser

    add_run_parser(sub)
    from verify.fuzz import add_parser as add_fuzz_parser

    add_fuzz_parser(sub)
    p = sub.add_parser("targets", help="list registered targets and what each supports")
    p.add_argument("--op", choices=("softmax", "attention"), help="only the targets of this op")
    p.add_argument("--json", action="store_true", help="one JSON list instead of text")
    p = sub.add_parser("replay", help="re-run a saved counterexample bit for bit; exit 1 if it still violates")
    p.add_argument("file", help="a saved counterexample (.pt, or its .json description)")
    p.add_argument("--device", default=None, help="cpu or cuda: override the recorded device")
    p.add_argument("--timeout", type=float, default=None,
                   help="seconds the target's call may take (default: as recorded, else 120)")
    p = sub.add_parser("mutants", help="run the suite against every known-broken kernel; exit 1 if one survives")
    p.add_argument("--device", default="cpu", help="cpu or cuda (default cpu)")
    p.add_argument("--budget", type=float, default=None, help="total seconds (split between mutants)")
    p.add_argument("--max-examples", type=int, default=300, help="examples per dtype before a mutant survives")
    p.add_argument("--seed", type=int, default=None, help="seed of the draws (default: a fresh one)")
    p.add_argument("--only", action="extend", nargs="+", metavar="NAME",
                   help="run only these mutants (one or more, repeatable)")
    p.add_argument("--no-shrink", action="store_true", help="report first failures unshrunk (faster)")
    p.add_argument("--json", metavar="FILE", help="write the kill table as JSON")
    return parser


def cmd_run(args) -> int:
    from verify.campaign_cli import cmd_run as run

    return run(args)


COMMANDS = {"check": cmd_check, "targets": cmd_targets, "replay": cmd_replay, "mutants": cmd_mutants, "run": cmd_run,
            "fuzz": lambda args: __import__("verify.fuzz").fuzz.cmd_fuzz(args)}


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # a bug in flashverify itself, not a verdict on the target
        import traceback

        traceback.print_exc()
        print(f"internal error in flashverify ({type(e).__name__}: {e}). This is a bug in the suite, not a "
              "verdict on your kernel; please report it with the command line above.", file=sys.stderr)
        return EXIT_INTERNAL
