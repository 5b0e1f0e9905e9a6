"""What each cell of a node's row says (the node table, and the health screen's GPU columns): the status
word (a start-up phase before the first step), the last line without its log header, health, GPU
telemetry and the stalls a judged run found."""

from __future__ import annotations

import re

from rich.text import Text

from cvs_tui.core import node_phase
from cvs_tui.core.events import GpuTelemetryEvent, HealthState, NodeState
from cvs_tui.core.state import NodeHealthView, NodeView

# Before its first step a node's status says which start-up phase it is in (the last-line column, where
# the phase is spelt out, is the first to go on a narrow screen).
_PHASE_WORD = {
    node_phase.IMPORTING: "importing",
    node_phase.DEVICES: "devices",
    node_phase.RESTORING: "restoring",
    node_phase.COMPILING: "compiling",
    node_phase.FIRST_STEP: "first step",
}


def status_word(nv: NodeView) -> str:
    if nv.state is NodeState.STARTING and nv.phase in _PHASE_WORD:
        return _PHASE_WORD[nv.phase]
    return nv.state.value


# absl/glog header (`I1130 07:29:46.048968 139782156966784 file.py:265] `): the table shows the message.
_GLOG_HEADER = re.compile(r"^[IWEF]\d{4} [\d:.]+ +\d+ [^\]]{1,80}\] ")


def short_line(line: str) -> str:
    return _GLOG_HEADER.sub("", line[:400], count=1)[:300]


def last_line_cell(phase: str, line: str) -> Text:
    """The last line, led by the start-up phase while the node has no step (what it is busy with)."""
    cell = Text(short_line(line), style="dim")
    if phase:
        cell = Text.assemble((phase, "cyan"), " · ", cell)
    return cell


HEALTH_STYLE = {
    HealthState.OK: "green",
    HealthState.WARN: "yellow",
    HealthState.FAIL: "bold red",
    HealthState.NOT_CHECKED: "dim italic",
}


def health_cell(hv: NodeHealthView | None) -> Text:
    """ok / warn / FAIL / not checked; a node without health events is not checked (never ok)."""
    if hv is None:
        return Text("-", style="dim")
    label = "FAIL" if hv.state is HealthState.FAIL else hv.state.value
    return Text(label, style=HEALTH_STYLE[hv.state])


def telemetry_text(ev: GpuTelemetryEvent | None) -> str:
    """Mean utilisation, power and temperature over the node's GPUs in its latest sample."""
    if ev is None or not ev.samples:
        return "-"

    def mean(xs: list[float | None]) -> str:
        vals = [x for x in xs if x is not None]
        return f"{sum(vals) / len(vals):.0f}" if vals else "?"

    s = ev.samples
    return f"{mean([x.util_pct for x in s])}/{mean([x.power_w for x in s])}/{mean([x.temp_c for x in s])}"


def stalls_cell(stalls: dict[int, float]) -> Text:
    """A judged run's stalls on a node: how many, and the longest (``-``: none found, or not judged yet)."""
    if not stalls:
        return Text("-", style="dim")
    return Text(f"{len(stalls)} max {max(stalls.values()):.3g}s", style="yellow")


__all__ = [
    "HEALTH_STYLE",
    "health_cell",
    "last_line_cell",
    "short_line",
    "stalls_cell",
    "status_word",
    "telemetry_text",
]
