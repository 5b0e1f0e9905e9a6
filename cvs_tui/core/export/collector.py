"""The series of :mod:`cvs_tui.core.export.series`, built from a :class:`LiveRun` when Prometheus scrapes.

Nothing is computed between scrapes: :meth:`RunCollector.collect` walks the folded run state once per
scrape (the node series for the run being watched, the health series for every node, the run series for
every run of the plan) and yields one metric family per series. Under ``public`` every host label is the
pseudonym the ``--public`` scrubber gives it (``<host-1>``, ...).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterator

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from cvs_tui.core.events import NodeState, Severity
from cvs_tui.core.export.live import LiveRun
from cvs_tui.core.export.series import SERIES, VERDICT_STATUSES
from cvs_tui.core.state import RunView
from cvs_tui.core.watch.watchdog import p95

GOODPUT_METRIC = "training.goodput_pct"
RATE_STEPS = 16  # latest step times the steps-per-second figure is the median of
# a node in these states is still expected to log steps: its time since the last one means something
_ACTIVE = frozenset({NodeState.TRAINING, NodeState.STALLED})


class RunCollector(Collector):
    """A prometheus_client collector over ``live``; ``config`` is the ``config`` label of every series."""

    def __init__(self, live: LiveRun, *, config: str, public: bool = False) -> None:
        self.live = live
        self.config = config
        self._hosts: Callable[[str], str] = _pseudonyms() if public else str

    def describe(self) -> list[Metric]:
        """Names only (the registry checks them for clashes without a scrape)."""
        return [GaugeMetricFamily(s.name, s.help, labels=s.labels) for s in SERIES]

    def collect(self) -> Iterator[Metric]:
        fam = {s.name: GaugeMetricFamily(s.name, s.help, labels=s.labels) for s in SERIES}
        state = self.live.state
        config = self.config
        runs = [state.runs[k] for k in list(state.run_order)]
        current = state.current_run
        for rv in runs:
            self._run(fam, rv)
        if current is not None:  # the run being watched (or, after the suite, the last one)
            self._nodes(fam, current, self.live.clock() if current.outcome is None else None)
        for rank, hv in sorted(dict(state.health).items()):
            labels = [config, str(rank), self._hosts(hv.host)]
            fam["cvs_tui_node_health_findings"].add_metric([*labels, Severity.FATAL.value], hv.fatal)
            fam["cvs_tui_node_health_findings"].add_metric([*labels, Severity.WARNING.value], hv.warnings)
        yield from fam.values()

    def _run(self, fam: dict[str, GaugeMetricFamily], rv: RunView) -> None:
        labels = [rv.key, self.config]
        state = rv.outcome.value if rv.outcome is not None else "running"
        fam["cvs_tui_run_state"].add_metric([*labels, state], 1.0)
        verdicts = list(dict(rv.verdicts).values())
        for status in VERDICT_STATUSES:
            count = sum(v.status == status for v in verdicts)
            fam["cvs_tui_run_verdicts"].add_metric([*labels, status], count)
        if rv.total_steps:
            fam["cvs_tui_run_total_steps"].add_metric(labels, rv.total_steps)
        if rv.started_at is not None:
            fam["cvs_tui_run_start_time_seconds"].add_metric(labels, rv.started_at)
        if rv.ended_at is not None:
            fam["cvs_tui_run_end_time_seconds"].add_metric(labels, rv.ended_at)
        goodput = rv.verdicts.get(GOODPUT_METRIC)
        if goodput is not None and goodput.actual is not None and math.isfinite(goodput.actual):
            fam["cvs_tui_run_goodput_ratio"].add_metric(labels, goodput.actual / 100.0)

    def _nodes(self, fam: dict[str, GaugeMetricFamily], rv: RunView, now: float | None) -> None:
        """The node series of ``rv``; ``now`` is None once the run has ended (no time since a step)."""
        nodes = sorted(dict(rv.nodes).items())
        steps = [nv.step for _, nv in nodes if nv.step is not None]
        median = statistics.median(steps) if steps else None
        last_step_at = self.live.last_step_at
        add = {s.name: fam[s.name].add_metric for s in SERIES if s.scope == "node"}
        for rank, nv in nodes:
            labels = [rv.key, self.config, str(rank), self._hosts(nv.host)]
            add["cvs_tui_node_state"]([*labels, nv.state.value], 1.0)
            add["cvs_tui_node_error_hits"]([*labels, Severity.FATAL.value], nv.fatal_hits)
            add["cvs_tui_node_error_hits"]([*labels, Severity.WARNING.value], nv.error_hits - nv.fatal_hits)
            add["cvs_tui_node_stall_seconds"](labels, sum(dict(nv.stalls).values()))
            if nv.step is None:
                continue
            add["cvs_tui_node_last_step"](labels, nv.step)
            if median is not None:
                add["cvs_tui_node_lag_steps"](labels, median - nv.step)
            times = list(nv.step_times)
            if times:
                add["cvs_tui_node_steps_per_second"](labels, 1.0 / statistics.median(times[-RATE_STEPS:]))
                add["cvs_tui_node_step_seconds_p95"](labels, p95(times))
            if nv.tokens_per_s is not None and math.isfinite(nv.tokens_per_s):
                add["cvs_tui_node_tokens_per_second"](labels, nv.tokens_per_s)
            at = last_step_at.get((rv.key, rank))
            if now is not None and at is not None and nv.state in _ACTIVE:
                add["cvs_tui_node_seconds_since_last_step"](labels, max(0.0, now - at))


def _pseudonyms() -> Callable[[str], str]:
    """Host name -> the ``--public`` scrubber's placeholder for it, the same one on every scrape."""
    from cvs_tui.core.privacy.scrubber import Scrubber

    scrubber = Scrubber()
    return lambda host: scrubber.placeholder("host", host) if host else ""
