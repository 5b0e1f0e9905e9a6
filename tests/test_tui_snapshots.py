"""SVG snapshots (pytest-textual-snapshot) of the dashboard mid-run, the errors and the verdicts screens.

Fed recorded MaxText logs through the real parser; the clock and the event times are fixed. After a
deliberate UI change: review `snapshot_report.html`, then rerun with `--snapshot-update`.
"""

from __future__ import annotations

from textual.widgets import Input
from tui_streams import CLOCK, paced, suite_events

from cvs_tui.tui.app import CvsApp

SIZE = (160, 48)
INFO = {"config": "mi300x_single.json", "model": "llama2-7b", "mode": "distributed", "gpu": "MI300X"}


def _app(fraction: float) -> CvsApp:
    return CvsApp(paced(suite_events(fraction)), title="cvs-tui", info=INFO, clock=lambda: CLOCK)


async def _settle(pilot) -> None:  # type: ignore[no-untyped-def]
    Input.cursor_blink = False
    app = pilot.app
    for _ in range(400):
        if app.source_done:
            break
        await pilot.pause(0.01)
    app.refresh_now()
    await pilot.pause()


def test_dashboard_mid_run(snap_compare) -> None:  # type: ignore[no-untyped-def]
    """Two nodes training, node 0's log following."""
    assert snap_compare(_app(0.7), run_before=_settle, terminal_size=SIZE)


def test_errors_screen(snap_compare) -> None:  # type: ignore[no-untyped-def]
    """Fatal hits first, the root-cause node marked."""

    async def run_before(pilot) -> None:  # type: ignore[no-untyped-def]
        await _settle(pilot)
        await pilot.press("e")
        await pilot.pause()

    assert snap_compare(_app(1.0), run_before=run_before, terminal_size=SIZE)


def test_verdicts_screen(snap_compare) -> None:  # type: ignore[no-untyped-def]
    """Metric tables of both runs, loss curves, the FAIL banner and report paths."""

    async def run_before(pilot) -> None:  # type: ignore[no-untyped-def]
        await _settle(pilot)
        await pilot.press("v")
        await pilot.pause(0.1)
        pilot.app.refresh_now()
        await pilot.pause(0.1)

    assert snap_compare(_app(1.0), run_before=run_before, terminal_size=SIZE)
