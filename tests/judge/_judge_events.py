"""The judge over events held in memory, for the rule tests: each node's events go into a step table
(``StepCollector``), each table through the node judge (``judge_node``), the digests through the run's
metrics (``run_metrics``): the one judge every source uses, fed from a list."""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from cvs_tui.core.events import LogEvent
from cvs_tui.core.judge import spill
from cvs_tui.core.judge.clock import LineClock
from cvs_tui.core.judge.figures import WINDOW_COLUMNS
from cvs_tui.core.judge.metrics import MetricsOutcome, RunContext
from cvs_tui.core.judge.node import NodeDigest, judge_node
from cvs_tui.core.judge.run import run_metrics
from cvs_tui.core.judge.spill import ColumnFiles
from cvs_tui.core.judge.stalls import StallReport
from cvs_tui.core.judge.table import StepCollector
from cvs_tui.core.judge.window import NodeWindow


@contextlib.contextmanager
def digests(
    node_events: Sequence[Sequence[LogEvent]],
    ctx: RunContext,
    clocks: Sequence[LineClock | None] = (),
    *,
    chunk: int | None = None,
    keep: int | None = None,
) -> Iterator[list[NodeDigest]]:
    """Each node's digest (index = rank); ``clocks``: each node log's line clock; ``chunk``: records per
    read of the chunked passes; ``keep``: records a table holds in memory before it goes to files. The
    digests' files live until the block ends."""
    old = spill.CHUNK
    if chunk is not None:
        spill.CHUNK = chunk
    try:
        with tempfile.TemporaryDirectory(prefix="cvs-judge-test-") as tmp:
            out = []
            for i, evs in enumerate(node_events):
                kw: dict[str, Any] = {} if keep is None else {"keep": keep}
                c = StepCollector(spill=Path(tmp) / f"steps{i}", **kw)
                c.add(list(evs))
                out.append(
                    judge_node(
                        i,
                        c.table(),
                        0,
                        ctx=ctx,
                        log_path=None,
                        host=f"node{i}",
                        arrays=Path(tmp) / f"node{i}",
                        clock=clocks[i] if i < len(clocks) else None,
                    )
                )
                c.discard()
            yield out
    finally:
        spill.CHUNK = old


def compute_metrics(
    node_events: Sequence[Sequence[LogEvent]],
    ctx: RunContext,
    clocks: Sequence[LineClock | None] = (),
    **kw: Any,
) -> MetricsOutcome:
    """Every metric of one run from each node's events (index = rank); see :func:`digests`."""
    with digests(node_events, ctx, clocks, **kw) as ds:
        return run_metrics(ctx, ds)


def window_steps(d: NodeDigest) -> list[int]:
    """A node's own window steps (its digest keeps them in files)."""
    files = ColumnFiles(d.arrays, WINDOW_COLUMNS)
    try:
        steps: list[int] = files.load("steps").tolist()
    finally:
        files.close()
    return steps


def node_window(events: Sequence[LogEvent], clock: LineClock | None = None) -> NodeWindow:
    """One node's window as the judge makes it."""
    with digests([events], RunContext(num_nodes=1, gpus_per_node=1), [clock]) as (d,):
        return NodeWindow(steps=window_steps(d), excluded=d.window.excluded, stalls=d.window.stalls)


def find_stalls(events: Sequence[LogEvent], clock: LineClock | None = None) -> StallReport:
    """One node's stall report as the judge makes it."""
    report = node_window(events, clock).stalls
    assert report is not None, "no timed train step"
    return report


__all__ = ["compute_metrics", "digests", "find_stalls", "node_window", "window_steps"]
