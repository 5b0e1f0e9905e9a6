"""The judge layer: from each node's step table to metrics, verdicts and a RunRecord.

Modules, in the order a run is judged:

* ``table``: a node's step table (``StepCollector`` fills it from any source); ``stream``: the table
  read a chunk at a time (``StreamLog``); ``spill``: its columns, in memory up to a size and then in
  files; ``clock``: the log's line times;
* one module per rule over the table: ``window`` (the steady-state window and its drops, with
  ``steady``: its rule for time that moves between steps under asynchronous dispatch), ``stalls``
  (with ``background``: the stall rule and its attribution), ``figures`` (the node's step time and
  window files), ``loss`` (final loss, eval, convergence, the loss curve), ``series`` (bounded series),
  ``order_stats`` (exact medians and percentiles over chunks);
* ``node``: :func:`~cvs_tui.core.judge.node.judge_node`, one node's digest;
* ``run``: :func:`~cvs_tui.core.judge.run.judge_run`, the run from the digests, with ``digest_merge``
  (the nodes' window files combined a block at a time), ``metrics`` and ``goodput`` (the run-level
  sections) and ``definitions`` (every metric's definition and unit);
* ``verdicts``: a metric against its threshold spec (PASS, FAIL, RECORD, N/A);
* ``outcome``: complete, failed, hung or interrupted, and the root-cause node;
* ``records`` and ``finalize``: the RunRecord; ``finalize.judge_tables`` is a live run's entry,
  ``finalize_run`` the same for events held in memory; ``facts``: :class:`~cvs_tui.core.judge.facts.RunFacts`,
  what the run's watcher knew that its logs do not say (exit codes, outcome, hosts, times, health, endings),
  built once by the live runner or ``analyze`` and handed down as it is;
* ``checkpoint``: the checkpoint-resume verdicts and the shared loss-agreement rule;
* ``format``: the one number formatter every view uses.

The judge reads a :class:`~cvs_tui.core.plan.Plan`, step tables and events; it never imports the runner.

Nothing is imported here: a view that needs only ``format`` must not pay for the judge (the TUI's
first frame); import from the modules.
"""
