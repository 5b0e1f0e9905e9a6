"""Run outcomes and special runs: fatal vs benign hits, root-cause node, exit codes, hung runs, smoke and
checkpoint gates, and the helpers a live run uses (verdict events, stage records)."""

from __future__ import annotations

from pathlib import Path

from _analysis_samples import FIXTURES, load_local, planned, synthetic_node

from cvs_tui.core.events import ErrorHit, RunOutcome, Severity, StageEvent, StageState
from cvs_tui.core.judge.facts import RunFacts
from cvs_tui.core.judge.finalize import finalize_run, stage_records, verdict_events
from cvs_tui.core.judge.outcome import decide_outcome
from cvs_tui.core.sources.offline import analyze_paths
from cvs_tui.core.state import RunState

KEY = "BS=2,PRECISION=BF16,SL=128"


def test_benign_hits_do_not_fail_a_run(tmp_path: Path) -> None:
    loaded = load_local(tmp_path, steps=20, runs=[KEY])
    run = finalize_run(planned(loaded, KEY), [synthetic_node()])
    assert run.outcome == "complete" and run.status == "PASS"
    assert run.errors and run.errors[0].severity == "warning" and run.nodes[0].warnings == 1


def test_root_cause_prefers_the_first_failure_over_coordination_fallout() -> None:
    n0 = [
        *synthetic_node(5),
        ErrorHit("coordination", Severity.FATAL, "coordination service terminated", 40, "always"),
    ]
    n1 = [
        *synthetic_node(5),
        ErrorHit("oom", Severity.FATAL, "RESOURCE_EXHAUSTED: Out of memory", 33, "builtin"),
    ]
    out, reason, root = decide_outcome([n0, n1], 20)
    assert out is RunOutcome.FAILED and root == 1
    assert reason.startswith("node 1 line 33: oom") and "also on node(s) [0]" in reason


def test_exit_codes_hung_and_missing_steps() -> None:
    clean = synthetic_node(20)
    assert decide_outcome([clean], 20)[0] is RunOutcome.COMPLETE
    out, reason, root = decide_outcome([clean, clean], 20, RunFacts(exit_codes=[0, 137]))
    assert out is RunOutcome.FAILED and root == 1 and "code 137" in reason
    out, reason, _ = decide_outcome(
        [clean], 20, RunFacts(outcome=RunOutcome.HUNG, reason="no output for 600 s")
    )
    assert out is RunOutcome.HUNG and reason == "no output for 600 s"
    nccl = [
        *synthetic_node(8),
        ErrorHit("nccl", Severity.FATAL, "NCCL WARN Net : Connection closed", 50, "builtin"),
    ]
    out, reason, root = decide_outcome(
        [clean, nccl], 20, RunFacts(outcome=RunOutcome.HUNG, reason="no output for 600 s")
    )
    assert out is RunOutcome.HUNG and root == 1
    assert reason.startswith("no output for 600 s; first fatal error: node 1 line 50: nccl")
    out, reason, _ = decide_outcome([[]], 20)
    assert out is RunOutcome.FAILED and "no training step" in reason


def test_hung_run_keeps_its_metrics_and_fails(tmp_path: Path) -> None:
    loaded = load_local(tmp_path, steps=20, runs=[KEY])
    run = finalize_run(
        planned(loaded, KEY),
        [synthetic_node(12)],
        RunFacts(outcome=RunOutcome.HUNG, reason="no progress for 900 s"),
    )
    assert run.status == "FAIL" and run.outcome == "hung" and run.reason == "no progress for 900 s"
    assert next(m for m in run.metrics if m.name == "training.tokens_per_sec_per_gpu").value is not None


def test_smoke_records_metrics_and_judges_errors_only(tmp_path: Path) -> None:
    loaded = load_local(tmp_path, steps=20, runs=[KEY])
    assert planned(loaded, "SMOKE").steps == loaded.config.smoke.steps
    run = finalize_run(planned(loaded, "SMOKE"), [synthetic_node(5)])
    assert run.kind == "smoke" and run.status == "PASS"
    assert {v.status for v in run.verdicts} <= {"RECORD", "N/A"}
    bad = finalize_run(
        planned(loaded, "SMOKE"),
        [[*synthetic_node(2), ErrorHit("segv", Severity.FATAL, "SIGSEGV", 9, "builtin")]],
    )
    assert bad.status == "FAIL" and "segv" in bad.reason


def test_checkpoint_io_gates_from_the_checkpoint_block(tmp_path: Path) -> None:
    def gate(doc: dict) -> None:
        doc["checkpoint_resume"]["max_save_seconds"] = 0.05
        doc["checkpoint_resume"]["max_load_seconds"] = 5.0

    loaded = load_local(tmp_path, steps=12, runs=[KEY], mutate=gate)
    res = analyze_paths(loaded, [FIXTURES / "ckpt_phase1.log"], "CKPT-1")
    save = next(v for v in res.runs[0].verdicts if v.metric == "training.checkpoint_save_seconds")
    assert save.status == "FAIL" and save.gated and "> max" in save.message
    res = analyze_paths(loaded, [FIXTURES / "ckpt_phase2.log"], "CKPT-2")
    load = next(v for v in res.runs[0].verdicts if v.metric == "training.checkpoint_load_seconds")
    assert load.status == "PASS"
    # without the phase-1 or reference run there is nothing to compare the boundary with: FAIL, said why
    delta = next(v for v in res.runs[0].verdicts if v.metric == "checkpoint.boundary_loss_delta")
    assert delta.status == "FAIL" and "no finite losses" in delta.message


def test_live_helpers(tmp_path: Path) -> None:
    loaded = load_local(tmp_path, steps=20, runs=[KEY])
    run = finalize_run(planned(loaded, KEY), [synthetic_node()])
    evs = verdict_events(run)
    assert [e.metric for e in evs] == [v.metric for v in run.verdicts] and evs[0].run == KEY
    st = RunState()
    st.apply(StageEvent("preflight", StageState.RUNNING, at=1.0))
    st.apply(StageEvent("preflight", StageState.PASSED, "ok", at=2.0))
    st.apply(StageEvent("smoke", StageState.SKIPPED, "smoke.enabled is false", at=2.0))
    recs = stage_records(st)
    assert [(r.name, r.state, r.seconds) for r in recs] == [
        ("preflight", "passed", 1.0),
        ("smoke", "skipped", None),
    ]
