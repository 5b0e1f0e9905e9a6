"""`cvs-tui analyze` on the real stalled MaxText CPU runs (tests/fixtures/maxtext/regen_stalls.sh): the
stall leaves the steady-state window with its reason, the rates match the unpaused run within its own
noise, and the stall metrics and their causes reach the run record.

* ``stall_sigstop.log``: 200 steps, stopped with SIGSTOP for about 4 s after step 100's line;
  ``stall_baseline.log``: the same run at the same time, never paused.
* ``stall_async_ckpt.log``: 60 steps with async checkpointing, a save every 10 steps.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from _analysis_samples import FIXTURES, load_local

from cvs_tui.cli.main import main
from cvs_tui.core.results import RunRecord, load_results
from cvs_tui.core.sources.offline import analyze_paths

KEY = "BS=2,PRECISION=BF16,SL=128"


def _run(tmp: Path, log: str, steps: int) -> RunRecord:
    tmp.mkdir()
    loaded = load_local(tmp, steps=steps)
    return analyze_paths(loaded, [FIXTURES / log], KEY).runs[0]


def _value(run: RunRecord, name: str) -> float | None:
    return next(m.value for m in run.metrics if m.name == f"training.{name}")


def _block_rates(run: RunRecord, blocks: int = 4) -> list[float]:
    """Tokens/s of the window in consecutive blocks: the run's own noise."""
    rows = {p.step: p for p in run.nodes[0].steps}
    size = len(run.window.steps) // blocks
    out = []
    for k in range(blocks):
        part = [rows[s] for s in run.window.steps[k * size : (k + 1) * size]]
        t = sum(p.seconds or 0.0 for p in part)
        out.append(sum((p.tokens_per_sec or 0.0) * (p.seconds or 0.0) for p in part) / t)
    return out


def test_paused_run_matches_the_unpaused_one_and_names_its_stall(tmp_path: Path) -> None:
    base = _run(tmp_path / "b", "stall_baseline.log", 200)
    paused = _run(tmp_path / "p", "stall_sigstop.log", 200)
    pause = json.loads((FIXTURES / "stall_sigstop.json").read_text())
    # the unpaused run: no stall, goodput 100 %
    assert _value(base, "stall_count") == 0 and _value(base, "stall_seconds") == 0
    assert _value(base, "goodput_pct") == 100.0
    # the paused run: one stall of about the pause, out of the window with its reason
    assert _value(paused, "stall_count") == 1
    lost = _value(paused, "stall_seconds")
    assert lost is not None and abs(lost - pause["pause_seconds"]) < 0.5
    assert _value(paused, "longest_stall_seconds") == lost
    (stall,) = paused.nodes[0].stalls
    assert stall.step > pause["pause_after_step_line"] and stall.cause == "unexplained"
    excluded = {e.step: e.reason for e in paused.window.excluded}
    assert stall.step not in paused.window.steps
    assert excluded[stall.step].startswith("stall: ") and "unexplained" in excluded[stall.step]
    goodput = _value(paused, "goodput_pct")
    assert goodput is not None and 90.0 < goodput < 99.0
    # steady-state throughput and step time within the unpaused run's own noise
    rates = _block_rates(base)
    noise = max(rates) - min(rates)
    tok_b, tok_p = _value(base, "tokens_per_sec_per_gpu"), _value(paused, "tokens_per_sec_per_gpu")
    assert tok_b is not None and tok_p is not None
    assert abs(tok_p - tok_b) <= noise, (tok_p, tok_b, rates)
    st_b, st_p = _value(base, "step_time_seconds"), _value(paused, "step_time_seconds")
    assert st_b is not None and st_p is not None
    assert abs(st_p - st_b) / st_b <= noise / statistics.median(rates)
    # with the stall left in the window (as before stalls were found) the rate drops by about the stall's
    # share of the time, and lands several times further from the unpaused run (the two ran side by side)
    rows = {p.step: p for p in paused.nodes[0].steps}
    with_stall = sorted([*paused.window.steps, stall.step])
    t = sum(rows[s].seconds or 0.0 for s in with_stall)
    naive = sum((rows[s].tokens_per_sec or 0.0) * (rows[s].seconds or 0.0) for s in with_stall) / t
    assert naive < tok_p * (1.0 - 0.5 * lost / t)
    assert abs(naive - tok_b) > 3 * abs(tok_p - tok_b)


def test_async_checkpoint_stalls_are_attributed_to_their_saves(tmp_path: Path, capsys) -> None:
    cfg_dir = tmp_path / "c"
    run = _run(cfg_dir, "stall_async_ckpt.log", 60)
    stalls = {s.step: s for s in run.nodes[0].stalls}
    assert set(stalls) == {21, 31}
    assert stalls[21].cause.startswith("during the async save of step 20")
    assert stalls[31].cause.startswith("during the async save of step 30")
    assert _value(run, "stall_count") == 2
    goodput = _value(run, "goodput_pct")
    assert goodput is not None and goodput < 95.0
    # the steady-state window already left the save steps out; the stalls do not shrink it further
    assert not {21, 31} & set(run.window.steps)
    # end to end through the CLI: the stall metrics land in results.json and summary.md
    out = tmp_path / "o"
    (tmp_path / "cli").mkdir()
    cfg = load_local(tmp_path / "cli", steps=60).path
    code = main(
        [
            "analyze",
            str(cfg),
            "--logs",
            str(FIXTURES / "stall_async_ckpt.log"),
            "--run",
            KEY,
            "--out",
            str(out),
        ]
    )
    capsys.readouterr()
    assert code in (0, 1)
    res = load_results(out / "results.json")
    names = {m.name for m in res.runs[0].metrics}
    assert {"training.stall_count", "training.goodput_pct"} <= names
    summary = (out / "summary.md").read_text()
    assert "during the async save of step 20" in summary


def test_stall_metrics_are_gated_from_the_threshold_file(tmp_path: Path) -> None:
    thr = {
        KEY: {
            "training.goodput_pct": {"kind": "min", "value": 99.0},
            "training.stall_count": {"kind": "max", "value": 0},
            "training.longest_stall_seconds": {"kind": "max", "value": 10.0},
        }
    }
    loaded = load_local(tmp_path, steps=200, runs=[KEY], thresholds=thr)
    run = analyze_paths(loaded, [FIXTURES / "stall_sigstop.log"], KEY).runs[0]
    status = {v.metric: v.status for v in run.verdicts}
    assert status["training.goodput_pct"] == "FAIL" and status["training.stall_count"] == "FAIL"
    assert status["training.longest_stall_seconds"] == "PASS"
    assert run.status == "FAIL"
