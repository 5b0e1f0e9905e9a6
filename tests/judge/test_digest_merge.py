"""judge_run combines the nodes' window figures a block at a time (judge.digest_merge): the run's record
is the same with the column files read in chunks and blocks of a few steps as with the default sizes, so
every chunk and block boundary is crossed; a long run's window lists every k-th step with its count and
ranges, and every reader of the window answers as with the full list."""

from __future__ import annotations

import dataclasses
import json
import random
import re
from collections.abc import Collection, Sequence
from pathlib import Path

import numpy as np
import pytest
from _analysis_samples import load_local, plan_of, planned
from test_analyze_big import KEY, _exact, _head

from cvs_tui.core.card.facts import card_window
from cvs_tui.core.compare.samples import run_samples
from cvs_tui.core.judge import digest_merge, node, spill
from cvs_tui.core.judge.facts import RunFacts
from cvs_tui.core.judge.figures import WINDOW_COLUMNS
from cvs_tui.core.judge.finalize import base_results
from cvs_tui.core.judge.node import NodeDigest
from cvs_tui.core.judge.records import bounded_window
from cvs_tui.core.judge.series import curve_points, thin, thin_indexes
from cvs_tui.core.judge.spill import ColumnFiles
from cvs_tui.core.plan import PlannedRun
from cvs_tui.core.report.charts import step_time_chart
from cvs_tui.core.report.html import render_html
from cvs_tui.core.report.markdown import render_markdown
from cvs_tui.core.results import RunRecord, WindowRecord, step_ranges
from cvs_tui.core.sources import offline

STEPS = 300


def write_node(
    path: Path, steps: int, *, seed: int, saves: Collection[int] = (), tokens: bool = True
) -> None:
    """A MaxText node log of ``steps`` train steps (~20 ms, seconds logged to the millisecond, so nodes
    often tie) with a checkpoint save after each of ``saves`` (a gap in that node's window); without
    TFLOP/s/device and Tokens/s/device unless ``tokens`` (tokens then come from total_weights)."""
    rnd = random.Random(seed)
    t = 6 * 3600.0
    out = [_head()]
    for s in range(steps):
        sec = 0.02 * rnd.lognormvariate(0, 0.1)
        t += sec
        hh, mm, ss = int(t // 3600), int(t % 3600 // 60), t % 60
        stamp = f"I1130 {hh:02d}:{mm:02d}:{ss:09.6f} 139736357583744"
        loss = 7.5 * (0.999**s) + rnd.uniform(-0.01, 0.01)
        rates = f", TFLOP/s/device: {0.04 / sec:.3f}, Tokens/s/device: {512 / sec:.3f}" if tokens else ""
        out.append(
            f"{stamp} metric_logger.py:265] completed step: {s}, seconds: {sec:.3f}{rates}, total_weights: "
            f"256, loss: {loss:.3f}, lm_loss: {loss:.3f}, perplexity: 1800.000\n"
        )
        if s in saves:
            out.append(f"{stamp} checkpoint_manager.py:1527] [process=0] Saving checkpoint at step {s}\n")
    path.write_text("".join(out))


def _logs(tmp: Path) -> list[Path]:
    """Five nodes: different window gaps, one without tokens, one the twin of node 0 (every step's
    seconds tie), one that logged no step."""
    logs = [tmp / f"node{i}.log" for i in range(5)]
    write_node(logs[0], STEPS, seed=1, saves={50, 120})
    write_node(logs[1], STEPS, seed=2, saves={80})
    write_node(logs[2], STEPS, seed=3, saves={50, 200}, tokens=False)
    write_node(logs[3], STEPS, seed=1, saves={50, 120})
    logs[4].write_text(_head())
    return logs


def _tiny(monkeypatch: pytest.MonkeyPatch, chunk: int, block: int) -> None:
    monkeypatch.setattr(spill, "CHUNK", chunk)
    monkeypatch.setattr(digest_merge, "BLOCK", block)


def _analyze(
    run: PlannedRun, logs: Sequence[Path], monkeypatch: pytest.MonkeyPatch, *, ascending: bool = True
) -> tuple[RunRecord, list[NodeDigest]]:
    """analyze_node_logs, keeping the digests; ``ascending`` False marks every digest's window steps as
    out of order (finalize then loads them whole)."""
    held: list[NodeDigest] = []
    finalize = offline.judge_run

    def spy(r: PlannedRun, digests: Sequence[NodeDigest], facts: RunFacts | None = None) -> RunRecord:
        if not ascending:
            digests = [dataclasses.replace(d, window_ascending=False) for d in digests]
        held.extend(digests)
        return finalize(r, digests, facts)

    monkeypatch.setattr(offline, "judge_run", spy)
    return offline.analyze_node_logs(run, logs, error_patterns=None), held


@pytest.mark.parametrize(("chunk", "block"), [(3, 7), (7, 3), (64, 1 << 16)])
def test_the_merged_window_does_not_depend_on_chunk_and_block_sizes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int, block: int
) -> None:
    logs = _logs(tmp_path)
    run = planned(load_local(tmp_path, steps=STEPS, runs=[KEY]), KEY)
    exact = _exact(run, logs)
    _tiny(monkeypatch, chunk, block)
    merged, held = _analyze(run, logs, monkeypatch)
    assert all(d.window_ascending for d in held) and len(held) == 5
    assert merged == exact
    # the nodes' gaps differ, so the common window has the gaps of all of them; one node has no tokens
    gaps = [{x.step for x in n.window.excluded} for n in exact.nodes[:3] if n.window]
    assert len(gaps) == 3 and gaps[0] != gaps[1] != gaps[2] != gaps[0]
    assert {x.step for x in exact.window.excluded} == set.union(*gaps) and {50, 80} <= gaps[2] | gaps[1]
    assert exact.nodes[2].steps_logged == STEPS and exact.nodes[2].tokens_per_sec_per_device
    assert exact.nodes[1].tokens_per_sec_per_device != exact.nodes[2].tokens_per_sec_per_device
    assert exact.window.status == "ok" and "node(s) [4] logged no step lines" in " ".join(exact.notes)


