"""Shared builders for the analysis, results and report tests: a local config copy and synthetic events."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cvs_tui.core.cluster import local_cluster
from cvs_tui.core.config.loader import LoadedConfig, load_config
from cvs_tui.core.config.thresholds import GATED_METRICS
from cvs_tui.core.events import (
    DevicesEvent,
    ErrorHit,
    LogEvent,
    Severity,
    StepEvent,
    SystemInfoEvent,
    TflopsPerStepEvent,
)
from cvs_tui.core.judge.facts import RunFacts
from cvs_tui.core.judge.finalize import base_results, finalize_run
from cvs_tui.core.plan import Plan, PlannedRun, build_plan
from cvs_tui.core.results import Results
from cvs_tui.core.sources.inputs import planned_run

REPO = Path(__file__).resolve().parents[1]
LOCAL_SINGLE = REPO / "configs/local/cpu_jaxmaxtext_tiny-llama_single.json"
LOCAL_2PROC = REPO / "configs/local/cpu_jaxmaxtext_tiny-llama_2proc_distributed.json"
FIXTURES = REPO / "tests/fixtures/maxtext"


def write_config(
    tmp: Path,
    *,
    source: Path = LOCAL_SINGLE,
    steps: int | None = 20,
    runs: list[str] | None = None,
    thresholds: dict[str, Any] | None = None,
    mutate: Callable[[dict[str, Any]], None] | None = None,
) -> Path:
    """A copy of a shipped local config in ``tmp`` that loads without the MaxText interpreter variable."""
    doc = json.loads(source.read_text())
    doc["train_params"]["python"] = "python3"
    if steps is not None:
        for over in doc["sweeps"].values():
            over["steps"] = steps
        doc["train_params"]["maxtext_config"]["steps"] = steps
    if runs is not None:
        doc["runs"] = runs
    # Tests own their thresholds: the shipped files are calibrated and may change. The default records
    # every metric (kind info) for each selected run.
    keys = runs if runs is not None else (doc.get("runs") or list(doc["sweeps"]))
    info = {"kind": "info", "value": 0}
    thr = {k: dict.fromkeys(GATED_METRICS, info) for k in keys}
    if thresholds is not None:
        # Upstream requires every cell to name the gated metrics: record the ones a test leaves out.
        thr = {
            k: {**dict.fromkeys(GATED_METRICS, info), **v} if isinstance(v, dict) else v
            for k, v in thresholds.items()
        }
    if mutate is not None:
        mutate(doc)
    (tmp / doc["threshold_json"]).write_text(json.dumps(thr))
    path = tmp / source.name
    path.write_text(json.dumps(doc))
    return path


def load_local(tmp: Path, **kw: Any) -> LoadedConfig:
    return load_config(write_config(tmp, **kw))


def plan_of(loaded: LoadedConfig, nodes: int = 1) -> Plan:
    """The config's plan for a local cluster, as `analyze` builds it."""
    return build_plan(loaded, local_cluster(nodes), out_dir=loaded.path.parent, run_id="test")


def planned(loaded: LoadedConfig, key: str) -> PlannedRun:
    """One run of the config's plan, by key or slug."""
    return planned_run(plan_of(loaded), key)


def synthetic_node(
    n: int = 20, *, secs: float = 0.03, nan_at: int | None = None, line0: int = 10
) -> list[LogEvent]:
    """A node's events as the parser would emit them for a clean ``n``-step CPU run."""
    evs: list[LogEvent] = [
        SystemInfoEvent("jax", "0.7.2", 1),
        SystemInfoEvent("jaxlib", "0.7.2", 2),
        SystemInfoEvent("backend", "cpu", 3),
        DevicesEvent(1, (1,), 4),
        TflopsPerStepEvent(0.001, 80.0, 20.0, 5),
    ]
    for s in range(n):
        loss = 7.5 - 0.02 * s
        if nan_at is not None and s >= nan_at:
            loss = math.nan
        evs.append(
            StepEvent(
                step=s,
                loss=loss,
                line=line0 + s,
                seconds=2.0 if s == 0 else secs * (1 + 0.1 * math.sin(s)),
                tflops_per_device=0.04,
                tokens_per_device=8000.0,
                total_weights=256.0,
                source="metric_logger.py:265",
            )
        )
    evs.append(
        ErrorHit(
            "cuda_init", Severity.WARNING, "E external/xla/cuda_driver.cc cuInit failed <b>", 6, "benign"
        )
    )
    return evs


def sample_results(loaded: LoadedConfig, *, fail: bool = False) -> Results:
    """Two judged runs (the second NaN-failed when ``fail``) in a Results model."""
    key0 = loaded.runs[0].key
    runs = [finalize_run(planned(loaded, key0), [synthetic_node()], RunFacts(hosts=["localhost"]))]
    if fail and len(loaded.runs) > 1:
        bad = [
            *synthetic_node(nan_at=19),
            ErrorHit("nan_loss", Severity.FATAL, "loss: nan <script>", 29, "always"),
        ]
        runs.append(finalize_run(planned(loaded, loaded.runs[1].key), [bad], RunFacts(hosts=["localhost"])))
    res = base_results(plan_of(loaded), source="analyze", hosts=["localhost"])
    res.runs = runs
    return res
