"""`cvs-tui analyze CONFIG --logs PATH... [--out DIR] [--run KEY] [--follow]`: judge a run from its logs.

PATH is one log per node (in rank order), a folder of node logs (`node<rank>.log` by rank, else every
`*.log` by name), or a cvs-tui run folder (every `logs/<run slug>/` in it). Writes results.json,
report.html, junit.xml and summary.md into DIR, exactly as a live run does.
With --follow, PATH is one growing log per node (or `-`, standard input) and the run is shown live
until every stream ends or the user stops it (`cvs_tui.cli.follow`), then judged the same way.
Exit 0 when nothing failed, 1 when anything failed, 2 on bad input.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import multiprocessing.process
import os
import sys
import time
import traceback
from collections.abc import AsyncIterator
from pathlib import Path

from cvs_tui.cli.commands.history import record, trend_of
from cvs_tui.cli.metrics import add_metrics_options
from cvs_tui.cli.options import add_history_option, add_public_options, resolve_config_arg
from cvs_tui.cli.publish import publish
from cvs_tui.core.atomic import FILE_MODE, write_atomic
from cvs_tui.core.config.loader import LoadedConfig, load_config
from cvs_tui.core.errors import UserError
from cvs_tui.core.history.trend import Trend
from cvs_tui.core.plan import Plan, secret_values
from cvs_tui.core.report import REPORT_FILES, write_reports
from cvs_tui.core.results import Results
from cvs_tui.core.run_folder import EXPORTS, RunFolder
from cvs_tui.core.sources.inputs import plan_for
from cvs_tui.core.sources.offline import analyze_paths
from cvs_tui.core.textsafe import register_secrets, sanitize_text
from cvs_tui.core.watch.options import RunOptions

DEFAULT_OUT_ROOT = Path("runs")
ERROR_LOG = "error.log"  # as a live run names its own traceback (runner/suite.py)


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "analyze",
        help="judge a finished (or crashed) run from its node logs: metrics, verdicts, reports",
        description="Parse every node's MaxText log, compute the metrics over the steady-state window, "
        "judge them against the config's threshold file and write results.json, report.html, junit.xml "
        "and summary.md. Nothing is launched.",
        epilog=(
            "Long logs: each node's step records are kept in files under $TMPDIR while it is judged "
            "(about 45 MB per 100 MB of log, removed after). "
            "Exit codes: 0 nothing failed, 1 something failed, 2 bad input."
        ),
    )
    p.add_argument("config", metavar="CONFIG", help="the CVS jaxmaxtext config the run used (JSON)")
    p.add_argument(
        "--logs",
        nargs="+",
        required=True,
        metavar="PATH",
        help="one log per node in rank order, a folder of node logs, or a cvs-tui run folder; "
        "with --follow: one growing log per node, or - for standard input",
    )
    p.add_argument(
        "--follow",
        action="store_true",
        help="watch the logs as they grow (a run cvs-tui did not launch, e.g. `kubectl logs -f POD | "
        "cvs-tui analyze CONFIG --follow --logs -`); judge when every stream ends or on q / Ctrl-C",
    )
    d = RunOptions()
    for flag, default, meta, text in (
        ("--compile-allowance", d.compile_allowance_s, "S", "seconds to the first step"),
        ("--hang-factor", d.hang_factor, "K", "after the first steps: K x the p95 step time"),
        ("--hang-min", d.hang_min_s, "S", "and at least S seconds"),
    ):
        p.add_argument(
            flag,
            type=float,
            default=default,
            metavar=meta,
            help=f"with --follow, a node shows as stalled after no progress for: {text} ({default:g}), "
            "as the live watchdog counts it",
        )
    p.add_argument(
        "--idle-exit",
        type=float,
        metavar="S",
        help="with --follow: stop following and judge after S seconds with no new line from any log "
        "(following also ends by itself once every log wrote its exit line, EXIT_CODE=N)",
    )
    p.add_argument(
        "--out", metavar="DIR", help="output folder (default: runs/analyze-<time>/, runs/follow-<time>/)"
    )
    p.add_argument(
        "--run",
        metavar="KEY",
        help="the run the logs belong to: a sweep key, SMOKE, CKPT-1, CKPT-2 or CKPT-REF "
        "(needed when the config selects several runs and the logs are not a run folder)",
    )
    p.add_argument("--no-ui", action="store_true", help="print the summary only, even in a terminal")
    p.add_argument(
        "--json", action="store_true", help="print the summary as JSON on stdout (implies --no-ui)"
    )
    p.add_argument("--no-mouse", action="store_true", help="terminal UI without mouse support")
    p.add_argument("--ascii", action="store_true", help="ASCII-only drawing characters")
    add_public_options(p)
    add_history_option(p)
    add_metrics_options(p)
    p.set_defaults(handler=run)


def print_summary(results: Results, paths: dict[str, Path]) -> None:
    for line in _summary_lines(results, paths):
        print(sanitize_text(line))  # reasons and messages quote node text (audit #5)


def _summary_lines(results: Results, paths: dict[str, Path]) -> list[str]:
    out: list[str] = []
    for r in results.runs:
        fails = [v for v in r.verdicts if v.status == "FAIL"]
        line = f"{r.status:4}  {r.key}  ({r.kind}, {r.outcome}"
        line += f", {len(fails)} failed metric(s))" if fails else ")"
        out.append(line)
        if r.outcome != "complete":
            out.append(f"      {r.reason}")
        for v in fails:
            out.append(f"      {v.message}")
    out.append(f"{'PASS' if results.passed else 'FAIL'}  overall")
    return out + file_lines(paths)


def file_lines(paths: dict[str, Path]) -> list[str]:
    """The files a judging wrote, one a line (results first)."""
    return [
        f"  {kind:8} {p}"
        for kind, p in [("results", paths["results"]), *((k, v) for k, v in paths.items() if k != "results")]
    ]


def summary_dict(results: Results, paths: dict[str, Path]) -> dict[str, object]:
    """What `print_summary` says, for scripts: the verdict, each run's status and failures, the files."""
    return {
        "passed": results.passed,
        "runs": [
            {
                "key": r.key,
                "kind": r.kind,
                "status": r.status,
                "outcome": r.outcome,
                "reason": r.reason,
                "failed": [
                    {"metric": v.metric, "message": v.message} for v in r.verdicts if v.status == "FAIL"
                ],
            }
            for r in results.runs
        ],
        "files": {k: str(v) for k, v in paths.items()},
    }


