"""Audit 3 L18 (RB01): a log that restarts at step 0 over and over (the MaxText fixture repeated) holds
each repeated start-up fact once, so what the judge keeps of it does not grow with the restarts, and the
judge reads the same environment from it as from one copy."""

from __future__ import annotations

from pathlib import Path

from cvs_tui.core.events import CheckpointEvent, SystemInfoEvent
from cvs_tui.core.judge.table import StepCollector, fact_key
from cvs_tui.core.sources.offline import _collect

FIXTURE = Path(__file__).parents[1] / "fixtures" / "maxtext" / "single_20steps.log"


def _others(path: Path) -> list[object]:
    c = StepCollector()
    try:
        _collect(path, None, c, None)
        return [e for _, e in c.table().others]
    finally:
        c.discard()


def test_rb01_repeated_start_up_facts_are_kept_once(tmp_path: Path) -> None:
    one = _others(FIXTURE)
    log = tmp_path / "restarts.log"
    log.write_text(FIXTURE.read_text() * 200)
    many = _others(log)
    assert len(one) >= 9 and any(isinstance(e, SystemInfoEvent) for e in one)
    assert many == one  # the first copy's facts, at the first copy's lines; the 199 repeats add nothing


def test_rb01_a_fact_that_changes_is_kept_each_time(tmp_path: Path) -> None:
    """A restart on another JAX version is news: both versions stay, in log order."""
    text = FIXTURE.read_text()
    log = tmp_path / "upgrade.log"
    log.write_text(text + text.replace("Jax Version: 0.12.0.1", "Jax Version: 0.13.0") + text)
    jax = [e.value for e in _others(log) if isinstance(e, SystemInfoEvent) and e.key == "jax"]
    assert jax == ["0.12.0.1", "0.13.0"]


def test_rb01_checkpoint_work_is_no_fact() -> None:
    """Saves and restores are events with their own place and time, never dropped as repeats."""
    from cvs_tui.core.events import CheckpointAction

    save = CheckpointEvent(action=CheckpointAction.SAVE_DONE, line=5, step=10, seconds=1.0)
    assert fact_key(save) is None
    off = CheckpointEvent(action=CheckpointAction.DISABLED, line=5)
    assert fact_key(off) == fact_key(CheckpointEvent(action=CheckpointAction.DISABLED, line=99))
