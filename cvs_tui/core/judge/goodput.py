"""The stall metrics (``training.stall_count``, ``stall_seconds``, ``longest_stall_seconds``,
``goodput_pct``): a section of :func:`cvs_tui.core.judge.run.run_metrics`, from the stall
reports each node's window made (``NodeWindow.stalls``). See docs/metrics.md, "Stalls and goodput"."""

from __future__ import annotations

from typing import TYPE_CHECKING

from cvs_tui.core.judge.stalls import MIN_BASELINE_STEPS, RunStalls, StallReport, run_stalls

if TYPE_CHECKING:  # the sections' shared types; metrics imports this module
    from cvs_tui.core.judge.metrics import RunInputs, Sheet

STALL_METRICS = (
    "training.stall_count",
    "training.stall_seconds",
    "training.longest_stall_seconds",
    "training.goodput_pct",
)


def stall_section(run: RunInputs, sheet: Sheet) -> RunStalls | None:
    """Put the stall metrics on the sheet; returns the run's stalls, or None without a baseline on any
    node (then every stall metric is inconclusive, never a 0 that was not measured)."""
    put = sheet.put
    reports: list[StallReport] = []
    for w in run.windows:
        # a node without timed steps still takes its rank's place, so the stalls keep their node
        reports.append(w.stalls if w.stalls is not None else StallReport((), 0, None, None, 0.0, None))
    if not any(r.median_seconds is not None for r in reports):
        why = (
            f"inconclusive: fewer than {MIN_BASELINE_STEPS} timed steps after warm-up on every node, "
            "so no step-time baseline to find stalls against"
        )
        for k in STALL_METRICS:
            put(k, None, "inconclusive", why)
        return None
    step_time = sheet.m.get("training.step_time_seconds")
    steady = step_time.value if step_time is not None else None
    rs = run_stalls(reports, steady_step_seconds=steady)
    put("training.stall_count", float(rs.stall_count))
    put("training.stall_seconds", rs.stall_seconds)
    put("training.longest_stall_seconds", rs.longest_stall_seconds)
    if steady is None:
        src = step_time.reason if step_time is not None else "no steady-state step time"
        put("training.goodput_pct", None, "inconclusive", f"needs training.step_time_seconds: {src}")
    elif rs.goodput_pct is None:
        put("training.goodput_pct", None, "not_produced", "no judged step time on any node")
    else:
        put("training.goodput_pct", rs.goodput_pct)
    return rs


__all__ = ["STALL_METRICS", "stall_section"]
