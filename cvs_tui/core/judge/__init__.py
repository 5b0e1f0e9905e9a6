"""The judge layer: from each node's events to metrics, verdicts and a RunRecord.

Modules, in the order a run is judged:

* ``window``: the steady-state window (which steps the perf metrics may use);
* ``definitions``, ``metrics``, ``loss``: every metric, one small function per section;
* ``verdicts``: a metric against its threshold spec (PASS, FAIL, RECORD, N/A);
* ``outcome``: complete, failed, hung or interrupted, and the root-cause node;
* ``records``: the node records and environment facts of a RunRecord;
* ``finalize``: :func:`finalize_run`, the one place a planned run is judged;
* ``checkpoint``: the checkpoint-resume verdicts and the shared loss-agreement rule;
* ``format``: the one number formatter every view uses.

The judge reads a :class:`~cvs_tui.core.plan.Plan` and events; it never imports the runner.

Nothing is imported here: a view that needs only ``format`` must not pay for the judge (the TUI's
first frame); import from the modules.
"""
