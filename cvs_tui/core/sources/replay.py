"""A finished run as an event stream, so the live views can show `analyze` results too.

The events are the ones a live run would have published: stages, each run's start, every node's raw
lines and parsed events, node outcomes, verdicts, the run's end and the suite's end. Front-ends cannot
tell the difference, which is the point: one set of screens for live, attached and finished runs.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from cvs_tui.core.events import (
    LogLinesEvent,
    NodeLogEvent,
    NodeState,
    NodeStatusEvent,
    RunEndEvent,
    RunOutcome,
    RunStartEvent,
    StageEvent,
    StageState,
    SuiteEndEvent,
)
from cvs_tui.core.judge.finalize import stall_events, verdict_events
from cvs_tui.core.plan import Plan
from cvs_tui.core.results import Results
from cvs_tui.core.sources.offline import parse_log_file

_BATCH = 500


def replay_events(
    plan: Plan,
    results: Results,
    inputs: Sequence[tuple[str, Sequence[Path]]],
    *,
    results_path: Path | None = None,
    report_path: Path | None = None,
) -> Iterator[object]:
    """Events for ``results`` (from `analyze` with ``plan``), with the node logs in ``inputs`` (run key,
    logs by rank)."""
    logs = dict(inputs)
    for st in results.stages:
        yield StageEvent(stage=st.name, state=StageState.RUNNING, at=st.started_at or 0.0)
        yield StageEvent(stage=st.name, state=StageState(st.state), detail=st.detail, at=st.ended_at or 0.0)
    for run in results.runs:
        hosts = tuple(n.host for n in run.nodes)
        yield RunStartEvent(run=run.key, total_steps=run.total_steps, nodes=hosts, at=run.started_at or 0.0)
        for rank, path in enumerate(logs.get(run.key, ())):
            yield from _lines(run.key, rank, Path(path))
            events, _ = parse_log_file(Path(path), plan.error_patterns)
            for ev in events:
                yield NodeLogEvent(run=run.key, node=rank, event=ev)
            node = run.nodes[rank] if rank < len(run.nodes) else None
            code = node.exit_code if node else None
            state = NodeState.DONE if code in (0, None) and run.outcome == "complete" else NodeState.FAILED
            yield NodeStatusEvent(
                run=run.key,
                node=rank,
                host=node.host if node else "",
                state=state,
                detail=f"exit {code}" if code is not None else "",
                at=run.ended_at or time.time(),
            )
        yield from verdict_events(run)
        yield from stall_events(run)
        yield RunEndEvent(
            run=run.key,
            outcome=RunOutcome(run.outcome),
            reason=run.reason,
            root_cause_node=run.root_cause_node,
            at=run.ended_at or 0.0,
        )
    yield SuiteEndEvent(
        passed=results.passed,
        results_path=str(results_path) if results_path else None,
        report_path=str(report_path) if report_path else None,
        at=time.time(),
    )


def _lines(run: str, rank: int, path: Path) -> Iterator[LogLinesEvent]:
    batch: list[str] = []
    first = 1
    with path.open("rb") as fh:
        for n, raw in enumerate(fh, start=1):
            batch.append(raw.rstrip(b"\r\n").decode("utf-8", "replace"))
            if len(batch) >= _BATCH:
                yield LogLinesEvent(run=run, node=rank, first_line=first, lines=tuple(batch))
                batch, first = [], n + 1
    if batch:
        yield LogLinesEvent(run=run, node=rank, first_line=first, lines=tuple(batch))
