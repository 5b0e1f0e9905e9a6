"""The digest of a node from its step columns in files, read a chunk at a time (``judge.column_stream``),
against the digest from the same columns held in memory (``digest_collected``, itself held to the event
judge by test_judge_columns and test_analyze_big): every field, the window figures' files and the curve
file, on every MaxText fixture and on step records made to hit the rules' edge cases, with chunks of one,
a few and many records so that every rule crosses chunk boundaries."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest
from _analysis_samples import FIXTURES, load_local, planned

from cvs_tui.core import offline
from cvs_tui.core.errors import UserError
from cvs_tui.core.events import (
    CheckpointAction,
    CheckpointEvent,
    EvalDialect,
    EvalEvent,
    LogEvent,
    StepEvent,
    StepKind,
)
from cvs_tui.core.judge import spill
from cvs_tui.core.judge.clock import ClockBuilder, file_line_clock
from cvs_tui.core.judge.column_figures import WINDOW_COLUMNS
from cvs_tui.core.judge.columns import StepCollector
from cvs_tui.core.judge.digest import digest_collected
from cvs_tui.core.judge.finalize import run_context
from cvs_tui.core.judge.metrics import RunContext
from cvs_tui.core.judge.node import NodeDigest, judge_node
from cvs_tui.core.judge.spill import ColumnFiles

LOGS = sorted(FIXTURES.glob("*.log"))
KEY = "BS=2,PRECISION=BF16,SL=128"


@pytest.fixture(scope="module")
def ctx(tmp_path_factory: pytest.TempPathFactory) -> RunContext:
    loaded = load_local(tmp_path_factory.mktemp("cfg"), steps=200, runs=[KEY])
    return run_context(planned(loaded, KEY).judge, 1)


def _window_files(folder: Path) -> dict[str, bytes]:
    """Each column's bytes (NaN compares equal to itself)."""
    files = ColumnFiles(folder, WINDOW_COLUMNS)
    try:
        return {k: files.load(k).tobytes() for k in WINDOW_COLUMNS}
    finally:
        files.close()


def _curve(path: Path) -> tuple[list[int], list[float], int]:
    with np.load(path) as z:
        return z["steps"].tolist(), z["loss"].tolist(), int(z["count"])


def _same(a: NodeDigest, b: NodeDigest) -> None:
    assert a.record.model_dump() == b.record.model_dump()
    assert [e.model_dump() for e in a.errors] == [e.model_dump() for e in b.errors]
    assert a.events == b.events
    assert a.window == b.window
    assert a.stats == b.stats
    assert repr(a.window_seconds) == repr(b.window_seconds)
    assert repr(a.loss_metrics) == repr(b.loss_metrics)  # NaN shows as nan on both
    assert _curve(a.curve) == _curve(b.curve)
    assert _window_files(a.arrays) == _window_files(b.arrays)
    for f in ("step_records", "window_len", "window_ascending", "thinned", "series_cap", "losses"):
        assert getattr(a, f) == getattr(b, f), f


def _both(
    tmp: Path,
    events: list[LogEvent],
    ctx: RunContext,
    *,
    cap: int,
    log: Path | None = None,
    keep_losses: bool = False,
) -> tuple[NodeDigest, NodeDigest]:
    """(the digest over columns in memory, the digest over the same columns in files)."""
    mem = StepCollector()
    on_disk = StepCollector(spill=tmp / "s.columns")
    for a in range(0, len(events), 5):  # the parser's chunks: any cut
        mem.add(events[a : a + 5])
        on_disk.add(events[a : a + 5])
    kw = {"ctx": ctx, "log_path": log, "host": "h", "series_cap": cap, "keep_losses": keep_losses}
    clock = file_line_clock(log) if log is not None else None
    spilled_clock = None
    if log is not None:
        builder = ClockBuilder(spill=tmp / "s.clock")
        data = log.read_bytes()
        for a in range(0, len(data), 4096):
            builder.feed(data[a : a + 4096])
        spilled_clock = builder.spilled()
    a = digest_collected(0, mem.finish(), 100, arrays=tmp / "m", clock=clock, **kw)  # type: ignore[arg-type]
    spilled = on_disk.table()
    b = judge_node(0, spilled, 100, arrays=tmp / "s", clock=spilled_clock, **kw)  # type: ignore[arg-type]
    spilled.files.close()
    return a, b


@pytest.mark.parametrize("chunk", [1, 3, 64])
@pytest.mark.parametrize("log", LOGS, ids=[p.name for p in LOGS])
def test_every_fixture_digests_the_same_from_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ctx: RunContext, log: Path, chunk: int
) -> None:
    monkeypatch.setattr(spill, "CHUNK", chunk)
    events, _ = offline.parse_log_file(log, None)
    for cap in (7, 2000):
        folder = tmp_path / f"cap{cap}"
        folder.mkdir()
        a, b = _both(folder, events, ctx, cap=cap, log=log, keep_losses=True)
        if any(isinstance(e, StepEvent) for e in events):
            assert b.window_ascending  # every fixture's step numbers rise: the chunked path ran
        _same(a, b)


def _step(s: int, line: int, sec: float | None, kind: StepKind = StepKind.TRAIN, **kw: object) -> StepEvent:
    loss = kw.pop("loss", 5.0 - s / 100)
    return StepEvent(step=s, loss=loss, line=line, kind=kind, seconds=sec, **kw)  # type: ignore[arg-type]


