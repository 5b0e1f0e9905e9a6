"""The step columns read by the C scanner (``_native.step_columns``) are those of its pure-Python twin
(``_pyscan.step_columns``), byte for byte, and a :class:`StepCollector` on either gives the same columns,
other events and kept step events. Checked on every real log under ``tests/fixtures`` (parsed in several
chunkings, so batches start and end anywhere) and on hand-made batches at the edges: no step, no other
event, None and NaN in every optional field, every step kind, sources empty and set, the highest step
repeated, ints where floats go, and a kind the columns do not know (refused by both)."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import numpy as np
import pytest

from cvs_tui.core.events import CheckpointAction, CheckpointEvent, LogEvent, StepEvent, StepKind
from cvs_tui.core.judge.table import KINDS, SPILL_COLUMNS, StepCollector, StepTable
from cvs_tui.core.parse import NodeLogParser, _pyscan

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
LOGS = sorted(FIXTURES.rglob("*.log"))
HAVE_NATIVE = importlib.util.find_spec("cvs_tui.core.parse._native") is not None
needs_native = pytest.mark.skipif(not HAVE_NATIVE, reason="cvs_tui.core.parse._native is not built")


def _batches(log: Path, size: int) -> list[list[LogEvent]]:
    parser = NodeLogParser()
    data = log.read_bytes()
    out = [parser.feed(data[i : i + size]) for i in range(0, len(data), size)]
    return [*out, parser.finish()]


def _collected(batches: list[list[LogEvent]], native: bool) -> StepTable:
    c = StepCollector(native)
    for b in batches:
        c.add(b)
    return c.table()


def _same_collected(a: StepTable, b: StepTable) -> None:
    for f in SPILL_COLUMNS:
        x, y = a.files.load(f), b.files.load(f)
        assert x.dtype == y.dtype and x.tobytes() == y.tobytes(), f
    assert a.others == b.others
    assert a.kept == b.kept
    assert a.ascending == b.ascending


def _ckpt(line: int) -> CheckpointEvent:
    return CheckpointEvent(action=CheckpointAction.SAVE_START, step=1, line=line)


NAN = math.nan
EDGE_BATCHES: list[list[LogEvent]] = [
    [],
    [_ckpt(1), _ckpt(2)],
    [StepEvent(step=3, loss=1.5, line=4)],
    [
        _ckpt(1),
        StepEvent(step=1, loss=NAN, line=2, kind=StepKind.RAMPUP, seconds=NAN, source=""),
        _ckpt(3),
        _ckpt(4),
        StepEvent(step=7, loss=2, line=5, seconds=1, tflops_per_device=NAN, total_weights=0.0, source="a:1"),
        StepEvent(
            step=7, loss=-0.0, line=6, kind=StepKind.PROFILER, tokens_per_device=math.inf, timestamp=1.5
        ),
        _ckpt(7),
        StepEvent(step=2, loss=math.inf, line=8, timestamp=NAN, source="b:2"),
        StepEvent(step=3, loss=None, line=9, seconds=0.5),  # a line cut before its loss
    ],
]


@needs_native
@pytest.mark.parametrize("batch", EDGE_BATCHES, ids=range(len(EDGE_BATCHES)))
def test_edges(batch: list[LogEvent]) -> None:
    from cvs_tui.core.parse import _native

    assert _native.step_columns(batch, KINDS) == _pyscan.step_columns(batch, KINDS)
    _same_collected(_collected([batch, batch], native=True), _collected([batch, batch], native=False))


def test_edges_read_as_stated() -> None:
    """The twin's columns of the mixed batch, by value (what both must say)."""
    cols, others, sourced = _pyscan.step_columns(EDGE_BATCHES[3], KINDS)
    assert others == [0, 2, 3, 6] and sourced == 1
    assert np.frombuffer(cols[0], np.int64).tolist() == [1, 7, 7, 2, 3]
    assert list(cols[3]) == [1, 0, 2, 0, 0]
    assert list(cols[5]) == [1, 1, 0, 0, 1] and list(cols[11]) == [0, 1, 0, 0, 0]
    ts = np.frombuffer(cols[12], np.float64)
    assert math.isnan(ts[0]) and ts[2] == 1.5 and math.isnan(ts[3])
    loss = np.frombuffer(cols[2], np.float64)  # NaN both for a logged NaN and for no loss: has_loss tells
    assert math.isnan(loss[0]) and math.isnan(loss[4]) and list(cols[13]) == [1, 1, 1, 1, 0]
    c = _collected([EDGE_BATCHES[3]], native=False)
    assert [i for i, _ in c.kept] == [1, 1] and c.kept[0][1].source == "a:1"  # sourced and top: one record
    assert [p for p, _ in c.others] == [0, 1, 1, 3]


@needs_native
def test_an_unknown_kind_is_refused_by_both() -> None:
    from cvs_tui.core.parse import _native

    batch: list[LogEvent] = [StepEvent(step=1, loss=1.0, line=1)]
    for scan in (_native.step_columns, _pyscan.step_columns):
        with pytest.raises(KeyError):
            scan(batch, (StepKind.RAMPUP,))


@needs_native
@pytest.mark.parametrize("log", LOGS, ids=[p.name for p in LOGS])
def test_every_fixture(log: Path) -> None:
    from cvs_tui.core.parse import _native

    for size in (1 << 20, 997):
        batches = _batches(log, size)
        for b in batches:
            assert _native.step_columns(b, KINDS) == _pyscan.step_columns(b, KINDS)
        _same_collected(_collected(batches, native=True), _collected(batches, native=False))
