"""Node health in the Textual monitor (Pilot): the node table's health and telemetry columns, and the
health screen (H) listing findings with their kernel lines. The telemetry is the real recorded
amd-smi output in tests/fixtures/smi/ (it stands in for GPU hardware), through the real parser."""

from __future__ import annotations

from pathlib import Path

from _pilot import Settle
from rich.console import Console
from tui_streams import CLOCK, paced, suite_events

from cvs_tui.core.events import (
    GpuTelemetryEvent,
    HealthFindingEvent,
    HealthState,
    NodeHealthEvent,
    RunEvent,
    Severity,
)
from cvs_tui.core.health.telemetry import parse_amd_smi_metric
from cvs_tui.tui.app import CvsApp
from cvs_tui.tui.screens.health import HealthScreen, health_view
from cvs_tui.tui.widgets.node_table import NodeTable

SMI = Path(__file__).resolve().parents[1] / "fixtures" / "smi" / "amd-smi-metric.json"
LINE = "amdgpu 0000:08:00.0: amdgpu: GPU reset begin!"


def health_events(run: str) -> list[RunEvent]:
    samples = tuple(parse_amd_smi_metric(SMI.read_text()))
    return [
        NodeHealthEvent(0, "node-a", HealthState.NOT_CHECKED, "cannot read /dev/kmsg as the login user"),
        NodeHealthEvent(1, "node-b", HealthState.OK),
        GpuTelemetryEvent(1, "node-b", "amd-smi", samples, at=CLOCK),
        HealthFindingEvent(1, "node-b", "amdgpu_reset", Severity.FATAL, LINE, 12.5, CLOCK, run=run, step=4),
    ]


async def test_health_column_telemetry_and_health_screen(settle: Settle) -> None:
    base = suite_events(fraction=0.6)
    run = next(e.run for e in base if hasattr(e, "run") and isinstance(e.run, str))
    app = CvsApp(paced([*base, *health_events(run)]), title="t", clock=lambda: CLOCK)
    async with app.run_test(size=(200, 48)) as pilot:
        await settle(pilot)
        table = app.screen.query_one(NodeTable)
        cells = {r: [c.plain for c in table._cells[r]] for r in (0, 1)}
        assert cells[0][2] == "not checked" and cells[1][2] == "FAIL"
        s = parse_amd_smi_metric(SMI.read_text())[0]
        assert cells[1][9] == f"{s.util_pct:.0f}/{s.power_w:.0f}/{s.temp_c:.0f}" and cells[0][9] == "-"
        await pilot.press("H")
        await pilot.pause()
        assert isinstance(app.screen, HealthScreen)
        out = Console(width=200, record=True)
        out.print(health_view(app.view, ascii_only=False))
        text = out.export_text()
        assert LINE in text and "amdgpu_reset" in text and "not checked" in text and f"{run} / 4" in text


def test_health_screen_prints_the_reports_telemetry_notes() -> None:
    """The recorded ``nvidia-smi -q`` output of an RTX 2080 (a test double for GPU hardware): its
    throttling, narrow link and unreadable fields read on screen as report.html and summary.md say
    them (tests/report/test_report_telemetry_notes.py)."""
    from cvs_tui.core.health.nvidia_smi import parse_nvidia_smi_q
    from cvs_tui.core.state import RunState

    samples = tuple(parse_nvidia_smi_q((SMI.parent / "nvidia-smi-q-rtx2080.txt").read_text()))
    view = RunState()
    for ev in (
        NodeHealthEvent(2, "node-c", HealthState.OK),
        GpuTelemetryEvent(2, "node-c", "nvidia-smi", samples, at=CLOCK),
    ):
        view.apply(ev)
    out = Console(width=400, record=True)
    out.print(health_view(view, ascii_only=False))
    text = out.export_text()
    assert "warning: node 2 GPU 1: clocks throttled (SW power cap)" in text
    assert "warning: node 2 GPU 1: PCIe link 2.5 GT/s x8, below its maximum 8 GT/s x16" in text
    assert "warning: not readable on node 2: ecc.*, retired_pages.*, remapped_rows.* (GPU says N/A" in text


def test_the_headless_console_ends_with_the_same_telemetry_notes() -> None:
    """`--no-ui` prints the notes the health screen and the reports show, before the verdict tables."""
    from cvs_tui.cli.console import ConsoleView
    from cvs_tui.core.health.nvidia_smi import parse_nvidia_smi_q

    samples = tuple(parse_nvidia_smi_q((SMI.parent / "nvidia-smi-q-rtx2080.txt").read_text()))
    out = Console(width=400, record=True)
    cv = ConsoleView(out)
    for ev in (
        NodeHealthEvent(2, "node-c", HealthState.OK),
        GpuTelemetryEvent(2, "node-c", "nvidia-smi", samples, at=CLOCK),
    ):
        cv.handle(ev)
    cv.final()
    text = out.export_text()
    assert "warning: node 2 GPU 1: clocks throttled (SW power cap)" in text
    assert "warning: node 2 GPU 1: PCIe link 2.5 GT/s x8, below its maximum 8 GT/s x16" in text
    assert "warning: not readable on node 2: ecc.*, retired_pages.*, remapped_rows.* (GPU says N/A" in text
