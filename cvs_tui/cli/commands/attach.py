"""`cvs-tui attach RUN_DIR`: follow a run another cvs-tui process is executing, by reading its run folder.

Only reads the folder, so anyone can open a view of a long run and close it without disturbing it.
Exit codes: 0 the suite passed, 1 it failed or has not ended (yet, or ever: a run that died leaves no end
event, and CI must not read that as a pass), 2 bad input, 3 the view was closed while the run goes on
(detaching is no verdict, neither a pass nor a failure).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from cvs_tui.cli.metrics import add_metrics_options, start_metrics
from cvs_tui.core.run_folder import RunFolder
from cvs_tui.core.sources.attach import FollowStats, follow_run_folder

EXIT_DETACHED = 3  # the view closed while the run goes on: no verdict


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "attach",
        help="watch a run in progress (or finished) from its run folder",
        description="Follow a run that another cvs-tui process is writing, by tailing RUN_DIR/events.jsonl "
        "and the node logs. Closing the view leaves the run alone.",
    )
    p.add_argument("run_dir", metavar="RUN_DIR", type=Path, help="the run folder (holds events.jsonl)")
    p.add_argument("--no-ui", action="store_true", help="print progress lines instead of the TUI")
    p.add_argument("--no-mouse", action="store_true", help="leave the mouse to the terminal (text selection)")
    p.add_argument("--ascii", action="store_true", help="ASCII only (Linux console, PuTTY)")
    p.add_argument("--no-follow", action="store_true", help="show what is there now and stop reading")
    add_metrics_options(p)
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    run_dir: Path = args.run_dir
    folder = RunFolder(run_dir)
    folder.require_events()
    info = folder.plan_info()  # a malformed plan.json stops here, as one line, before any view opens
    stats = FollowStats()
    export = start_metrics(args, config=info.get("config", ""))
    source = follow_run_folder(run_dir, follow=not args.no_follow, stats=stats)
    if export is not None:
        source = export.tap(source)
    ui = not (args.no_ui or not sys.stdout.isatty())
    try:
        if not ui:
            from cvs_tui.cli.console import run_console

            view = asyncio.run(run_console(source, ascii=args.ascii))
        else:
            from cvs_tui.tui.app import CvsApp

            app = CvsApp(
                source,
                title=f"cvs-tui attach {run_dir}",
                info=info,
                ascii_only=args.ascii,
                live=False,  # the run belongs to another process: leaving just closes this view
                run_dir=run_dir,
            )
            app.run(mouse=not args.no_mouse)
            view = app.view
    finally:
        if export is not None:
            export.close()
    if stats.skipped_lines:
        print(
            f"cvs-tui: warning: {run_dir}/events.jsonl: skipped {stats.skipped_lines} unreadable line(s)",
            file=sys.stderr,
        )
    end = view.suite_end
    if end is None:
        if ui and folder.writer_running():
            print(
                f"cvs-tui: detached; the run goes on (no verdict yet): attach again with "
                f"cvs-tui attach {run_dir}",
                file=sys.stderr,
            )
            return EXIT_DETACHED
        print(f"cvs-tui: {run_dir}: the suite has not ended; not a pass", file=sys.stderr)
        return 1
    return 0 if end.passed else 1