def test_digests_out_of_order_are_merged_from_ascending_copies_with_the_same_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    logs = _logs(tmp_path)
    run = planned(load_local(tmp_path, steps=STEPS, runs=[KEY]), KEY)
    exact = _exact(run, logs)
    _tiny(monkeypatch, 5, 4)
    whole, held = _analyze(run, logs, monkeypatch, ascending=False)
    assert not any(d.window_ascending for d in held)
    assert whole == exact
    monkeypatch.setattr(node, "SERIES_CAP", 40)
    bounded, _ = _analyze(run, logs, monkeypatch, ascending=False)
    merged, _ = _analyze(run, logs, monkeypatch)
    assert bounded == merged and bounded.window == bounded_window(whole.window, 40)


def write_steps(path: Path, runs: Sequence[range], *, seed: int, tokens: bool = True) -> None:
    """A node log of the train steps of each of ``runs`` in turn (a later run may start below the steps an
    earlier one logged: the log's step numbers go back), as write_node writes them."""
    rnd = random.Random(seed)
    t = 6 * 3600.0
    out = [_head()]
    for s in (s for r in runs for s in r):
        sec = 0.02 * rnd.lognormvariate(0, 0.1)
        t += sec
        hh, mm, ss = int(t // 3600), int(t % 3600 // 60), t % 60
        rates = f", TFLOP/s/device: {0.04 / sec:.3f}, Tokens/s/device: {512 / sec:.3f}" if tokens else ""
        out.append(
            f"I1130 {hh:02d}:{mm:02d}:{ss:09.6f} 139736357583744 metric_logger.py:265] completed step: {s}, "
            f"seconds: {sec:.3f}{rates}, total_weights: 256, loss: 7.000, lm_loss: 7.000, perplexity: 1.0\n"
        )
    path.write_text("".join(out))


def test_a_window_whose_steps_go_back_is_the_common_window_at_every_chunk_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Logs whose step numbers go back (a run appended below the steps logged before it) have window
    steps out of order; the run's window is still every step clean on all of them, ascending, and the
    record is the same read in chunks of a few steps as at the default sizes."""
    logs = [tmp_path / f"node{i}.log" for i in range(3)]
    write_steps(logs[0], [range(50, 151), range(0, STEPS)], seed=1)
    write_steps(logs[1], [range(0, STEPS)], seed=2)
    write_steps(logs[2], [range(120, 200), range(0, 120), range(200, STEPS)], seed=3, tokens=False)
    run = planned(load_local(tmp_path, steps=STEPS, runs=[KEY]), KEY)
    judge = offline.judge_run
    own: list[set[int]] = []

    def spy(r: PlannedRun, digests: Sequence[NodeDigest], facts: RunFacts | None = None) -> RunRecord:
        assert [d.window_ascending for d in digests] == [False, True, False]
        for d in digests:  # each node's own window steps, in the files its digest keeps
            files = ColumnFiles(d.arrays, WINDOW_COLUMNS)
            try:
                own.append(set(files.load("steps").tolist()))
            finally:
                files.close()
        return judge(r, digests, facts)

    monkeypatch.setattr(offline, "judge_run", spy)
    whole = offline.analyze_node_logs(run, logs, error_patterns=None)
    assert whole.window.steps == sorted(set.intersection(*own)) and whole.window.status == "ok"
    assert whole.nodes[2].tokens_per_sec_per_device and whole.nodes[0].tokens_per_sec_per_device
    _tiny(monkeypatch, 5, 4)
    assert offline.analyze_node_logs(run, logs, error_patterns=None) == whole


def _bounded_and_full(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cap: int
) -> tuple[RunRecord, RunRecord]:
    """The run judged with its series bounded at ``cap``, and its record with every series whole."""
    logs = _logs(tmp_path)
    run = planned(load_local(tmp_path, steps=STEPS, runs=[KEY]), KEY)
    exact = _exact(run, logs)
    _tiny(monkeypatch, 3, 7)
    monkeypatch.setattr(node, "SERIES_CAP", cap)
    big, _ = _analyze(run, logs, monkeypatch)
    return big, exact


def test_a_long_window_lists_every_kth_step_with_its_count_and_ranges(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    big, exact = _bounded_and_full(tmp_path, monkeypatch, 40)
    assert big.metrics == exact.metrics and big.verdicts == exact.verdicts
    steps = exact.window.steps
    assert len(steps) > 40 and step_ranges(steps)[1:] and big.window.steps == thin(steps, 40)
    assert big.window.step_count == len(steps) == big.window.clean_steps
    assert big.window.step_ranges == step_ranges(steps)
    ranges = big.window.step_ranges or []
    assert [s for a, b in ranges for s in range(a, b + 1)] == steps
    assert big.window.excluded == exact.window.excluded
    assert big.loss_curve is not None and exact.loss_curve is not None
    assert big.loss_curve.points == curve_points(exact.loss_curve.points, 40)
    note = big.notes[-1]
    assert (
        "bounded at 40 entries per node" in note and f"so does the run's window `steps` ({len(steps)}" in note
    )
    # results.json keeps the fields; a record read back is the same
    again = RunRecord.model_validate_json(big.model_dump_json())
    assert again == big and again.window.spans().__contains__(steps[-1])


def _undated(svg: str | None) -> str:
    """Without the time matplotlib stamps on each drawing."""
    return re.sub(r"<dc:date>[^<]*</dc:date>", "", svg or "")


def test_the_readers_answer_as_with_every_window_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """compare's samples, the card's window, the step-time chart and the reports of the bounded record are
    those of the same record listing every window step."""
    big, exact = _bounded_and_full(tmp_path, monkeypatch, 40)
    full = big.model_copy(update={"window": exact.window})
    assert full.window.step_count is None and big.window.step_count is not None
    assert run_samples(big) == run_samples(full) and len(run_samples(big).samples) > 5
    assert card_window(big) == card_window(full) and card_window(big) is not None
    assert _undated(step_time_chart(big)) == _undated(step_time_chart(full))
    loaded = load_local(tmp_path, steps=STEPS, runs=[KEY])
    results = [base_results(plan_of(loaded), source="analyze") for _ in range(2)]
    results[1].created_at = results[0].created_at
    results[0].runs, results[1].runs = [big], [full]
    assert render_markdown(results[0]) == render_markdown(results[1])
    assert _undated(render_html(results[0])) == _undated(render_html(results[1]))
    assert f"Window: {len(exact.window.steps)} clean step(s)" in render_markdown(results[0])


def test_an_unbounded_window_reads_and_writes_as_before() -> None:
    """No count or ranges in the JSON of a window listing every step; a file without them reads the same."""
    w = WindowRecord(status="ok", steps=[3, 4, 5, 7, 9, 10], min_clean_steps=5, warmup_steps=3)
    dumped = json.loads(w.model_dump_json())
    assert "step_count" not in dumped and "step_ranges" not in dumped
    assert list(dumped) == ["status", "reason", "steps", "excluded", "min_clean_steps", "warmup_steps"]
    old = WindowRecord.model_validate(dumped)
    assert old == w and old.clean_steps == 6 and (old.first_step, old.last_step) == (3, 10)
    assert [s for s in range(12) if s in old.spans()] == [3, 4, 5, 7, 9, 10]
    assert bounded_window(w, 6) is w
    b = bounded_window(w, 3)
    assert b.steps == [3, 7, 10] and b.step_ranges == [(3, 5), (7, 7), (9, 10)] and b.clean_steps == 6
    assert [s for s in range(12) if s in b.spans()] == [3, 4, 5, 7, 9, 10]
    assert (b.first_step, b.last_step) == (3, 10)
    empty = WindowRecord(status="inconclusive", min_clean_steps=5, warmup_steps=3)
    assert empty.first_step is None and empty.clean_steps == 0 and 1 not in empty.spans()


@pytest.mark.parametrize("seed", range(6))
def test_merge_window_is_the_intersection_with_the_slowest_seconds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    """merge_window against numpy over whole arrays: one to four nodes, blocks of 1 to 5 steps, ties, and
    a node without window steps (seed 5)."""
    rnd = np.random.default_rng(seed)
    nodes, whole = [], []
    for j in range(1 + seed % 4):
        steps = np.flatnonzero(rnd.random(200) < (0.0 if seed == 5 and j == 1 else 0.9)).astype(np.int64)
        sec = rnd.integers(1, 4, len(steps)).astype(np.float64)  # few values: many ties
        f = ColumnFiles(tmp_path / f"n{j}", {"steps": "i8", "sec": "f8"})
        f.append("steps", steps)
        f.append("sec", sec)
        nodes.append(f)
        whole.append((steps, sec))
    common = whole[0][0]
    for steps, _ in whole[1:]:
        common = np.intersect1d(common, steps)
    slowest = None
    for steps, sec in whole:
        s = sec[np.searchsorted(steps, common)]
        slowest = s if slowest is None else np.where(s > slowest, s, slowest)
    monkeypatch.setattr(digest_merge, "BLOCK", 1 + seed % 5)
    got = digest_merge.merge_window(nodes, ColumnFiles(tmp_path / "run", digest_merge.RUN_COLUMNS))
    assert got.count == len(common) and got.ranges == step_ranges(common.tolist())
    assert got.files.load("steps").tolist() == common.tolist()
    assert slowest is not None and got.files.load("sec").tolist() == slowest.tolist()
    for n in (0, 1, 2, 5, 39, 40, 41, 1000):
        for cap in (2, 3, 40):  # the rule itself: every k-th index and the last, at most ``cap``
            k = -(-n // max(cap - 1, 1)) if n > cap else 1
            want = [*range(0, n, k), *([n - 1] if n and (n - 1) % k else [])]
            assert thin_indexes(n, cap) == want == thin(list(range(n)), cap) and len(want) <= max(cap, 0)
