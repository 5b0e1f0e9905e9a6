"""Stalls reach the front-ends: a judged run's stalls become a StallsEvent per node, the reducer keeps
them, the node table shows how many and the longest, and the loss plot marks the stalled steps.

Input: the real paused MaxText CPU run (tests/fixtures/maxtext/stall_sigstop.log, SIGSTOP for about 4 s
after step 100's line), judged by `analyze`.
"""

from __future__ import annotations

from pathlib import Path
from typing import cast

from _analysis_samples import FIXTURES, load_local

from cvs_tui.core.cluster import local_cluster
from cvs_tui.core.events import RunEvent, StallsEvent
from cvs_tui.core.judge.finalize import stall_events
from cvs_tui.core.plan import build_plan
from cvs_tui.core.sources.offline import analyze_paths
from cvs_tui.core.sources.replay import replay_events
from cvs_tui.core.state import RunState
from cvs_tui.tui.widgets.loss_plot import loss_plot_text
from cvs_tui.tui.widgets.node_cells import stalls_cell

KEY = "BS=2,PRECISION=BF16,SL=128"


def test_a_judged_stall_reaches_the_state_the_table_and_the_plot(tmp_path: Path) -> None:
    loaded = load_local(tmp_path, steps=200)
    log = FIXTURES / "stall_sigstop.log"
    results = analyze_paths(loaded, [log], KEY)
    run = results.runs[0]
    events = stall_events(run)
    assert [(e.node, e.steps) for e in events] == [(0, (103,))]
    assert events[0].causes == ("unexplained",)

    plan = build_plan(loaded, local_cluster(1), out_dir=tmp_path, run_id="t")
    state = RunState()
    replayed = list(replay_events(plan, results, [(KEY, [log])]))
    assert any(isinstance(e, StallsEvent) for e in replayed)
    for ev in replayed:
        state.apply(cast(RunEvent, ev))
    nv = state.runs[KEY].nodes[0]
    assert list(nv.stalls) == [103] and nv.stalls[103] > 4.0
    assert stalls_cell(nv.stalls).plain.startswith("1 max 4.")
    assert stalls_cell({}).plain == "-"

    curve = {p.step: p.loss for p in run.nodes[0].steps if p.loss is not None}
    marked = loss_plot_text(curve, 80, 14, ascii_only=True, marks=set(nv.stalls))
    plain = loss_plot_text(curve, 80, 14, ascii_only=True)
    assert "X" in marked and "X" not in plain


def test_a_run_without_stalls_sends_no_stall_event(tmp_path: Path) -> None:
    loaded = load_local(tmp_path, steps=200)
    run = analyze_paths(loaded, [FIXTURES / "stall_baseline.log"], KEY).runs[0]
    assert stall_events(run) == []
