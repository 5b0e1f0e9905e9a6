"""Judging a run from its logs on disk (what ``cvs-tui analyze`` and follow mode do): find the node logs,
take the run folder's plan.json or build a plan from the config, parse each log a chunk at a time into a
step table and judge every run through the same node and run judges a live run uses
(:func:`~cvs_tui.core.judge.node.judge_node`, :func:`~cvs_tui.core.judge.run.judge_run`)."""

from __future__ import annotations

import dataclasses
import math
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from cvs_tui.core.config.loader import LoadedConfig
from cvs_tui.core.errors import UserError
from cvs_tui.core.events import LogEvent, MetricsFileStep, RunOutcome, StepEvent
from cvs_tui.core.judge.checkpoint import RESUME_KINDS, judge_checkpoint_resume
from cvs_tui.core.judge.clock import ClockBuilder
from cvs_tui.core.judge.facts import RunFacts
from cvs_tui.core.judge.finalize import base_results, run_context
from cvs_tui.core.judge.metrics import RunContext
from cvs_tui.core.judge.node import NodeDigest, judge_node
from cvs_tui.core.judge.run import judge_run
from cvs_tui.core.judge.spill import SpillError
from cvs_tui.core.judge.table import KINDS, StepCollector, refined_losses
from cvs_tui.core.judge.verdicts import FAIL
from cvs_tui.core.parse.metrics_file import parse_metrics_file
from cvs_tui.core.plan import Plan, PlannedRun
from cvs_tui.core.results import Results, RunRecord, StageRecord
from cvs_tui.core.sources.inputs import live_results, plan_for, plan_hosts, resolve_log_inputs

# MaxText's metrics_file next to a node log: `node0.log` -> `node0.metrics.jsonl`
METRICS_FILE_SUFFIX = ".metrics.jsonl"


def full_losses(steps: Sequence[MetricsFileStep]) -> dict[int, float]:
    """A metrics file's finite train losses by step (the last record of a step wins)."""
    return {m.step: m.loss for m in steps if m.loss is not None and math.isfinite(m.loss)}


def with_full_precision_losses(events: Sequence[LogEvent], full: Mapping[int, float]) -> list[LogEvent]:
    """Train steps take their loss from MaxText's metrics file (``full``: full_losses of the file) by the
    rule the step table applies as it collects (``judge.table.refined_losses``)."""
    import numpy as np

    # a step line without a loss has none to refine
    steps = [(i, e) for i, e in enumerate(events) if isinstance(e, StepEvent) and e.loss is not None]
    out = list(events)
    if not full or not steps:
        return out
    keys = np.fromiter(full, np.int64, len(full))
    order = np.argsort(keys)
    loss = refined_losses(
        np.fromiter((e.step for _, e in steps), np.int64, len(steps)),
        np.fromiter((KINDS.index(e.kind) for _, e in steps), np.int8, len(steps)),
        np.fromiter((e.loss or 0.0 for _, e in steps), np.float64, len(steps)),
        keys[order],
        np.fromiter(full.values(), np.float64, len(full))[order],
    )
    for (i, e), x in zip(steps, loss.tolist(), strict=True):
        if e.loss is not None and x != e.loss and not (math.isnan(x) and math.isnan(e.loss)):
            out[i] = dataclasses.replace(e, loss=x)
    return out


def parse_log_file(path: Path, error_patterns: dict[str, str] | None) -> tuple[list[LogEvent], int]:
    """Every event of one node log, read in chunks, and its line count. When MaxText's metrics file sits
    next to the log (`<name>.metrics.jsonl`), train-step losses come from it at full precision."""
    from cvs_tui.core.parse.parser import NodeLogParser

    parser = NodeLogParser(error_patterns=error_patterns)
    events: list[LogEvent] = []
    try:
        with path.open("rb") as fh:
            while chunk := fh.read(1 << 20):
                events += parser.feed(chunk)
    except OSError as exc:
        raise UserError(f"{path}: cannot read the log ({exc.strerror or exc})") from None
    events += parser.finish()
    full = _metrics_file_losses(path)
    if full is not None:
        events = with_full_precision_losses(events, full)
    return events, parser.lines_seen


# Below this many bytes of logs in all, parsing in this process beats starting workers.
POOL_MIN_BYTES = 64 << 20
T = TypeVar("T")


def _node_tasks(
    fn: Callable[..., T], tasks: Sequence[tuple[object, ...]], sizes: Sequence[int], workers: int | None
) -> list[T]:
    """``fn(*task)`` for each task, in order; big logs go to a process pool, one node per task, so every
    core works (the scanner holds the GIL). ``workers``: pool size (default: one per CPU, at most one per
    log); 1 runs them here."""
    import threading

    n = min(len(tasks), workers or os.cpu_count() or 1)
    # fork is the one start method that needs no importable __main__ and no re-import of the parser; it
    # is safe only while this process has no other thread (an event loop thread, a TUI): else parse here
    if n < 2 or sum(sizes) < POOL_MIN_BYTES or threading.active_count() > 1:
        return [fn(*t) for t in tasks]
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    ctx = multiprocessing.get_context("fork")
    # the largest logs first, so the last task to start is a short one
    order = sorted(range(len(tasks)), key=lambda i: -sizes[i])
    with ProcessPoolExecutor(max_workers=n, mp_context=ctx) as pool:
        futures = {i: pool.submit(fn, *tasks[i]) for i in order}
        return [futures[i].result() for i in range(len(tasks))]