def run(args: argparse.Namespace) -> int:
    if not args.follow:
        for flag in ("metrics_port", "metrics_textfile", "idle_exit"):
            if getattr(args, flag) is not None:
                name = "--" + flag.replace("_", "-")
                raise UserError(
                    f"{name}: only with --follow (finished logs are judged at once); add --follow"
                )
    loaded = load_config(resolve_config_arg(args.config))
    if args.follow:
        from cvs_tui.cli.follow import run_follow

        return run_follow(args, loaded)
    if "-" in args.logs:
        raise UserError(
            "--logs -: standard input is read only with --follow (it is a stream, not a log file)"
        )
    out = Path(args.out) if args.out else DEFAULT_OUT_ROOT / time.strftime("analyze-%Y%m%d-%H%M%S")
    if out.exists() and not out.is_dir():
        raise UserError(f"--out: {out} exists and is not a folder; pick another path")
    plan = plan_for(loaded, args.logs)
    register_secrets(secret_values(plan))  # masked on screen and in every artefact (audit #11)
    results = analyze_paths(plan, args.logs, args.run)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"results": RunFolder(out).write_results(results)}
    trend = trend_of(out, args)
    if not args.no_ui and not args.json and sys.stdout.isatty() and sys.stdin.isatty():
        # The screen first: the reports (matplotlib, ~1-2 s) are drawn by a child process meanwhile,
        # and the summary is printed when the user leaves the app, where it stays readable.
        paths.update({kind: out / name for kind, name in REPORT_FILES.items()})
        child = _write_reports_in_child(results, out, trend)
        try:
            _show(loaded, plan, results, args, paths)
        finally:
            child.join()
        if child.exitcode != 0:
            raise UserError(f"reports: writing them into {out} failed; the traceback is in {out / ERROR_LOG}")
    else:
        paths.update(write_reports(results, out, trend))
    if args.json:
        print(json.dumps(summary_dict(results, paths), indent=2))
    else:
        print_summary(results, paths)
    clean = publish(out, args, loaded=loaded, results=results)
    record(out, args, out=sys.stderr if args.json else None)  # stdout holds the JSON alone
    return 0 if results.passed and clean else 1


def _reports_child(results: Results, out: Path, trend: Trend | None) -> None:
    try:
        write_reports(results, out, trend)
    except BaseException:  # the screen belongs to the app: the traceback goes to a file
        write_atomic(out / ERROR_LOG, traceback.format_exc(), mode=FILE_MODE)
        os._exit(1)


def _write_reports_in_child(
    results: Results, out: Path, trend: Trend | None
) -> multiprocessing.process.BaseProcess:
    """report.html, junit.xml and summary.md written by a forked child (its exit status says if they were)."""
    fork = multiprocessing.get_context("fork")
    proc = fork.Process(target=_reports_child, args=(results, out, trend), daemon=True)
    proc.start()
    return proc


def _show(
    loaded: LoadedConfig, plan: Plan, results: Results, args: argparse.Namespace, paths: dict[str, Path]
) -> None:
    """The finished run in the same screens a live run uses."""
    from cvs_tui.core.sources.inputs import resolve_log_inputs
    from cvs_tui.core.sources.replay import replay_events
    from cvs_tui.tui.app import run_tui

    events = replay_events(
        plan,
        results,
        resolve_log_inputs(plan, args.logs, args.run),
        results_path=paths["results"],
        report_path=paths.get("html"),
    )

    async def source() -> AsyncIterator[object]:
        for ev in events:
            yield ev

    asyncio.run(
        run_tui(
            source(),  # type: ignore[arg-type]
            title=f"cvs-tui analyze  {Path(loaded.path).name}",
            mouse=not args.no_mouse,
            ascii=args.ascii,
            # a saved log view goes beside the results it was read from, not into the working directory
            export_dir=paths["results"].parent / EXPORTS,
            history=not args.no_history,
        )
    )
