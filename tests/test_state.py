"""The reducer: run events in, per-run per-node views out."""

from __future__ import annotations

import math

from cvs_tui.core.events import (
    ErrorHit,
    EvalDialect,
    EvalEvent,
    LogLinesEvent,
    NodeLogEvent,
    NodeState,
    NodeStatusEvent,
    NonFiniteAbortEvent,
    RunEndEvent,
    RunOutcome,
    RunStartEvent,
    Severity,
    StageEvent,
    StageState,
    StepEvent,
    SuiteEndEvent,
    VerdictEvent,
)
from cvs_tui.core.state import TAIL_LINES, RunState


def test_fold_a_two_node_run() -> None:
    st = RunState()
    st.apply(StageEvent("launch", StageState.RUNNING, at=1.0))
    st.apply(StageEvent("launch", StageState.PASSED, "2 nodes", at=3.0))
    st.apply(RunStartEvent("BS=1", total_steps=10, nodes=("h0", "h1"), at=4.0))
    assert st.current_run == "BS=1"
    for node in (0, 1):
        st.apply(NodeStatusEvent("BS=1", node, f"h{node}", NodeState.STARTING))
        for s in range(5 + node):
            st.apply(
                NodeLogEvent("BS=1", node, StepEvent(step=s, loss=10 - s, line=s + 1, seconds=1.0 + node))
            )
    st.apply(NodeLogEvent("BS=1", 1, EvalEvent(step=5, loss=4.5, dialect=EvalDialect.CURRENT, line=50)))
    st.apply(NodeLogEvent("BS=1", 1, ErrorHit("oom", Severity.FATAL, "RESOURCE_EXHAUSTED", 60, "builtin")))
    st.apply(NodeLogEvent("BS=1", 0, ErrorHit("cuinit", Severity.WARNING, "cuInit failed", 2, "benign")))
    st.apply(LogLinesEvent("BS=1", 0, 1, ("a", "b", "c")))
    st.apply(VerdictEvent("BS=1", "training.final_loss", "PASS", "<= 15", 5.0, "loss"))
    st.apply(RunEndEvent("BS=1", RunOutcome.FAILED, "oom on node 1", 1, at=9.0))
    st.apply(SuiteEndEvent(False, "r.json", "r.html"))
    st.apply("not an event")

    assert st.stages["launch"].state is StageState.PASSED
    assert st.stages["launch"].started_at == 1.0 and st.stages["launch"].ended_at == 3.0
    run = st.runs["BS=1"]
    assert run.nodes[0].host == "h0" and run.nodes[0].state is NodeState.TRAINING
    assert run.nodes[0].latest_step == 4 and run.nodes[1].latest_step == 5
    assert run.latest_step == 4 and math.isclose(run.progress, 0.5)
    assert run.nodes[1].step_times[-1] == (5, 2.0)
    assert run.nodes[1].evals == [(5, 4.5)]
    assert run.nodes[1].fatal_count == 1 and run.nodes[0].warning_count == 1
    assert run.nodes[0].last_line == "c" and run.nodes[0].lines_seen == 3
    assert run.verdicts["training.final_loss"].status == "PASS"
    assert run.outcome is RunOutcome.FAILED and run.root_cause_node == 1 and not run.running
    assert st.current_run is None and st.suite_passed is False and st.results_path == "r.json"
    evs = run.node_events()
    assert len(evs) == 2 and len(evs[1]) == 8
    assert st.run_order == ["BS=1"]


def test_nonfinite_and_bounded_tail() -> None:
    st = RunState()
    st.apply(NodeLogEvent("R", 0, StepEvent(step=0, loss=math.nan, line=1)))
    st.apply(NodeLogEvent("R", 1, NonFiniteAbortEvent("inf", 3)))
    assert st.runs["R"].nodes[0].nonfinite == "nan"
    assert st.runs["R"].nodes[1].nonfinite == "inf" and st.runs["R"].nodes[1].fatal_count == 1
    lines = tuple(f"l{i}" for i in range(TAIL_LINES + 50))
    st.apply(LogLinesEvent("R", 0, 1, lines))
    tail = st.runs["R"].nodes[0].tail
    assert len(tail) == TAIL_LINES and tail[-1] == (TAIL_LINES + 50, lines[-1]) and tail[0][0] == 51
