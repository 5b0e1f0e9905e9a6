"""Node health: each node's state (ok / warn / FAIL / not checked, with why) and GPU telemetry, the
telemetry notes of its latest sample (throttling, PCIe links below their maximum, fields not readable:
the lines the reports print), then every kernel-log finding with its kernel line, the run and step it
fell in."""

from __future__ import annotations

from typing import ClassVar

from rich import box
from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.widgets import Footer, Static

from cvs_tui.core.events import Severity
from cvs_tui.core.health.telemetry_notes import telemetry_notes
from cvs_tui.core.state import RunState
from cvs_tui.tui.screens.base import RunViewScreen
from cvs_tui.tui.widgets.node_cells import health_cell, telemetry_text


def health_view(view: RunState, *, ascii_only: bool) -> Group:
    b = box.ASCII if ascii_only else box.SIMPLE_HEAD
    nodes = Table(expand=True, box=b, pad_edge=False, title="Nodes", title_justify="left")
    for col in ("node", "health", "why", "gpu %/W/°C", "tool"):
        nodes.add_column(col)
    for rank in sorted(view.health):
        hv = view.health[rank]
        tool = hv.telemetry.tool if hv.telemetry else "-"
        nodes.add_row(
            f"{rank} {hv.host}",
            health_cell(hv),
            Text(hv.reason, style="dim"),
            telemetry_text(hv.telemetry),
            tool,
        )
    findings = Table(expand=True, box=b, pad_edge=False, title="Findings", title_justify="left")
    for col in ("node", "severity", "signature", "run / step", "kernel line"):
        findings.add_column(col, overflow="fold")
    for f in sorted(view.health_findings, key=lambda x: (x.severity is not Severity.FATAL, x.wall_time)):
        where = f.run or "outside a run"
        if f.run:
            where += f" / {f.step if f.step is not None else 'before the first step'}"
        sev = Text(f.severity.value, style="bold red" if f.severity is Severity.FATAL else "yellow")
        sig = f.signature + (f" ({f.detail})" if f.detail else "")
        findings.add_row(str(f.node), sev, sig, where, Text(f"[{f.kernel_time:.6f}] {f.line}"))
    parts: list[Table | Text] = [nodes if view.health else Text("node health not watched", style="dim")]
    for rank in sorted(view.health):
        got = view.health[rank].telemetry
        if got is not None:
            for line in telemetry_notes(f"node {rank}", got.tool, got.samples):
                parts.append(Text(f"warning: {line}", style="yellow"))
    parts.append(findings if view.health_findings else Text("no kernel-log findings", style="dim"))
    if view.health_findings_dropped:
        parts.append(Text(f"{view.health_findings_dropped} more warning(s) not listed", style="dim"))
    return Group(*parts)


class HealthScreen(RunViewScreen):
    BINDINGS: ClassVar[list[BindingType]] = [Binding("q,escape", "back", "Back")]

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="health-scroll"):
            yield Static(id="health")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#health-scroll").focus()
        self.refresh_view(force=True)

    def update(self, view: RunState) -> None:
        self.query_one("#health", Static).update(health_view(view, ascii_only=self.app.ascii_only))

    def action_back(self) -> None:
        self.app.pop_screen()
