"""Compare a base and a candidate (each one run or several repetitions): is the difference real?

* ``inputs``: results.json files, run folders, or raw node logs judged with a config's plan;
* ``fingerprint``: what must match for two runs to be comparable;
* ``samples``: each run's steady-state window steps as samples;
* ``stats``: robust centres, seeded bootstrap bands, rank tests, the print-precision loss tolerance;
* ``judge``: IMPROVED / REGRESSED / NO CHANGE / INCONCLUSIVE / NOT COMPARABLE per metric and run;
* ``loss``: the loss curves step by step and the final-loss row;
* ``model``: the plain report the terminal, HTML (``core/report/compare_html``) and JSON views render.
"""

from __future__ import annotations

from cvs_tui.core.compare.inputs import RunInput, load_input, load_side
from cvs_tui.core.compare.judge import PERF_METRICS, compare, compare_run, write_json
from cvs_tui.core.compare.loss import loss_check
from cvs_tui.core.compare.model import (
    COMPARE_MIN_STEPS,
    DEFAULT_THRESHOLD_PCT,
    IMPROVED,
    INCONCLUSIVE,
    NO_CHANGE,
    NOT_COMPARABLE,
    REGRESSED,
    CompareReport,
    MetricDelta,
    RunComparison,
    Verdict,
    biggest_change,
    headline_reason,
)
from cvs_tui.core.compare.samples import RunSamples, run_samples
from cvs_tui.core.report.compare_html import render_html, write_html

__all__ = [
    "COMPARE_MIN_STEPS",
    "DEFAULT_THRESHOLD_PCT",
    "IMPROVED",
    "INCONCLUSIVE",
    "NOT_COMPARABLE",
    "NO_CHANGE",
    "PERF_METRICS",
    "REGRESSED",
    "CompareReport",
    "MetricDelta",
    "RunComparison",
    "RunInput",
    "RunSamples",
    "Verdict",
    "biggest_change",
    "compare",
    "compare_run",
    "headline_reason",
    "load_input",
    "load_side",
    "loss_check",
    "render_html",
    "run_samples",
    "write_html",
    "write_json",
]
