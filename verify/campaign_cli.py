"""``python -m verify run``: the whole campaign within a time budget, written as a report.

Exit codes as the rest of the CLI: 0 every cell passed and every mutant was killed;
1 a cell violated its contract, a mutant survived or a control failed; 2 bad
arguments (``verify.cli.UsageError``).
"""

from __future__ import annotations

import math
import sys
from pathlib import Path


def add_run_parser(sub) -> None:
    p = sub.add_parser("run", help="check every available target in every dtype within a time budget; write a report")
    p.add_argument("--device", default="auto", help="auto (cuda if available, else cpu), cpu or cuda (default auto)")
    p.add_argument("--budget", type=float, default=480.0, metavar="SECONDS",
                   help="total wall-clock budget in seconds (default 480), shared by the cells, mutation testing "
                        "and the FA3 experiment")
    p.add_argument("--targets", "--target", action="extend", nargs="+", metavar="NAME",
                   help="registered target names (default: every non-mutant target available on the device; "
                        "a mutant may be named explicitly)")
    p.add_argument("--dtypes", "--dtype", action="extend", nargs="+", metavar="D",
                   help="dtypes to run (default: every dtype some target supports)")
    p.add_argument("--report", metavar="DIR", default="reports/latest",
                   help="directory for report.json, report.md and index.html (default reports/latest)")
    p.add_argument("--seed", type=int, default=None, help="seed (default: a fresh one, recorded in the report)")
    p.add_argument("--no-mutants", action="store_true", help="skip mutation testing")
    p.add_argument("--no-fa3", action="store_true", help="skip the FlashAttention-3 Table 3 experiment")
    p.add_argument("--no-shrink", action="store_true",
                   help="report each cell's first failing input as found, unshrunk (shrinking can take tens of "
                        "seconds per violation, beyond the budget)")
    p.add_argument("--isolation", choices=("auto", "process", "none"), default="auto",
                   help="where cells run: 'process' searches them in a worker process that is replaced when a "
                        "target crashes or kills the CUDA context, so the campaign goes on and the input is saved; "
                        "'none' in this process; 'auto' (default) is 'process' on CUDA, 'none' on CPU")
    p.add_argument("--jobs", default="auto", metavar="N",
                   help="cells and mutants searched side by side, each in a worker process of its own: a whole "
                        "number, or 'auto' (default): on CUDA one per 4 host cores, at most 4 (most of a GPU check's "
                        "time is on the host), on the CPU or with --isolation none 1. The budget stays wall time: N jobs give each cell up to "
                        "N times the time")
    p.add_argument("--progress", choices=("auto", "rich", "plain", "none"), default="auto",
                   help="progress display (default: a bar on a terminal, a line per cell otherwise)")


def _rerun(args, seed: int) -> str:
    from reports.campaign import quote_command

    argv = ["run", "--device", args.device, "--budget", f"{args.budget:g}", "--seed", str(seed),
            "--report", str(args.report)]
    if args.targets:
        argv += ["--targets", *args.targets]
    if args.dtypes:
        argv += ["--dtypes", *args.dtypes]
    if args.no_mutants:
        argv.append("--no-mutants")
    if args.no_fa3:
        argv.append("--no-fa3")
    if args.no_shrink:
        argv.append("--no-shrink")
    if args.isolation != "auto":
        argv += ["--isolation", args.isolation]
    if args.jobs != "auto":
        argv += ["--jobs", str(args.jobs)]
    return quote_command(argv)


def cmd_run(args) -> int:
    from reports import campaign, report_html, report_json, report_md
    from verify.cli import EXIT_OK, EXIT_VIOLATION, UsageError, output_directory, parse_dtypes

    if not (math.isfinite(args.budget) and args.budget > 0):
        raise UsageError(f"--budget must be a positive number of seconds, got {args.budget:g}")
    dtypes = parse_dtypes(args.dtypes)
    output_directory(args.report, "--report")
    try:
        args.device = campaign.resolve_device(args.device)
        campaign.resolve_jobs(args.jobs, args.device, args.isolation)  # bad --jobs: exit 2 before any work
    except campaign.CampaignError as e:
        raise UsageError(str(e)) from None
    seed = args.seed if args.seed is not None else campaign.new_seed()
    argv0 = sys.argv[0] if sys.argv else ""
    typed = (campaign.quote_command(sys.argv[1:]) if argv0.endswith(("__main__.py", "verify"))
             else _rerun(args, seed))
    opts = campaign.CampaignOptions(
        device=args.device, budget_s=args.budget, targets=args.targets, dtypes=dtypes, seed=seed,
        mutants=not args.no_mutants, fa3=not args.no_fa3, shrink=not args.no_shrink, report_dir=str(args.report),
        command_line=typed,
        rerun_command=_rerun(args, seed), progress=args.progress, isolation=args.isolation, jobs=args.jobs,
    )
    try:
        result = campaign.run_campaign(opts)
    except campaign.CampaignError as e:
        raise UsageError(str(e)) from None
    doc = report_json.build_document(result)
    out = Path(args.report)
    paths = [report_json.write(doc, out), report_md.write(doc, out), report_html.write(doc, out)]
    s = doc["summary"]
    print(f"\n{s['verdict']}: {s['cells_run']} cells searched ({s['passed']} passed, {s['violated']} violated, "
          f"{s['unsupported']} unsupported), {s['examples']} examples in {doc['budget']['wall_s']:.0f}s")
    if doc["mutation"]["enabled"]:
        m = doc["mutation"]["summary"]
        score = "n/a" if m["mutation_score"] is None else f"{100 * m['mutation_score']:.0f}%"
        print(f"mutation score {score} ({m['killed']}/{m['mutants']}); survivors: {', '.join(m['survivors']) or 'none'}"
              f"; failed controls: {', '.join(m['controls_failed']) or 'none'}"
              + (f"; the suite failed on: {', '.join(m['errors'])}" if m.get("errors") else ""))
    for v in doc["violations"]:
        print(f"VIOLATION {v['target']} {v['dtype']}: {v['kind']}: {v['message']}")
        if v["replay_command"]:
            print(f"  replay: {v['replay_command']}")
    print("report: " + ", ".join(str(p) for p in paths))
    return EXIT_VIOLATION if s["exit_code"] else EXIT_OK