def _edge_events() -> list[LogEvent]:
    """Rising step numbers with every rule's edge: rampup and profiler records, steps without seconds or
    with zero or NaN seconds, seconds stalls (one alone, two within LINE_LAG), a log gap on the
    timestamps, checkpoint saves with and without a step, evals, NaN and inf losses, records without
    tokens or TFLOP/s, and a tie at the median."""
    out: list[LogEvent] = []
    t, line = 1_000.0, 1
    for s in range(300):
        sec: float | None = 0.02 + (s % 7) * 0.001
        if s == 10:
            sec = None
        elif s == 12:
            sec = 0.0
        elif s == 14:
            sec = math.nan
        elif s in (60, 150, 152):
            sec = 9.0
        # step 150's stall leaves no mark on the clock: its wall interval comes from its neighbours
        t += sec if sec is not None and math.isfinite(sec) and s != 150 else 0.02
        if s == 200:
            t += 30.0  # a log gap: the clock jumps, the step's seconds do not
        kind = StepKind.RAMPUP if s == 5 else StepKind.PROFILER if s in (90, 94) else StepKind.TRAIN
        kw: dict[str, object] = {"timestamp": t}
        if s % 11:
            kw["tokens_per_device"] = 512.0
            kw["tflops_per_device"] = 0.04
        if s % 13 == 0:
            kw["total_weights"] = 256.0
        if s == 120:
            kw["loss"] = math.nan
        if s == 121:
            kw["loss"] = math.inf
        out.append(_step(s, line, sec, kind, **kw))
        if s == 40:
            out.append(CheckpointEvent(action=CheckpointAction.SAVE_START, step=None, line=line))
        if s == 80:
            out.append(CheckpointEvent(action=CheckpointAction.SAVE_START, step=80, line=line))
        if s == 100:
            out.append(EvalEvent(step=100, loss=4.2, dialect=EvalDialect.CURRENT, line=line, timestamp=t))
        line += 2
    return out


@pytest.mark.parametrize("chunk", [1, 2, 7, 1 << 16])
@pytest.mark.parametrize("cap", [5, 40, 2000])
def test_edge_cases_digest_the_same_from_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ctx: RunContext, chunk: int, cap: int
) -> None:
    monkeypatch.setattr(spill, "CHUNK", chunk)
    a, b = _both(tmp_path, _edge_events(), ctx, cap=cap, keep_losses=True)
    assert b.window_ascending and a.window.stalls is not None
    assert {s.step for s in a.window.stalls.stalls} >= {60, 200}  # a seconds stall and the log gap
    assert a.window.excluded and a.stats.step_time_p50_ms is not None
    _same(a, b)


@pytest.mark.parametrize("target", [4.0, 0.1])
def test_convergence_and_no_train_steps_digest_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ctx: RunContext, target: float
) -> None:
    """A target reached (steps and time to it) and one never reached; then a log with rampup records only."""
    monkeypatch.setattr(spill, "CHUNK", 3)
    c2 = dataclasses.replace(ctx, convergence=ctx.convergence.model_copy(update={"target_value": target}))
    events = [e for e in _edge_events() if not isinstance(e, EvalEvent)]
    (tmp_path / "a").mkdir()
    a, b = _both(tmp_path / "a", events, c2, cap=2000)
    assert "training.steps_to_target" in a.loss_metrics
    _same(a, b)
    rampup = [_step(s, s + 1, 0.02, StepKind.RAMPUP) for s in range(8)]
    (tmp_path / "b").mkdir()
    a, b = _both(tmp_path / "b", rampup, c2, cap=2000)
    assert a.stats.steps_logged == 0
    _same(a, b)


def test_step_numbers_that_go_back_are_judged_in_memory(tmp_path: Path, ctx: RunContext) -> None:
    """A restarted log (step numbers repeat) is not ascending: its columns are read back whole and judged
    as in memory, with the same digest."""
    events: list[LogEvent] = [_step(s, s + 1, 0.02) for s in range(40)]
    events += [_step(s, s + 41, 0.03) for s in range(30, 60)]
    a, b = _both(tmp_path, events, ctx, cap=2000)
    assert not b.window_ascending or b.window_len == a.window_len
    _same(a, b)


def test_a_log_that_restarts_digests_the_same_with_its_clock(tmp_path: Path, ctx: RunContext) -> None:
    """A log holding a run twice over (steps 0..19, then 0..19 again, as after a restart from scratch),
    with its line clock in files: judged in memory, the same digest."""
    text = (FIXTURES / "single_20steps.log").read_bytes()
    log = tmp_path / "restarted.log"
    log.write_bytes(text + text)
    events, _ = offline.parse_log_file(log, None)
    (tmp_path / "d").mkdir()
    a, b = _both(tmp_path / "d", events, ctx, cap=7, log=log)
    assert a.step_records == 40
    _same(a, b)


def test_scratch_files_that_cannot_be_written_are_one_clear_error(tmp_path: Path, ctx: RunContext) -> None:
    """Where the step records cannot go (here a file stands where the scratch folder's parent should be,
    as a full or read-only TMPDIR would refuse it), analyze says where and what to do, and leaves nothing."""
    blocker = tmp_path / "tmp"
    blocker.write_text("not a folder")
    log = tmp_path / "node0.log"  # a copy without the fixture's metrics file: its columns go to files
    log.write_bytes((FIXTURES / "single_20steps.log").read_bytes())
    with pytest.raises(UserError, match=r"tmp/node0\.scratch/.*cannot make the column files.*TMPDIR"):
        offline.digest_log_file(0, log, None, ctx, "h", blocker / "node0")
    with pytest.raises(UserError, match=r"tmp/node0\.scratch/.*cannot make the column files.*TMPDIR"):
        offline.digest_log_file(0, FIXTURES / "single_20steps.log", None, ctx, "h", blocker / "node0")
    assert blocker.read_text() == "not a folder"