def _sizes(paths: Sequence[Path]) -> list[int]:
    return [p.stat().st_size if p.is_file() else 0 for p in paths]


def parse_node_logs(
    paths: Sequence[Path], error_patterns: dict[str, str] | None, *, workers: int | None = None
) -> list[tuple[list[LogEvent], int]]:
    """:func:`parse_log_file` for each node log, in order, in a process pool when they are big (see
    :func:`_node_tasks`)."""
    return _node_tasks(parse_log_file, [(p, error_patterns) for p in paths], _sizes(paths), workers)


def _metrics_file_losses(path: Path) -> dict[int, float] | None:
    """The full-precision train losses of the metrics file next to the log at ``path``, if there is one."""
    metrics_file = path.with_name(path.stem + METRICS_FILE_SUFFIX)
    if not metrics_file.is_file():
        return None
    try:
        return full_losses(parse_metrics_file(metrics_file))
    except OSError as exc:
        raise UserError(f"{metrics_file}: cannot read the metrics file ({exc.strerror or exc})") from None


def _collect(
    path: Path, error_patterns: dict[str, str] | None, collector: StepCollector, clock: ClockBuilder | None
) -> int:
    """Feed the log a chunk at a time to the parser, its events to ``collector`` and its bytes to
    ``clock``; returns the lines read."""
    from cvs_tui.core.parse.parser import NodeLogParser

    parser = NodeLogParser(error_patterns=error_patterns)
    try:
        with path.open("rb") as fh:
            while chunk := fh.read(1 << 20):
                collector.add(parser.feed(chunk))
                if clock is not None:
                    clock.feed(chunk)
    except OSError as exc:
        raise UserError(f"{path}: cannot read the log ({exc.strerror or exc})") from None
    collector.add(parser.finish())
    return parser.lines_seen


def digest_log_file(
    rank: int,
    path: Path,
    error_patterns: dict[str, str] | None,
    ctx: RunContext,
    host: str,
    arrays: Path,
    keep_losses: bool = False,
) -> NodeDigest:
    """Parse one node log, a chunk at a time, and reduce it to its digest (what the judge needs of it).
    The log is read once: its line clock is read from the chunks the parser gets. The step table and the
    clock go to files next to ``arrays`` (``judge.spill``) and are judged a chunk at a time, so a worker
    holds the same whatever the log's length. A metrics file next to the log refines the train losses
    as the records are collected (``StepCollector``'s ``refine``)."""
    scratch = arrays.with_name(arrays.name + ".scratch")  # removed once the digest is made
    full = _metrics_file_losses(path)
    try:
        spill_clock = ClockBuilder(spill=scratch / "clock")
        collector = StepCollector(spill=scratch / "columns", refine=full)
        try:
            lines = _collect(path, error_patterns, collector, spill_clock)
            spilled, line_clock = collector.table(), spill_clock.spilled()
            return judge_node(
                rank,
                spilled,
                lines,
                ctx=ctx,
                log_path=path,
                host=host,
                arrays=arrays,
                keep_losses=keep_losses,
                clock=line_clock,
            )
        finally:
            spill_clock.files.close()
            collector.files.close()
    except SpillError as exc:
        raise UserError(f"{exc}; point TMPDIR at a writable disk with room for the step records") from None
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def judge_node_logs(
    run: PlannedRun,
    node_logs: Sequence[Path],
    *,
    error_patterns: dict[str, str] | None,
    hosts: Sequence[str] | None = None,
    workers: int | None = None,
    live: RunRecord | None = None,
) -> tuple[RunRecord, dict[int, float] | None]:
    """Judge a finished (or crashed) run from its node logs on disk, index = rank. Each log is parsed and
    digested on its own (in a worker process for big logs), so this process holds no node's steps; see
    :mod:`cvs_tui.core.judge.node`. Also returns, when the record's step series were bounded and the
    run is one the checkpoint-resume verdicts read, its losses by step (see judge_checkpoint_resume).

    ``live``: the record the live run wrote for this run (a run folder's results.json): what only the
    live run could see is kept (see :func:`live_only`) and the record's notes say which is which."""
    paths = [Path(p) for p in node_logs]
    ctx = run_context(run.judge, len(paths))
    keep = run.kind in RESUME_KINDS
    with tempfile.TemporaryDirectory(prefix="cvs-tui-analyze-") as tmp:
        tasks = [
            (
                i,
                p,
                error_patterns,
                ctx,
                hosts[i] if hosts and i < len(hosts) else p.name,
                Path(tmp) / f"node{i}",
                keep,
            )
            for i, p in enumerate(paths)
        ]
        digests = _node_tasks(digest_log_file, tasks, _sizes(paths), workers)
        kept = live_only(live, len(paths))
        record = judge_run(run, digests, kept)
    if live is not None:
        record = with_live_only(record, live, kept)
    first = next((d for d in digests if d.record.steps), None)  # the node record_losses reads
    return record, first.losses if first is not None else None


