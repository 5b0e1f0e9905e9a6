"""Judging one world input the way `cvs-tui analyze` does: a copy of the shipped local config, planned to
what the input says about itself (steps, batch, sequence length, devices per node), with every threshold
recording (the world's logs carry no gates)."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from cvs_tui.core.cluster import local_cluster
from cvs_tui.core.config.loader import LoadedConfig, load_config
from cvs_tui.core.config.thresholds import GATED_METRICS
from cvs_tui.core.plan import PlannedRun, build_plan
from cvs_tui.core.results import RunRecord
from cvs_tui.core.sources.inputs import planned_run
from cvs_tui.core.sources.offline import analyze_paths

REPO = Path(__file__).resolve().parents[2]
LOCAL_SINGLE = REPO / "configs/local/cpu_jaxmaxtext_tiny-llama_single.json"


def sweep_key(batch: int, seq: int) -> str:
    return f"BS={batch},PRECISION=BF16,SL={seq}"


def load_planned(
    tmp: Path,
    *,
    steps: int,
    batch: int | None = None,
    seq: int | None = None,
    gpus_per_node: int | None = None,
) -> tuple[LoadedConfig, str]:
    """The local config planned for one run of ``steps`` steps; ``batch``/``seq``/``gpus_per_node`` left
    None keep the config's own values (what a user's config would hold when the log does not say)."""
    doc: dict[str, Any] = json.loads(LOCAL_SINGLE.read_text())
    doc["train_params"]["python"] = "python3"
    mt = doc["train_params"]["maxtext_config"]
    key = sweep_key(batch or int(mt["per_device_batch_size"]), seq or int(mt["max_target_length"]))
    doc["sweeps"] = {key: {"steps": steps}}
    doc["runs"] = [key]
    mt["steps"] = steps
    if gpus_per_node is not None:
        doc["gpus_per_node"] = gpus_per_node
    info = {"kind": "info", "value": 0}
    (tmp / doc["threshold_json"]).write_text(json.dumps({key: dict.fromkeys(GATED_METRICS, info)}))
    path = tmp / LOCAL_SINGLE.name
    path.write_text(json.dumps(doc))
    return load_config(path), key


def analyze_log(log: Path, **plan: Any) -> RunRecord:
    """The run record `cvs-tui analyze` writes for one node log."""
    with tempfile.TemporaryDirectory(prefix="cvs-world-") as tmp:
        loaded, key = load_planned(Path(tmp), **plan)
        return analyze_paths(loaded, [log], key).runs[0]


def planned(tmp: Path, steps: int) -> PlannedRun:
    """One planned run of the local config (for judging events directly, as a live run does)."""
    loaded, key = load_planned(tmp, steps=steps)
    plan = build_plan(loaded, local_cluster(1), out_dir=tmp, run_id="world")
    return planned_run(plan, key)
