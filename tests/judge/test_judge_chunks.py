"""The judge reads a node's step table a chunk at a time (``spill.CHUNK`` records per read): its digest does
not depend on the chunk size nor on whether the table is in memory or in files. Every edge case of
``judge_cases`` and every MaxText fixture log is judged with chunks of 3 records and tables that go to
files past 2 records, and with chunks of 65,536 and tables in memory: every field of the digests, the
window figures' files, the curve files and the run's metrics are the same. What the judge gives is held
by the goldens (``test_judge_goldens.py``)."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from _analysis_samples import FIXTURES, load_local, planned
from _judge_events import compute_metrics, digests
from judge_cases import CASES

from cvs_tui.core.errors import UserError
from cvs_tui.core.judge import digest_merge, spill
from cvs_tui.core.judge.figures import WINDOW_COLUMNS
from cvs_tui.core.judge.finalize import run_context
from cvs_tui.core.judge.metrics import RunContext
from cvs_tui.core.judge.node import NodeDigest
from cvs_tui.core.judge.spill import ColumnFiles
from cvs_tui.core.sources import offline

# the CPU fixtures, and two TPU v6e logs whose steps the steady-state rule drops (impossible steps and
# disturbed edges, judge.steady), which reads each chunk with its neighbours' records
ASYNC = sorted((FIXTURES.parent / "async_dispatch").glob("*.log"))
LOGS = sorted(FIXTURES.glob("*.log")) + ASYNC
KEY = "BS=2,PRECISION=BF16,SL=128"
SMALL = {"chunk": 3, "keep": 2}
LARGE = {"chunk": 1 << 16}


@pytest.fixture(scope="module")
def ctx(tmp_path_factory: pytest.TempPathFactory) -> RunContext:
    loaded = load_local(tmp_path_factory.mktemp("cfg"), steps=200, runs=[KEY])
    spec = planned(loaded, KEY).judge
    conv = spec.convergence.model_copy(update={"target_value": 4.0})  # reached by every case with steps
    return run_context(spec.model_copy(update={"convergence": conv}), 1)


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
    assert repr(a.events) == repr(b.events)  # NaN from two parses: equal text, not equal objects
    assert a.window == b.window
    assert a.stats == b.stats
    assert repr(a.window_seconds) == repr(b.window_seconds)
    assert repr(a.loss_metrics) == repr(b.loss_metrics)  # NaN shows as nan on both
    assert _curve(a.curve) == _curve(b.curve)
    assert _window_files(a.arrays) == _window_files(b.arrays)
    for f in ("step_records", "window_len", "window_ascending", "thinned", "series_cap", "losses"):
        assert getattr(a, f) == getattr(b, f), f


@pytest.mark.parametrize("name", sorted(CASES))
def test_edge_cases_do_not_depend_on_the_chunk_size(name: str, ctx: RunContext) -> None:
    nodes = CASES[name]
    run_ctx = dataclasses.replace(ctx, num_nodes=len(nodes))
    with digests(nodes, ctx, **SMALL) as small, digests(nodes, ctx, **LARGE) as large:
        for a, b in zip(small, large, strict=True):
            _same(a, b)
    small_m = compute_metrics(nodes, run_ctx, chunk=3, keep=2)
    large_m = compute_metrics(nodes, run_ctx, chunk=1 << 16)
    assert repr(small_m.metrics) == repr(large_m.metrics)
    assert small_m.window_steps == large_m.window_steps and small_m.node_stats == large_m.node_stats


@contextlib.contextmanager
def _sizes(monkeypatch: pytest.MonkeyPatch, chunk: int, keep: int) -> Iterator[None]:
    with monkeypatch.context() as m:
        m.setattr(spill, "CHUNK", chunk)
        m.setattr(digest_merge, "BLOCK", chunk)
        m.setattr("cvs_tui.core.judge.table.KEEP_IN_MEMORY", keep)
        yield


@pytest.mark.parametrize("log", LOGS, ids=[p.name for p in LOGS])
def test_every_fixture_does_not_depend_on_the_chunk_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ctx: RunContext, log: Path
) -> None:
    """``analyze``'s node judge (the clock and the metrics file's losses included) on each fixture."""
    if log in ASYNC:
        ctx = dataclasses.replace(ctx, precision="bf16")  # the TPU logs' runs: bf16, a known v6e peak
    got, spilled = [], []
    to_files = ColumnFiles._to_files

    def counted(self: ColumnFiles) -> None:
        spilled.append(self.folder)
        to_files(self)

    monkeypatch.setattr(ColumnFiles, "_to_files", counted)
    for i, (chunk, keep) in enumerate([(3, 2), (1 << 16, 1 << 14)]):
        with _sizes(monkeypatch, chunk, keep):
            got.append(offline.digest_log_file(0, log, None, ctx, "h", tmp_path / f"n{i}", keep_losses=True))
        if i == 0:  # the step table went to files past 2 records (the clock's files are files at once)
            table = tmp_path / "n0.scratch" / "columns"
            assert (table in spilled) == (got[0].step_records > 2)
            spilled.clear()
    assert not any(p.name == "columns" for p in spilled)  # 65,536 records: the table stayed in memory
    _same(*got)
    if log in ASYNC:  # the steady-state rule dropped steps on both sides of a chunk boundary
        why = " ".join(got[0].window.excluded.values())
        assert "disturbed edge: " in why or "impossible: " in why


def test_scratch_files_that_cannot_be_written_are_one_clear_error(tmp_path: Path, ctx: RunContext) -> None:
    """Where the step records cannot go (here a file stands where the scratch folder's parent should be,
    as a full or read-only TMPDIR would refuse it), analyze says where and what to do, and leaves nothing."""
    blocker = tmp_path / "tmp"
    blocker.write_text("not a folder")
    log = tmp_path / "node0.log"  # a copy without the fixture's metrics file
    log.write_bytes((FIXTURES / "single_20steps.log").read_bytes())
    with pytest.raises(UserError, match=r"tmp/node0\.scratch/.*cannot make the column files.*TMPDIR"):
        offline.digest_log_file(0, log, None, ctx, "h", blocker / "node0")
    with pytest.raises(UserError, match=r"tmp/node0\.scratch/.*cannot make the column files.*TMPDIR"):
        offline.digest_log_file(0, FIXTURES / "single_20steps.log", None, ctx, "h", blocker / "node0")
    assert blocker.read_text() == "not a folder"
