"""Every exported series once: its name, kind, labels and help. At most 12 series per node and run.

Per node (the run being watched only, so a suite's earlier runs do not pile up): labels ``run``,
``config``, ``rank``, ``host``, plus ``severity`` or ``state`` where named (both from fixed sets). Per node
over the whole suite (kernel-log health): ``config``, ``rank``, ``host``. Per run (every run of the plan,
a bounded list): ``run``, ``config``. No label takes a free-form value: host names come from the plan (or
their pseudonyms under ``--public``), never from a log.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from cvs_tui.core.events import NodeState, RunOutcome, Severity

NODE_LABELS = ("run", "config", "rank", "host")
HEALTH_LABELS = ("config", "rank", "host")
RUN_LABELS = ("run", "config")
VERDICT_STATUSES = ("PASS", "FAIL", "RECORD", "N/A")
RUN_STATES = ("running", *(o.value for o in RunOutcome))
NODE_STATES = tuple(s.value for s in NodeState)
SEVERITIES = tuple(s.value for s in Severity)


@dataclass(frozen=True)
class Series:
    name: str
    scope: Literal["node", "health", "run"]
    help: str
    extra: str | None = None  # a further label with a fixed set of values
    values: tuple[str, ...] = ()  # that set
    one_of: bool = False  # one sample at a time (the current value of ``extra``), not one per value

    @property
    def labels(self) -> tuple[str, ...]:
        base = {"node": NODE_LABELS, "health": HEALTH_LABELS, "run": RUN_LABELS}[self.scope]
        return (*base, self.extra) if self.extra else base

    @property
    def per_node(self) -> int:
        """Samples this series has for one node (0 for a run series)."""
        if self.scope == "run":
            return 0
        return 1 if not self.extra or self.one_of else len(self.values)


SERIES: tuple[Series, ...] = (
    Series("cvs_tui_node_last_step", "node", "Latest step the node logged."),
    Series(
        "cvs_tui_node_steps_per_second",
        "node",
        "Steps per second from the node's logged step times (1 / median of its latest 16).",
    ),
    Series(
        "cvs_tui_node_tokens_per_second", "node", "Tokens per second per device logged at the latest step."
    ),
    Series(
        "cvs_tui_node_step_seconds_p95", "node", "95th percentile of the node's latest 64 logged step times."
    ),
    Series(
        "cvs_tui_node_seconds_since_last_step",
        "node",
        "Seconds since the node's latest step arrived (only while it trains or is stalled).",
    ),
    Series("cvs_tui_node_lag_steps", "node", "Steps this node is behind the median node (negative: ahead)."),
    Series(
        "cvs_tui_node_stall_seconds",
        "node",
        "Logged seconds of the node's steps the judge found to be stalls (0 until the run is judged).",
    ),
    Series(
        "cvs_tui_node_error_hits",
        "node",
        "Error signatures matched in the node's log, by severity.",
        "severity",
        SEVERITIES,
    ),
    Series(
        "cvs_tui_node_state", "node", "The node's state (1 for the current one).", "state", NODE_STATES, True
    ),
    Series(
        "cvs_tui_node_health_findings",
        "health",
        "Kernel-log health findings on the node over the suite, by severity.",
        "severity",
        SEVERITIES,
    ),
    Series("cvs_tui_run_state", "run", "The run's state (1 for the current one).", "state", RUN_STATES, True),
    Series(
        "cvs_tui_run_verdicts", "run", "The run's metric verdicts, by status.", "status", VERDICT_STATUSES
    ),
    Series("cvs_tui_run_total_steps", "run", "Steps the run is planned to take."),
    Series("cvs_tui_run_start_time_seconds", "run", "When the run started (seconds since the epoch)."),
    Series("cvs_tui_run_end_time_seconds", "run", "When the run ended (seconds since the epoch)."),
    Series(
        "cvs_tui_run_goodput_ratio",
        "run",
        "The run's goodput (its lowest node's, 0-1) once the run is judged.",
    ),
)

BY_NAME = {s.name: s for s in SERIES}
SERIES_PER_NODE = sum(s.per_node for s in SERIES)
MAX_SERIES_PER_NODE = 12
assert SERIES_PER_NODE <= MAX_SERIES_PER_NODE, SERIES_PER_NODE
