"""`cvs-tui analyze` end to end on real MaxText CPU logs (tests/fixtures/maxtext): metrics recomputed by
hand from the log text, failures with their reasons, run folders, checkpoint resume, bad input."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from _analysis_samples import FIXTURES, LOCAL_2PROC, load_local, write_config

from cvs_tui.cli.main import main
from cvs_tui.core.config.loader import load_config
from cvs_tui.core.errors import UserError
from cvs_tui.core.judge.window import MIN_CLEAN_STEPS
from cvs_tui.core.results import load_results
from cvs_tui.core.sources.offline import analyze_paths

STEP = re.compile(
    r"completed step: (\d+), seconds: ([\d.]+), TFLOP/s/device: ([\d.]+), "
    r"Tokens/s/device: ([\d.]+), total_weights: \d+, loss: ([\w.]+)"
)


def by_hand(log: Path, window: list[int]) -> dict[str, float]:
    """The window figures straight from the log text, independent of the parser."""
    rows = {int(m[1]): (float(m[2]), float(m[3]), float(m[4])) for m in STEP.finditer(log.read_text())}
    t = sum(rows[s][0] for s in window)
    return {
        "seconds": t / len(window),
        "tflops": sum(rows[s][0] * rows[s][1] for s in window) / t,
        "tokens": sum(rows[s][0] * rows[s][2] for s in window) / t,
    }


def metric(results, key: str, name: str):
    run = next(r for r in results.runs if r.key == key)
    return next(m for m in run.metrics if m.name == f"training.{name}")


def verdict(run, name: str):
    return next(v for v in run.verdicts if v.metric == name)


def test_single_run_passes_with_window_metrics(tmp_path: Path, capsys) -> None:
    cfg = write_config(tmp_path, steps=20, runs=["BS=2,PRECISION=BF16,SL=128"])
    out = tmp_path / "out"
    code = main(["analyze", str(cfg), "--logs", str(FIXTURES / "single_20steps.log"), "--out", str(out)])
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert "PASS  overall" in printed
    for name in ("results.json", "report.html", "junit.xml", "summary.md"):
        assert (out / name).is_file()
    res = load_results(out / "results.json")
    run = res.runs[0]
    assert run.outcome == "complete" and run.status == "PASS"
    assert run.window.status == "ok" and run.window.steps == list(range(3, 20))
    assert [x.step for x in run.window.excluded] == [0, 1, 2]
    hand = by_hand(FIXTURES / "single_20steps.log", run.window.steps)
    assert metric(res, run.key, "step_time_seconds").value == pytest.approx(hand["seconds"])
    assert metric(res, run.key, "tokens_per_sec_per_gpu").value == pytest.approx(hand["tokens"])
    assert metric(res, run.key, "tflops_per_sec_per_gpu").value == pytest.approx(hand["tflops"])
    assert metric(res, run.key, "tokens_per_sec_total").value == pytest.approx(hand["tokens"])  # one device
    # the metrics file next to the log gives the full-precision loss (the log prints 7.188)
    assert metric(res, run.key, "final_loss").value == pytest.approx(7.18791389465332, abs=1e-9)
    assert metric(res, run.key, "loss_decreased").value == 1
    assert verdict(run, "training.loss_curve_slope").status == "PASS"
    assert verdict(run, "training.final_loss").status == "RECORD"  # kind info in the shipped file
    assert verdict(run, "training.mfu_pct").status == "N/A"  # cpu: no peak
    env = run.environment
    assert env.backend == "cpu" and env.jax and env.num_devices == 1
    assert env.step_logger_source and env.step_logger_source.startswith("metric_logger.py:")
    assert env.tflops_per_step is not None and env.parameters_billions is not None
    assert len(run.nodes[0].steps) == 20 and run.nodes[0].lines == 52


def test_gated_thresholds_pass_and_fail(tmp_path: Path) -> None:
    key = "BS=2,PRECISION=BF16,SL=128"
    thr = {
        key: {
            "training.tokens_per_sec_per_gpu": {"kind": "min", "value": 1e9},
            "training.final_loss": {"kind": "max", "value": 15.0},
            "training.eval_loss": {"kind": "max", "value": 10.0},
        }
    }
    loaded = load_local(tmp_path, steps=20, runs=[key], thresholds=thr)
    res = analyze_paths(loaded, [FIXTURES / "single_20steps.log"])
    run = res.runs[0]
    assert verdict(run, "training.final_loss").status == "PASS"
    tok = verdict(run, "training.tokens_per_sec_per_gpu")
    assert tok.status == "FAIL" and "< min" in tok.message
    ev = verdict(run, "training.eval_loss")  # eval not configured: gated, so it cannot pass (audit 2 #9)
    assert ev.status == "FAIL" and "gated but not produced" in ev.message
    assert run.status == "FAIL" and not res.passed


def test_too_short_a_run_is_inconclusive_and_gated_perf_fails(tmp_path: Path) -> None:
    key = "BS=2,PRECISION=BF16,SL=128"
    thr = {key: {"training.tflops_per_sec_per_gpu": {"kind": "min", "value": 0.0}}}
    loaded = load_local(tmp_path, steps=6, runs=[key], thresholds=thr)
    res = analyze_paths(loaded, [FIXTURES / "ckpt_phase1.log"])
    run = res.runs[0]
    assert run.window.status == "inconclusive"
    assert f"fewer than the minimum {MIN_CLEAN_STEPS}" in run.window.reason
    v = verdict(run, "training.tflops_per_sec_per_gpu")
    assert v.status == "FAIL" and "inconclusive" in v.message and v.actual is None
    reasons = {x.step: x.reason for x in run.window.excluded}
    assert "checkpoint save" in reasons[5] or "checkpoint save" in reasons[4]


def test_nan_run_fails_with_reason_and_keeps_metrics(tmp_path: Path, capsys) -> None:
    cfg = write_config(tmp_path, steps=20, runs=["BS=2,PRECISION=BF16,SL=128"])
    code = main(
        ["analyze", str(cfg), "--logs", str(FIXTURES / "nan_lr1e6.log"), "--out", str(tmp_path / "o")]
    )
    assert code == 1
    res = load_results(tmp_path / "o" / "results.json")
    run = res.runs[0]
    assert run.outcome == "failed" and run.root_cause_node == 0
    assert "nan" in run.reason.lower() and "line" in run.reason
    fl = metric(res, run.key, "final_loss")
    assert fl.value is None and fl.absent == "non_finite" and fl.text == "nan"
    assert any(e.severity == "fatal" and e.context for e in run.errors)
    hit = next(e for e in run.errors if e.severity == "fatal")
    assert hit.context_first_line is not None and hit.context_first_line <= hit.line
    assert metric(res, run.key, "loss_decreased").value == 0
    where = [(e.node, e.line) for e in run.errors]
    assert len(where) == len(set(where))  # the abort line is one record, not two
    assert "FAIL" in (tmp_path / "o" / "summary.md").read_text()


def test_bad_key_crash_fails_with_the_config_error(tmp_path: Path) -> None:
    loaded = load_local(tmp_path, steps=5, runs=["BS=2,PRECISION=BF16,SL=128"])
    run = analyze_paths(loaded, [FIXTURES / "bad_key.log"]).runs[0]
    assert run.status == "FAIL" and run.outcome == "failed"
    assert "not_a_maxtext_key" in run.reason or "config error" in run.reason.lower()
    assert metric_value_absent(run, "final_loss") == "not_produced"


def metric_value_absent(run, name: str) -> str | None:
    return next(m.absent for m in run.metrics if m.name == f"training.{name}")


def test_truncated_log_is_a_failure(tmp_path: Path) -> None:
    text = (FIXTURES / "single_20steps.log").read_text().splitlines(keepends=True)
    cut = tmp_path / "node0.log"
    cut.write_text("".join(text[:44]))  # ends after step 11 (line 44)
    loaded = load_local(tmp_path, steps=20, runs=["BS=2,PRECISION=BF16,SL=128"])
    run = analyze_paths(loaded, [cut]).runs[0]
    assert run.status == "FAIL" and "ends at step 11 of 20" in run.reason


def test_flattened_log_gives_the_same_metrics(tmp_path: Path) -> None:
    flat = tmp_path / "flat.log"
    flat.write_text((FIXTURES / "single_20steps.log").read_text().replace("\n", " "))
    # the same metrics file beside it, as beside the original
    (tmp_path / "flat.metrics.jsonl").write_bytes((FIXTURES / "single_20steps.metrics.jsonl").read_bytes())
    loaded = load_local(tmp_path, steps=20, runs=["BS=2,PRECISION=BF16,SL=128"])
    a = analyze_paths(loaded, [FIXTURES / "single_20steps.log"]).runs[0]
    b = analyze_paths(loaded, [flat]).runs[0]
    assert [(m.name, m.value) for m in a.metrics] == [(m.name, m.value) for m in b.metrics]


def test_two_process_run_sums_nodes(tmp_path: Path) -> None:
    doc = json.loads(LOCAL_2PROC.read_text())
    key = doc["runs"][0] if doc.get("runs") else next(iter(doc["sweeps"]))
    loaded = load_config(write_config(tmp_path, source=LOCAL_2PROC, steps=20, runs=[key]))
    logs = [FIXTURES / "twoproc_node0.log", FIXTURES / "twoproc_node1.log"]
    res = analyze_paths(loaded, logs)
    run = res.runs[0]
    assert run.outcome == "complete", run.reason
    assert len(run.nodes) == 2 and run.environment.num_devices == 2 and run.environment.devices_per_node == 1
    # each window step takes the slower node's seconds; per-device tokens from both nodes
    rows = [{int(m[1]): (float(m[2]), float(m[4])) for m in STEP.finditer(p.read_text())} for p in logs]
    w = run.window.steps
    t = sum(max(r[s][0] for r in rows) for s in w)
    per_gpu = sum(r[s][0] * r[s][1] for r in rows for s in w) / 2 / t
    assert metric(res, run.key, "tokens_per_sec_per_gpu").value == pytest.approx(per_gpu)
    assert metric(res, run.key, "tokens_per_sec_total").value == pytest.approx(2 * per_gpu)
    assert metric(res, run.key, "step_time_seconds").value == pytest.approx(t / len(w))
    lags = [n.lag_pct for n in run.nodes]
    assert all(x is not None for x in lags) and lags[0] == pytest.approx(-lags[1])


def test_run_folder_with_checkpoint_phases_and_eval(tmp_path: Path, capsys) -> None:
    key = "BS=2,PRECISION=BF16,SL=128"

    def eval_on(doc: dict) -> None:
        doc["sweeps"][key]["eval_interval"] = 5
        doc["sweeps"][key]["eval_steps"] = 2

    cfg = write_config(tmp_path, steps=12, runs=[key], mutate=eval_on)
    loaded = load_config(cfg)
    slug = loaded.runs[0].slug
    folder = tmp_path / "run-1"
    for sub, src in [
        (slug, "eval_run.log"),
        ("CKPT_1", "ckpt_phase1.log"),
        ("CKPT_2", "ckpt_phase2.log"),
        ("CKPT_REF", "ckpt_reference.log"),
    ]:
        (folder / "logs" / sub).mkdir(parents=True)
        shutil.copy(FIXTURES / src, folder / "logs" / sub / "node0.log")
    (folder / "plan.json").write_text(json.dumps({"nodes": [{"host": "gpu-a.example", "rank": 0}]}))
    code = main(["analyze", str(cfg), "--logs", str(folder), "--out", str(tmp_path / "o")])
    printed = capsys.readouterr().out
    res = load_results(tmp_path / "o" / "results.json")
    keys = [r.key for r in res.runs]
    assert res.hosts == ["gpu-a.example"] and res.runs[0].nodes[0].host == "gpu-a.example"
    assert keys == [key, "CKPT-1", "CKPT-2", "CKPT-REF"], keys
    sweep = res.runs[0]
    assert metric(res, key, "eval_loss").value == pytest.approx(7.32)
    excl = {x.step: x.reason for x in sweep.window.excluded}
    assert any("eval" in excl.get(s, "") for s in (5, 6, 10, 11))
    p2 = res.runs[2]
    assert metric(res, "CKPT-2", "checkpoint_load_seconds").value == pytest.approx(0.0932, abs=1e-3)
    assert metric(res, "CKPT-1", "checkpoint_save_seconds").value == pytest.approx(0.12)
    resumed = verdict(p2, "checkpoint.resumed")
    assert resumed.status == "PASS" and resumed.actual == 6 and "restored step 5" in resumed.message
    sentinels = verdict(p2, "checkpoint.sentinel_losses")
    assert sentinels.status == "PASS" and sentinels.actual == 0 and "6..11" in sentinels.message
    delta = verdict(p2, "checkpoint.boundary_loss_delta")
    assert delta.status == "PASS" and delta.actual == pytest.approx(0.0) and "reference" in delta.message
    assert code == (0 if res.passed else 1), printed
    # --run picks one run out of the folder
    one = analyze_paths(loaded, [folder], "CKPT_2")
    assert [r.key for r in one.runs] == ["CKPT-2"]


@pytest.mark.parametrize(
    ("argv_tail", "needle"),
    [
        (["--logs", "/nonexistent/x.log"], "no such file or folder"),
        (["--logs", str(FIXTURES / "single_20steps.log")], "--run"),
        (["--logs", str(FIXTURES / "single_20steps.log"), "--run", "NOPE"], "no such run"),
        (["--logs", str(FIXTURES)], "--run"),
    ],
)
def test_bad_input_exits_2(tmp_path: Path, capsys, argv_tail: list[str], needle: str) -> None:
    cfg = write_config(tmp_path, steps=20)  # two runs selected: --run is required for plain logs
    assert main(["analyze", str(cfg), *argv_tail, "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err


def test_unknown_slug_in_run_folder_is_bad_input(tmp_path: Path) -> None:
    loaded = load_local(tmp_path, steps=20)
    (tmp_path / "rf" / "logs" / "SOMETHING_ELSE").mkdir(parents=True)
    with pytest.raises(UserError, match="SOMETHING_ELSE"):
        analyze_paths(loaded, [tmp_path / "rf"])


def test_folder_of_node_logs_sorted_by_rank(tmp_path: Path) -> None:
    doc = json.loads(LOCAL_2PROC.read_text())
    key = doc["runs"][0] if doc.get("runs") else next(iter(doc["sweeps"]))
    loaded = load_config(write_config(tmp_path, source=LOCAL_2PROC, steps=20, runs=[key]))
    d = tmp_path / "logs"
    d.mkdir()
    shutil.copy(FIXTURES / "twoproc_node1.log", d / "node10.log")  # rank 10 must sort after rank 2
    shutil.copy(FIXTURES / "twoproc_node0.log", d / "node2.log")
    run = analyze_paths(loaded, [d]).runs[0]
    assert [Path(n.log_path).name for n in run.nodes] == ["node2.log", "node10.log"]


def test_metrics_file_losses_are_used_only_where_they_match_the_log(tmp_path: Path) -> None:
    from cvs_tui.core.events import StepEvent
    from cvs_tui.core.sources.offline import parse_log_file

    log = tmp_path / "node0.log"
    log.write_bytes((FIXTURES / "single_20steps.log").read_bytes())
    logged = {e.step: e.loss for e in parse_log_file(log, None)[0] if isinstance(e, StepEvent)}
    assert logged[19] == 7.188  # no metrics file: the printed 3 decimals
    lines = (FIXTURES / "single_20steps.metrics.jsonl").read_text().splitlines()
    # step 19's value is changed beyond the printed precision: not this run's, so the log value stays
    bad = json.loads(lines[19])
    bad["learning/loss"] = 6.5
    lines[19] = json.dumps(bad)
    (tmp_path / "node0.metrics.jsonl").write_text("\n".join(lines) + "\n")
    full = {e.step: e.loss for e in parse_log_file(log, None)[0] if isinstance(e, StepEvent)}
    assert full[19] == 7.188
    assert full[0] == pytest.approx(7.501341819763184, abs=1e-12)
    assert all(abs(full[s] - logged[s]) <= 5e-4 for s in logged)


def _ckpt_folder(tmp_path: Path, phase2: str) -> tuple[Path, Path]:
    key = "BS=2,PRECISION=BF16,SL=128"
    cfg = write_config(tmp_path, steps=12, runs=[key])
    folder = tmp_path / "run"
    for sub, text in [
        ("CKPT_1", (FIXTURES / "ckpt_phase1.log").read_text()),
        ("CKPT_2", phase2),
        ("CKPT_REF", (FIXTURES / "ckpt_reference.log").read_text()),
    ]:
        (folder / "logs" / sub).mkdir(parents=True)
        (folder / "logs" / sub / "node0.log").write_text(text)
    return cfg, folder


def test_a_diverging_resumed_loss_fails_naming_the_step(tmp_path: Path) -> None:
    text = (FIXTURES / "ckpt_phase2.log").read_text()
    line = next(x for x in text.splitlines() if "completed step: 8," in x)
    loss = re.search(r"loss: ([0-9.]+)", line).group(1)
    wrong = line.replace(f"loss: {loss}", "loss: 7.900")
    cfg, folder = _ckpt_folder(tmp_path, text.replace(line, wrong))
    res = analyze_paths(load_config(cfg), [folder])
    p2 = next(r for r in res.runs if r.key == "CKPT-2")
    sentinels = verdict(p2, "checkpoint.sentinel_losses")
    assert sentinels.status == "FAIL" and sentinels.message.startswith("step 8 diverges")
    assert p2.status == "FAIL"


def test_a_phase_two_that_did_not_restore_fails(tmp_path: Path) -> None:
    # phase 2 as if it started from scratch: the uninterrupted reference log stands in for it
    cfg, folder = _ckpt_folder(tmp_path, (FIXTURES / "ckpt_reference.log").read_text())
    res = analyze_paths(load_config(cfg), [folder])
    p2 = next(r for r in res.runs if r.key == "CKPT-2")
    resumed = verdict(p2, "checkpoint.resumed")
    assert resumed.status == "FAIL" and "no checkpoint restore" in resumed.message


def test_analyze_of_a_live_run_folder_keeps_what_only_the_live_run_knew(tmp_path: Path) -> None:
    """A live run failed by node health (its training log is healthy) and a node stopped by cvs-tui (exit
    143, its own SIGTERM): analyze of its folder re-judges the logs, keeps the live outcome, the health
    findings and metrics and the exit codes, and its note says which is which."""
    from cvs_tui.core.results import HealthFindingRecord, MetricRecord, write_results

    key = "BS=2,PRECISION=BF16,SL=128"
    cfg = write_config(tmp_path, steps=20, runs=[key])
    loaded = load_config(cfg)
    folder = tmp_path / "run-live"
    (folder / "logs" / loaded.runs[0].slug).mkdir(parents=True)
    shutil.copy(FIXTURES / "single_20steps.log", folder / "logs" / loaded.runs[0].slug / "node0.log")
    first = analyze_paths(loaded, [folder])
    assert first.runs[0].status == "PASS"  # the log alone is healthy
    why = "node health: amdgpu_reset on localhost: amdgpu 0000:08:00.0: amdgpu: GPU reset begin!"
    finding = HealthFindingRecord(
        node=0,
        signature="amdgpu_reset",
        severity="fatal",
        line=why[31:],
        kernel_time=1.0,
        wall_time=2.0,
        run=key,
    )
    live = first.model_copy(update={"source": "live"})
    live.runs[0] = live.runs[0].model_copy(
        update={
            "outcome": "failed",
            "status": "FAIL",
            "reason": why,
            "root_cause_node": 0,
            "health_findings": [finding],
            "nodes": [live.runs[0].nodes[0].model_copy(update={"exit_code": 143})],
            "metrics": [
                *live.runs[0].metrics,
                MetricRecord(name="health.findings.fatal", value=1.0, unit="count", text="1"),
            ],
        }
    )
    write_results(live, folder / "results.json")
    again = analyze_paths(loaded, [folder]).runs[0]
    assert again.outcome == "failed" and again.status == "FAIL" and again.reason == why
    assert "143" not in again.reason  # never blamed on cvs-tui's own SIGTERM
    assert [f.signature for f in again.health_findings] == ["amdgpu_reset"]
    assert again.nodes[0].exit_code == 143
    note = next(n for n in again.notes if n.startswith("re-judged from the logs"))
    assert "1 node-health finding(s)" in note and "its outcome (failed" in note
