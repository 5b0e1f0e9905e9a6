"""`cvs-tui analyze CONFIG --follow --logs FILE...|-`: watch logs cvs-tui did not launch as they grow.

The same live view as a run (the Textual app in a terminal, the headless console with --no-ui or when
stdout or stdin is not a terminal, so always when the log comes on stdin), then the same results and
reports as `analyze`. Following ends when every stream has ended (stdin's EOF) or when the user stops
it (q then s in the view, Ctrl-C or SIGTERM headless); the exit code is analyze's.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import os
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from cvs_tui.cli.commands.analyze import file_lines
from cvs_tui.cli.commands.history import record, rewrite_reports_with_history
from cvs_tui.cli.metrics import MetricsExport, start_metrics
from cvs_tui.cli.publish import publish
from cvs_tui.cli.verdict_line import suite_line_from_files
from cvs_tui.core.bus import EventBus
from cvs_tui.core.cluster import local_cluster
from cvs_tui.core.config.loader import LoadedConfig
from cvs_tui.core.errors import UserError
from cvs_tui.core.plan import Plan, build_plan
from cvs_tui.core.results import Results
from cvs_tui.core.run_folder import RunFolder
from cvs_tui.core.sources.follow import FollowSession
from cvs_tui.core.sources.inputs import run_key_for
from cvs_tui.core.watch.followers import STDIN, Follower, followers_for
from cvs_tui.core.watch.options import RunOptions

if TYPE_CHECKING:
    from rich.console import Console

DEFAULT_OUT_ROOT = Path("runs")


def quiet_stdout() -> None:
    """Point standard output at /dev/null (its reader went away), so later prints do not raise."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


def _follow_console() -> Console:
    """The headless console; when its reader goes away it goes quiet instead of exiting, so following
    goes on and the verdict is still judged and written (L2)."""
    from cvs_tui.cli.console import headless_console

    console = headless_console()

    def on_broken_pipe() -> None:
        console.quiet = True
        quiet_stdout()

    console.on_broken_pipe = on_broken_pipe  # type: ignore[method-assign]
    return console


def follow_plan(loaded: LoadedConfig, nodes: int, out: Path) -> Plan:
    """The config's plan for a local cluster of as many nodes as logs are followed (as `analyze` builds
    one for logs on disk; a single-node config keeps one node)."""
    n = nodes if loaded.mode == "distributed" else 1
    return build_plan(loaded, local_cluster(n), out_dir=out, run_id=out.name or "follow")


def stall_options(args: argparse.Namespace) -> RunOptions:
    """The no-progress limits a node is shown stalled after (the watchdog's; nothing is stopped)."""
    for name, value in (
        ("--compile-allowance", args.compile_allowance),
        ("--hang-factor", args.hang_factor),
        ("--hang-min", args.hang_min),
    ):
        if not math.isfinite(value) or value <= 0:
            raise UserError(f"{name}: {value:g} must be a finite number greater than 0")
    return RunOptions(
        compile_allowance_s=args.compile_allowance, hang_factor=args.hang_factor, hang_min_s=args.hang_min
    )


def run_follow(args: argparse.Namespace, loaded: LoadedConfig) -> int:
    options = stall_options(args)
    followers = followers_for(args.logs)
    out = Path(args.out) if args.out else DEFAULT_OUT_ROOT / time.strftime("follow-%Y%m%d-%H%M%S")
    folder = RunFolder(out)
    if out.exists() and not out.is_dir():
        raise UserError(f"--out: {out} exists and is not a folder; pick another path")
    if folder.events_path.exists() or folder.logs_dir.exists():
        raise UserError(f"--out: {out} already holds a run; pick a new folder for the followed logs")
    plan = follow_plan(loaded, len(followers), out)
    key = run_key_for(plan, args.run)
    out.mkdir(parents=True, exist_ok=True)
    folder.write_plan(plan)
    ui = not args.no_ui and sys.stdout.isatty() and (sys.stdin is not None and sys.stdin.isatty())
    ui = ui and STDIN not in args.logs
    if hasattr(signal, "SIGPIPE"):
        # a reader of the console that goes away (`... | head -1`) must not kill following before the
        # verdict is written (L2): the write fails instead, and the console goes quiet
        signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    export = start_metrics(args, config=Path(plan.config_path).name)
    try:
        results, paths = asyncio.run(
            _main(plan, key, followers, folder, options, ui=ui, args=args, export=export)
        )
    finally:
        if export is not None:
            export.close()
    rewrite_reports_with_history(out, args)
    try:
        # one summary: without the terminal UI the console already ended with the suite line; after it,
        # the same line as a live run prints
        if ui:
            line = suite_line_from_files(paths["results"], paths.get("html"))
            print(line if line is not None else "")
        for f in file_lines(paths):
            print(f)
        sys.stdout.flush()
    except BrokenPipeError:
        quiet_stdout()
    clean = publish(out, args, loaded=loaded, results=results)
    record(out, args)
    return 0 if results.passed and clean else 1


async def _main(
    plan: Plan,
    key: str,
    followers: Sequence[Follower],
    folder: RunFolder,
    options: RunOptions,
    *,
    ui: bool,
    args: argparse.Namespace,
    export: MetricsExport | None = None,
) -> tuple[Results, dict[str, Path]]:
    bus = EventBus(folder.events_path)
    idle = getattr(args, "idle_exit", None)
    if idle is not None and not (math.isfinite(idle) and idle > 0):
        raise UserError(f"--idle-exit: {idle:g} is not a positive number of seconds")
    session = FollowSession(
        plan,
        key,
        followers,
        folder.path,
        emit=bus.publish,
        options=options,
        backlog=bus.backlog,
        idle_exit_s=idle,
    )
    source = bus.subscribe() if export is None else export.tap(bus.subscribe())
    task = asyncio.create_task(session.follow())
    task.add_done_callback(lambda _t: bus.close())
    loop = asyncio.get_running_loop()
    # SIGHUP (the terminal closed, L2) ends following and judges, as Ctrl-C and SIGTERM do
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, session.stop)
    try:
        from cvs_tui.cli.console import run_console, run_detached

        if ui:
            from cvs_tui.core.feed import EventFeed
            from cvs_tui.tui.app import run_tui

            feed = EventFeed(source)

            async def on_quit(choice: str) -> None:
                if choice == "stop":
                    session.stop()

            choice = await run_tui(
                feed,
                title=f"cvs-tui follow  {Path(session.plan.config_path).name}",
                mouse=not args.no_mouse,
                ascii=args.ascii,
                on_quit=on_quit,
                info={"run folder": str(folder.path), "following": ", ".join(session.names)},
                run_dir=folder.path,
                following=True,
                history=not args.no_history,
            )
            if choice == "detach":
                await run_detached(
                    feed, folder.console_log, what="following", attach=folder.path, ascii=args.ascii
                )
            elif choice == "stop":
                await run_console(feed, ascii=args.ascii)
        else:
            await run_console(source, console=_follow_console(), ascii=args.ascii)
        return await task, session.paths
    finally:
        if not task.done():
            session.stop()
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await task
