"""The one line a finished suite ends with, as `pytest` ends with its counts:

    suite PASSED — 6 runs, 17 checks passed, 0 failed, 1m57s — file:///abs/runs/x/report.html
    suite FAILED — run BS=4: failed: node health: ... (+1 more) — 4 runs (2 failed), 13 checks passed, ...


Built from results.json (the record every front-end writes), so the live view, the headless console and a
detached run all print the same counts. A "check" is a metric verdict with status PASS or FAIL (RECORD
and N/A verdicts gate nothing and are not counted); runs and stages that failed are counted apart, and a
failed suite names its first failure (``Results.failures``, as report.html and summary.md list them).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cvs_tui.core.results import Results


def _duration(results: Results) -> float | None:
    starts = [s.started_at for s in results.stages if s.started_at]
    ends = [s.ended_at for s in results.stages if s.ended_at]
    if not starts or not ends:
        return None
    return max(0.0, max(ends) - min(starts))


def suite_line(results: Results, report_path: str | Path | None) -> str:
    from cvs_tui.core.results import tally
    from cvs_tui.render.format import fmt_duration

    t = tally(results)
    runs = f"{t.runs} run{'s' if t.runs != 1 else ''}"
    if t.runs_failed:
        runs += f" ({t.runs_failed} failed)"
    parts = [runs, f"{t.checks_passed} checks passed", f"{t.checks_failed} failed"]
    if t.stages_failed:
        parts.append(f"{t.stages_failed} stage{'s' if t.stages_failed != 1 else ''} failed")
    seconds = _duration(results)
    if seconds is not None:
        parts.append(fmt_duration(seconds))
    line = f"suite {'PASSED' if results.passed else 'FAILED'}"
    if t.reason:
        more = len(results.failures) - 1
        reason = t.reason if len(t.reason) <= _REASON_MAX else t.reason[: _REASON_MAX - 1] + "…"
        line += f" — {reason}" + (f" (+{more} more)" if more > 0 else "")
    line += f" — {', '.join(parts)}"
    if report_path:
        line += f" — {Path(report_path).resolve().as_uri()}"
    return line


_REASON_MAX = 160  # the exit line stays one line; report.html and summary.md have the whole reason


def suite_line_from_files(results_path: str | Path, report_path: str | Path | None) -> str | None:
    """The line for a results.json on disk; None when it cannot be read (the caller says less)."""
    from cvs_tui.core.errors import UserError
    from cvs_tui.core.results import load_results

    try:
        return suite_line(load_results(Path(results_path)), report_path)
    except (OSError, ValueError, UserError):
        return None
