"""Event streams for the TUI tests: recorded MaxText logs fed through the real parser, at a set pace."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable
from pathlib import Path

from cvs_tui.core.events import (
    LogLinesEvent,
    NodeLogEvent,
    NodeState,
    NodeStatusEvent,
    RunEndEvent,
    RunEvent,
    RunOutcome,
    RunStartEvent,
    StageEvent,
    StageState,
    SuiteEndEvent,
    VerdictEvent,
)
from cvs_tui.core.parse import NodeLogParser

FIXTURES = Path(__file__).parents[1] / "fixtures" / "maxtext"
T0 = 1_790_000_000.0  # fixed event times keep the header's elapsed time stable in snapshots
CLOCK = T0 + 754.0  # "now" for the app under test


def node_chunks(run: str, node: int, log: Path, lines_per_chunk: int = 6) -> list[list[RunEvent]]:
    """A node log as the runner would stream it: raw line batches, each followed by what it parsed to."""
    parser = NodeLogParser()
    raw = log.read_bytes().split(b"\n")
    if raw and raw[-1] == b"":
        raw.pop()
    chunks: list[list[RunEvent]] = []
    for start in range(0, len(raw), lines_per_chunk):
        part = raw[start : start + lines_per_chunk]
        text = tuple(b.decode("utf-8", errors="replace") for b in part)
        evs: list[RunEvent] = [LogLinesEvent(run, node, start + 1, text)]
        evs += [NodeLogEvent(run, node, e) for e in parser.feed(b"\n".join(part) + b"\n")]
        chunks.append(evs)
    if chunks:
        chunks[-1] += [NodeLogEvent(run, node, e) for e in parser.finish()]
    return chunks


def interleave(per_node: Iterable[list[list[RunEvent]]]) -> list[RunEvent]:
    lists = list(per_node)
    out: list[RunEvent] = []
    for i in range(max((len(x) for x in lists), default=0)):
        for chunks in lists:
            if i < len(chunks):
                out += chunks[i]
    return out


def run_events(
    key: str, logs: list[Path], total_steps: int, *, at: float, fraction: float = 1.0
) -> tuple[list[RunEvent], bool]:
    """A run over ``logs`` (one per node). Returns the events and whether the whole run is included."""
    hosts = tuple(f"gpu-node-{i:02d}" for i in range(len(logs)))
    evs: list[RunEvent] = [
        StageEvent(f"run:{key}", StageState.RUNNING, at=at),
        RunStartEvent(key, total_steps, hosts, at=at),
    ]
    evs += [NodeStatusEvent(key, i, h, NodeState.TRAINING, at=at) for i, h in enumerate(hosts)]
    body = interleave(node_chunks(key, i, p) for i, p in enumerate(logs))
    cut = int(len(body) * fraction)
    evs += body[:cut]
    return evs, cut >= len(body)


def suite_events(fraction: float = 1.0) -> list[RunEvent]:
    """A two-run suite: a clean two-process run, then a run whose second node diverges to NaN.

    ``fraction`` < 1 stops part way through the first run (a dashboard mid-run).
    """
    evs: list[RunEvent] = [
        StageEvent("preflight", StageState.PASSED, at=T0),
        StageEvent("launch", StageState.PASSED, at=T0 + 4),
        StageEvent("tokenizer", StageState.SKIPPED, "synthetic data", at=T0 + 4),
    ]
    first, whole = run_events(
        "BS2_SL64",
        [FIXTURES / "twoproc_node0.log", FIXTURES / "twoproc_node1.log"],
        20,
        at=T0 + 5,
        fraction=fraction,
    )
    evs += first
    if not whole:
        return evs
    evs += [
        NodeStatusEvent("BS2_SL64", 0, "gpu-node-00", NodeState.DONE, at=T0 + 300),
        NodeStatusEvent("BS2_SL64", 1, "gpu-node-01", NodeState.DONE, at=T0 + 300),
        RunEndEvent("BS2_SL64", RunOutcome.COMPLETE, at=T0 + 300),
        StageEvent("run:BS2_SL64", StageState.PASSED, at=T0 + 300),
        VerdictEvent("BS2_SL64", "training.final_loss", "PASS", "<= 11.0", 10.52, "", ""),
        VerdictEvent("BS2_SL64", "training.step_time_p50", "RECORD", "record", 0.81, "s"),
        VerdictEvent("BS2_SL64", "training.tokens_per_sec_per_device", "PASS", ">= 10", 256.0, "tok/s"),
    ]
    second, _ = run_events(
        "LR_1E6", [FIXTURES / "single_20steps.log", FIXTURES / "nan_lr1e6.log"], 20, at=T0 + 301
    )
    evs += second
    evs += [
        NodeStatusEvent("LR_1E6", 1, "gpu-node-01", NodeState.FAILED, "loss is NaN", at=T0 + 600),
        NodeStatusEvent(
            "LR_1E6", 0, "gpu-node-00", NodeState.STOPPED, "stopped after node 1 failed", at=T0 + 600
        ),
        RunEndEvent("LR_1E6", RunOutcome.FAILED, "non-finite loss on node 1", root_cause_node=1, at=T0 + 600),
        StageEvent("run:LR_1E6", StageState.FAILED, "non-finite loss", at=T0 + 600),
        VerdictEvent("LR_1E6", "training.final_loss", "FAIL", "<= 11.0", float("nan"), "", "loss is NaN"),
        VerdictEvent("LR_1E6", "training.nan_steps", "FAIL", "== 0", 3.0, "steps"),
        StageEvent("report", StageState.PASSED, at=T0 + 601),
        SuiteEndEvent(False, "/runs/demo/results.json", "/runs/demo/report.html", at=T0 + 602),
    ]
    return evs


async def paced(events: list[RunEvent], *, every: int = 8, delay: float = 0.0) -> AsyncIterator[RunEvent]:
    """Yield the events, handing the loop back every ``every`` events (a live run's arrival pattern)."""
    for i, ev in enumerate(events):
        yield ev
        if i % every == every - 1:
            await asyncio.sleep(delay)
