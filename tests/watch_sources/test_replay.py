"""A finished run replayed as events: the same state, the same screens as a live run."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from cvs_tui.core.config.loader import load_config
from cvs_tui.core.events import RunOutcome
from cvs_tui.core.sources.inputs import plan_for, resolve_log_inputs
from cvs_tui.core.sources.offline import analyze_paths
from cvs_tui.core.sources.replay import replay_events
from cvs_tui.core.state import RunState
from cvs_tui.tui.app import CvsApp
from cvs_tui.tui.screens.verdicts import VerdictsScreen

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures" / "maxtext"
CONFIG = ROOT / "configs" / "local" / "cpu_jaxmaxtext_tiny-llama_single.json"


@pytest.fixture
def analysed(monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    monkeypatch.setenv("CVS_TUI_MAXTEXT_PYTHON", "/usr/bin/python3")
    loaded = load_config(CONFIG)
    key = json.loads(CONFIG.read_text())["runs"][0]
    logs = [str(FIX / "single_20steps.log")]
    plan = plan_for(loaded, logs)
    results = analyze_paths(plan, logs, key)
    return plan, results, resolve_log_inputs(plan, logs, key)


def test_replay_folds_into_the_same_run(analysed) -> None:  # type: ignore[no-untyped-def]
    plan, results, inputs = analysed
    state = RunState()
    for ev in replay_events(plan, results, inputs):
        state.apply(ev)
    (run,) = results.runs
    view = state.runs[run.key]
    assert view.outcome is RunOutcome(run.outcome)
    assert list(view.nodes[0].losses) == [p.loss for p in run.nodes[0].steps]
    assert view.nodes[0].step == run.nodes[0].last_step
    assert {m: v.status for m, v in view.verdicts.items()} == {v.metric: v.status for v in run.verdicts}
    lines = (FIX / "single_20steps.log").read_text().splitlines()
    assert view.nodes[0].lines.next_line - 1 == len(lines) and view.nodes[0].last_line == lines[-1]
    assert state.suite_end is not None and state.suite_end.passed is results.passed


async def test_replay_opens_the_verdicts_screen(analysed) -> None:  # type: ignore[no-untyped-def]
    plan, results, inputs = analysed

    async def source() -> AsyncIterator[object]:
        for ev in replay_events(plan, results, inputs):
            yield ev

    app = CvsApp(source(), title="analyze")  # type: ignore[arg-type]
    async with app.run_test(size=(160, 48)) as pilot:
        for _ in range(400):
            if app.source_done:
                break
            await pilot.pause(0.01)
        assert app.source_done
        await pilot.press("v")
        await pilot.pause()
        assert isinstance(app.screen, VerdictsScreen)
