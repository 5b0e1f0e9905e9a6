"""SVG snapshots (pytest-textual-snapshot) of the dashboard mid-run, the errors and the verdicts screens.

Fed recorded MaxText logs through the real parser; the clock and the event times are fixed. After a
deliberate UI change: review `snapshot_report.html`, then rerun with `--snapshot-update`.
"""

from __future__ import annotations

import pytest
from _pilot import Settle
from tui_streams import CLOCK, paced, suite_events

from cvs_tui.tui.app import CvsApp

SIZE = (160, 48)
INFO = {"config": "mi300x_single.json", "model": "llama2-7b", "mode": "distributed", "gpu": "MI300X"}


def _app(fraction: float) -> CvsApp:
    return CvsApp(paced(suite_events(fraction)), title="cvs-tui", info=INFO, clock=lambda: CLOCK)


def test_dashboard_mid_run(snap_compare, settle: Settle, no_cursor_blink: None) -> None:  # type: ignore[no-untyped-def]
    """Two nodes training, node 0's log following."""
    assert snap_compare(_app(0.7), run_before=settle, terminal_size=SIZE)


def test_errors_screen(snap_compare, settle: Settle, no_cursor_blink: None) -> None:  # type: ignore[no-untyped-def]
    """Fatal hits first, the root-cause node marked."""

    async def run_before(pilot) -> None:  # type: ignore[no-untyped-def]
        await settle(pilot)
        await pilot.press("e")
        await pilot.pause()

    assert snap_compare(_app(1.0), run_before=run_before, terminal_size=SIZE)


def test_verdicts_screen(snap_compare, settle: Settle, no_cursor_blink: None) -> None:  # type: ignore[no-untyped-def]
    """Metric tables of both runs, loss curves, the FAIL banner and report paths."""

    async def run_before(pilot) -> None:  # type: ignore[no-untyped-def]
        await settle(pilot)
        await pilot.press("v")
        await pilot.pause(0.1)
        pilot.app.refresh_now()
        await pilot.pause(0.1)

    assert snap_compare(_app(1.0), run_before=run_before, terminal_size=SIZE)


@pytest.mark.parametrize("size", [(80, 24), (120, 40), (200, 50)], ids=["80x24", "120x40", "200x50"])
def test_dashboard_finished_at_size(snap_compare, settle: Settle, no_cursor_blink: None, size) -> None:  # type: ignore[no-untyped-def]
    """The finished, failed suite: verdict and status line on top, lag/errors/health columns kept,
    each run once with its outcome glyph first, the failed run's reason on the detail line."""
    assert snap_compare(_app(1.0), run_before=settle, terminal_size=size)


SIZES = [(80, 24), (100, 30), (120, 40), (200, 50)]
SIZE_IDS = ["80x24", "100x30", "120x40", "200x50"]


@pytest.mark.parametrize(
    "key", ["v", "e", "H", "question_mark"], ids=["verdicts", "errors", "health", "help"]
)
@pytest.mark.parametrize("size", SIZES, ids=SIZE_IDS)
def test_screen_at_size(snap_compare, settle: Settle, no_cursor_blink: None, key: str, size) -> None:  # type: ignore[no-untyped-def]
    """Every screen of the finished suite at four terminal sizes: notes under the verdict table below
    110 columns (never a column one letter wide), the help box inside the screen."""

    async def run_before(pilot) -> None:  # type: ignore[no-untyped-def]
        await settle(pilot)
        await pilot.press(key)
        await pilot.pause(0.1)
        pilot.app.refresh_now()
        await pilot.pause(0.1)

    assert snap_compare(_app(1.0), run_before=run_before, terminal_size=size)
