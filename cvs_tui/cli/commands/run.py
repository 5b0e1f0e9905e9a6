"""`cvs-tui [run] CONFIG [--cluster F | --nodes H,H]`: run the suite, live.

In a terminal the Textual view shows it (leaving asks whether to stop the run or detach and let it go on
headless); with `--no-ui`, or when stdout is not a terminal, the headless console prints progress lines,
error hits as they happen and the verdict tables. Ctrl-C or SIGTERM stops the trainers, removes the
containers on every node, writes what is known and exits 130.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import signal
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path

from cvs_tui.cli.commands.history import record, rewrite_reports_with_history
from cvs_tui.cli.metrics import MetricsExport, add_metrics_options, start_metrics
from cvs_tui.cli.options import add_history_option, add_public_options, add_target_args, load_target
from cvs_tui.cli.publish import publish
from cvs_tui.core.bus import EventBus
from cvs_tui.core.cluster import Cluster
from cvs_tui.core.config.loader import LoadedConfig
from cvs_tui.core.errors import UserError
from cvs_tui.core.events import RunEvent
from cvs_tui.core.plan import HOST_KEYS_OFF, Plan, secret_values
from cvs_tui.core.run_folder import RunFolder
from cvs_tui.core.runner.suite import RunOptions, Suite
from cvs_tui.core.textsafe import register_secrets


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "run",
        help="run the suite (`cvs-tui CONFIG` is short for this)",
        description="Run the suite on every node at once: preflight, container, set-up, smoke, each run, "
        "checkpoint resume, report, teardown. Writes results.json (after every stage), report.html, "
        "junit.xml, summary.md, events.jsonl and each node's full log into the run folder.",
        epilog="Exit codes: 0 passed, 1 failed, 2 bad input, 130 interrupted.",
    )
    add_target_args(p)
    p.add_argument("--out", metavar="DIR", help="run folder (default: runs/<run id>/)")
    p.add_argument(
        "--resume", metavar="RUN_DIR", help="continue a run folder: runs already complete are kept"
    )
    p.add_argument("--no-ui", action="store_true", help="headless console output (default when not a TTY)")
    p.add_argument("--no-mouse", action="store_true", help="terminal UI without mouse support")
    p.add_argument("--ascii", action="store_true", help="ASCII-only drawing characters")
    p.add_argument(
        "--no-host-key-check",
        action="store_true",
        help="do not verify SSH host keys (only on networks you trust)",
    )
    add_public_options(p)
    add_history_option(p)
    d = RunOptions()
    p.add_argument(
        "--compile-allowance",
        type=float,
        default=d.compile_allowance_s,
        metavar="S",
        help="seconds a node may take to its first step before the run counts as hung "
        f"({d.compile_allowance_s:g})",
    )
    p.add_argument(
        "--hang-factor",
        type=float,
        default=d.hang_factor,
        metavar="K",
        help=f"after the first steps, hung = no step for K x the p95 step time ({d.hang_factor:g}) ...",
    )
    p.add_argument(
        "--hang-min",
        type=float,
        default=d.hang_min_s,
        metavar="S",
        help=f"... and at least S seconds ({d.hang_min_s:g}); longer while the log announces a checkpoint "
        "save, eval, profiler capture or compilation (docs/watchdog.md)",
    )
    p.add_argument(
        "--lost-after",
        type=float,
        default=d.lost_after_s,
        metavar="S",
        help="a node that cannot be reached (SSH: after 3 keepalives 5 s apart; Slurm: its step ended) "
        f"is lost once this lasts S seconds ({d.lost_after_s:g}); a shorter drop heals",
    )
    add_metrics_options(p)
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    out_dir = Path(args.resume) if args.resume else (Path(args.out) if args.out else None)
    loaded, cluster, plan = load_target(args, out_dir=out_dir, allocate=True)
    register_secrets(secret_values(plan))  # masked on screen and in every artefact (audit #11)
    if plan.slurm is None:
        return _run(args, loaded, cluster, plan)
    # an allocation cvs-tui requested is released on every way out (the suite's teardown does it too)
    from cvs_tui.core.runner.slurm.client import SlurmClient
    from cvs_tui.core.runner.slurm.target import release_owned

    try:
        return _run(args, loaded, cluster, plan)
    finally:
        for line in asyncio.run(release_owned(plan, SlurmClient())):
            print(f"cvs-tui: warning: {line}", file=sys.stderr)


def _run(args: argparse.Namespace, loaded: LoadedConfig, cluster: Cluster, plan: Plan) -> int:
    if plan.preflight_errors:
        raise UserError(plan.preflight_errors)
    if args.no_host_key_check:
        warnings = plan.warnings if HOST_KEYS_OFF in plan.warnings else [*plan.warnings, HOST_KEYS_OFF]
        plan = plan.model_copy(update={"verify_host_keys": False, "warnings": warnings})
    for w in plan.warnings:
        print(f"cvs-tui: warning: {w}", file=sys.stderr)
    if plan.mode == "distributed" and len(plan.nodes) == 1:
        print(
            "cvs-tui: warning: a distributed config on one node; give the nodes with --cluster or --nodes "
            "(for two local ranks: --nodes localhost,localhost)",
            file=sys.stderr,
        )
    for name, value in (
        ("--compile-allowance", args.compile_allowance),
        ("--hang-factor", args.hang_factor),
        ("--hang-min", args.hang_min),
        ("--lost-after", args.lost_after),
    ):
        if not math.isfinite(value) or value <= 0:
            raise UserError(f"{name}: {value:g} must be a finite number greater than 0")
    run_dir = Path(plan.out_dir)
    if args.resume and not run_dir.is_dir():
        raise UserError(f"--resume {run_dir}: no such run folder")
    run_dir.mkdir(parents=True, exist_ok=True)
    options = RunOptions(
        compile_allowance_s=args.compile_allowance,
        hang_factor=args.hang_factor,
        hang_min_s=args.hang_min,
        lost_after_s=args.lost_after,
        resume=run_dir if args.resume else None,
    )
    ui = not args.no_ui and sys.stdout.isatty() and sys.stdin.isatty()
    export = start_metrics(args, config=Path(plan.config_path).name)
    try:
        rc = asyncio.run(_main(loaded, plan, run_dir, options, ui=ui, args=args, export=export))
    finally:
        if export is not None:
            export.close()
    if rc not in (0, 1):
        return rc
    rewrite_reports_with_history(run_dir, args)
    clean = publish(run_dir, args, loaded=loaded, cluster=cluster)
    record(run_dir, args)
    return rc if clean else 1


async def _watch_in_tui(
    source: AsyncIterator[RunEvent],
    plan: Plan,
    folder: RunFolder,
    args: argparse.Namespace,
    stop: Callable[[], None],
) -> bool:
    """The run in the TUI until it ends or is left. After a detach the progress lines go to the run
    folder's console.log and the verdict line still comes at the end; after a stop the console takes over
    (True: it printed the verdict line)."""
    from cvs_tui.cli.console import run_console, run_detached
    from cvs_tui.core.feed import EventFeed
    from cvs_tui.tui.app import run_tui

    run_dir = folder.path
    feed = EventFeed(source)

    async def on_quit(choice: str) -> None:
        if choice == "stop":
            stop()

    choice = await run_tui(
        feed,
        title=f"cvs-tui  {Path(plan.config_path).name}",
        mouse=not args.no_mouse,
        ascii=args.ascii,
        on_quit=on_quit,
        info={"run folder": str(run_dir)},
        run_dir=run_dir,
        history=not args.no_history,
    )
    if choice == "detach":
        await run_detached(feed, folder.console_log, what="the run", attach=run_dir, ascii=args.ascii)
    elif choice == "stop":
        await run_console(feed, ascii=args.ascii)
        return True
    return False


async def _main(
    loaded: LoadedConfig,
    plan: Plan,
    run_dir: Path,
    options: RunOptions,
    *,
    ui: bool,
    args: argparse.Namespace,
    export: MetricsExport | None = None,
) -> int:
    folder = RunFolder(run_dir)
    bus = EventBus(folder.events_path)
    suite = Suite(plan, run_dir, bus, options)
    source = bus.subscribe() if export is None else export.tap(bus.subscribe())
    task = asyncio.create_task(suite.run())
    task.add_done_callback(lambda _t: bus.close())
    loop = asyncio.get_running_loop()
    stopping = False

    def stop() -> None:
        nonlocal stopping
        if not stopping:
            stopping = True
            task.cancel()

    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop)
    try:
        if ui:
            # after a stop the console printed the verdict line
            ui = not await _watch_in_tui(source, plan, folder, args, stop)
        else:
            from cvs_tui.cli.console import run_console

            await run_console(source, ascii=args.ascii)
        with contextlib.suppress(asyncio.CancelledError):
            await task
    finally:
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    if suite.interrupted:
        print(f"cvs-tui: interrupted; what was known is in {run_dir}", file=sys.stderr)
        return 130
    if task.exception() is not None:
        raise task.exception()  # type: ignore[misc]
    if ui:  # the headless console has printed it already
        from cvs_tui.cli.verdict_line import suite_line_from_files

        line = suite_line_from_files(folder.results_path, folder.report_path)
        print(line or f"report: {folder.report_path.resolve().as_uri()}")
    return 0 if suite.results_passed() else 1
