"""`cvs-tui report RESULTS.json [--out DIR]`: re-render report.html, junit.xml and summary.md."""

from __future__ import annotations

import argparse
from pathlib import Path

from cvs_tui.cli.commands.history import trend_of
from cvs_tui.cli.options import add_history_option, add_public_options
from cvs_tui.cli.publish import publish
from cvs_tui.core.report import write_reports
from cvs_tui.core.results import load_results


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "report",
        help="re-render report.html, junit.xml and summary.md from a results.json",
        description="Render the reports from a results.json alone (no logs, no config needed).",
        epilog="Exit codes: 0 the results passed, 1 they hold a failure, 2 bad input.",
    )
    p.add_argument("results", metavar="RESULTS", help="a results.json written by a run or by `analyze`")
    p.add_argument("--out", metavar="DIR", help="output folder (default: the results file's folder)")
    add_public_options(p)
    add_history_option(p)
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    results = load_results(args.results)
    out = Path(args.out) if args.out else Path(args.results).resolve().parent
    # a results.json in a run folder is shown against its history, as the run showed it
    folder = Path(args.results).resolve().parent
    trend = trend_of(folder, args) if Path(args.results).name == "results.json" else None
    paths = write_reports(results, out, trend)
    for kind, p in paths.items():
        print(f"  {kind:6} {p}")
    print(f"{'PASS' if results.passed else 'FAIL'}  overall")
    clean = publish(out, args, results=results)
    return 0 if results.passed and clean else 1