def live_only(live: RunRecord | None, nodes: int) -> RunFacts:
    """What a live run knew that its logs do not say, as judge_run's facts: the trainers' exit codes,
    the outcome its watchdog or cvs-tui itself decided (a hang, a stop, a node-health failure: never
    re-derived from an exit code 143 that was cvs-tui's own SIGTERM) and the run's node-health metrics."""
    if live is None or len(live.nodes) != nodes:
        return RunFacts()
    health = {m.name: m.value for m in live.metrics if m.name.startswith("health.") and m.value is not None}
    kept = RunFacts(exit_codes=tuple(n.exit_code for n in live.nodes), health=health or None)
    if live.outcome != RunOutcome.COMPLETE.value and live.reason:
        kept = dataclasses.replace(
            kept, outcome=RunOutcome(live.outcome), reason=live.reason, root_cause_node=live.root_cause_node
        )
    return kept


def with_live_only(record: RunRecord, live: RunRecord, kept: RunFacts) -> RunRecord:
    """The re-judged record with the live run's health findings, and a note saying what was re-judged
    from the logs and what was kept from the live run."""
    what = []
    if live.health_findings:
        what.append(f"{len(live.health_findings)} node-health finding(s)")
    if kept.outcome is not None:
        what.append(f"its outcome ({live.outcome}: {live.reason})")
    if kept.exit_codes is not None:
        what.append("the trainers' exit codes")
    if kept.health is not None:
        what.append("its node-health metrics")
    if not what:
        return record
    note = "re-judged from the logs; kept from the live run (not in the logs): " + "; ".join(what)
    update: dict[str, Any] = {"health_findings": list(live.health_findings), "notes": [*record.notes, note]}
    if kept.exit_codes is not None:
        update["nodes"] = [
            n if n.exit_code is not None else n.model_copy(update={"exit_code": code})
            for n, code in zip(record.nodes, kept.exit_codes, strict=False)
        ]
    if kept.outcome is not None:
        # the live run knew why it ended the run (a node-health finding, a hang, its own stop): a
        # trainer's exit code 143 in the log is that stop's SIGTERM, never the cause
        update |= {
            "outcome": live.outcome,
            "reason": live.reason,
            "root_cause_node": live.root_cause_node,
            "status": "FAIL",
        }
    return record.model_copy(update=update)


def analyze_node_logs(
    run: PlannedRun,
    node_logs: Sequence[Path],
    *,
    error_patterns: dict[str, str] | None,
    hosts: Sequence[str] | None = None,
    workers: int | None = None,
) -> RunRecord:
    """Judge a finished (or crashed) run from its node logs on disk, index = rank (see judge_node_logs)."""
    return judge_node_logs(run, node_logs, error_patterns=error_patterns, hosts=hosts, workers=workers)[0]


def analyze_paths(
    source: LoadedConfig | Plan, paths: Sequence[str | Path], run_key: str | None = None
) -> Results:
    """Results for every run found in ``paths`` (see resolve_log_inputs), judged against ``source``: a
    plan, or a config (then the plan is :func:`plan_for` the paths)."""
    plan = source if isinstance(source, Plan) else plan_for(source, paths)
    inputs = resolve_log_inputs(plan, paths, run_key)
    hosts = plan_hosts(paths)
    results = base_results(plan, source="analyze")
    live = live_results(paths)
    live_runs = {r.key: r for r in live.runs} if live is not None else {}
    if live is not None:
        results.node_health = list(live.node_health)  # read on the nodes while they ran: not in the logs
    runs: dict[str, RunRecord] = {}
    losses: dict[str, dict[int, float]] = {}
    times: dict[str, tuple[float, float]] = {}
    for key, logs in inputs:
        t0 = time.time()
        runs[key], exact = judge_node_logs(
            plan.run(key),
            logs,
            error_patterns=plan.error_patterns,
            hosts=hosts if hosts and len(hosts) == len(logs) else None,
            live=live_runs.get(key),
        )
        if exact is not None:
            losses[key] = exact
        times[key] = (t0, time.time())
    judge_checkpoint_resume(plan, runs, losses)
    for key, rec in runs.items():
        fails = "; ".join(v.message for v in rec.verdicts if v.status == FAIL)
        results.stages.append(
            StageRecord(
                name=f"analyze:{key}",
                state="passed" if rec.status == "PASS" else "failed",
                detail=rec.reason if rec.outcome != "complete" else fails[:300],
                started_at=times[key][0],
                ended_at=times[key][1],
            )
        )
    results.runs = list(runs.values())
    results.hosts = [n.host for n in results.runs[0].nodes] if results.runs else []
    return results


__all__ = [
    "METRICS_FILE_SUFFIX",
    "analyze_node_logs",
    "analyze_paths",
    "digest_log_file",
    "full_losses",
    "judge_node_logs",
    "parse_log_file",
    "parse_node_logs",
    "with_full_precision_losses",
]
