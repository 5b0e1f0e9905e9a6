"""Every shipped config loads once its <changeme> tags are replaced the way a user would, and plans correctly.

Configs are found by globbing `configs/` and `configs/local/`, so a new shipped file is covered as soon as
it lands. For a `mi3xx_*` config, each platform threshold file it can point at is tried.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from cvs_tui.core.cluster import cluster_from_nodes_arg, local_cluster
from cvs_tui.core.config.loader import DISTRIBUTED_ENV_VARS, find_changeme, load_config
from cvs_tui.core.config.model import dump_config
from cvs_tui.core.config.shipped import list_shipped, shipped_configs_dir, sibling_thresholds
from cvs_tui.core.config.sweeps import fp8_flavor
from cvs_tui.core.errors import UserError
from cvs_tui.core.plan import build_plan

REFERENCE_CONFIGS = [
    "mi3xx_jaxmaxtext_llama-3.1-8b_distributed",
    "mi3xx_jaxmaxtext_llama-3.1-70b_single",
    "mi3xx_jaxmaxtext_llama-3.1-70b_distributed",
    "mi3xx_jaxmaxtext_llama-3.3-70b_single",
    "mi3xx_jaxmaxtext_llama-3.3-70b_distributed",
    "mi3xx_jaxmaxtext_deepseek-v2-lite_distributed",
    "mi3xx_jaxmaxtext_llama-3.1-405b_distributed",
    "mi3xx_jaxmaxtext_deepseek-v4-284b_distributed",
    "mi35x_jaxmaxtext_llama-3.1-70b_single",
]
TAG = re.compile(r"\s*<changeme>\s*", re.I)


def _cases() -> list[tuple[str, Path, Path]]:
    cases = []
    for name, path in list_shipped():
        raw = json.loads(path.read_text(encoding="utf-8"))
        given = raw.get("threshold_json") if isinstance(raw.get("threshold_json"), str) else None
        thresholds = sibling_thresholds(path, given) or [path]  # [path]: lets the test report the gap
        for thr in thresholds:
            cases.append((name, path, thr))
    return cases


CASES = _cases()


def _untag(node: Any) -> Any:
    """What a user does: keep the shipped example value and drop the tag."""
    if isinstance(node, dict):
        return {k: _untag(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_untag(v) for v in node]
    if isinstance(node, str):
        return TAG.sub("", node)
    return node


def _prepared(tmp_path: Path, config: Path, threshold: Path) -> Path:
    raw = json.loads(config.read_text(encoding="utf-8"))
    cfg = _untag(raw)
    cfg["threshold_json"] = threshold.name
    shutil.copyfile(threshold, tmp_path / threshold.name)
    out = tmp_path / config.name
    out.write_text(json.dumps(cfg, indent=2), encoding="utf-8")
    return out


@pytest.fixture(autouse=True)
def _maxtext_python(monkeypatch: pytest.MonkeyPatch) -> None:
    # configs/local names the MaxText interpreter with {env.CVS_TUI_MAXTEXT_PYTHON}
    monkeypatch.setenv("CVS_TUI_MAXTEXT_PYTHON", "/opt/maxtext-venv/bin/python")


def test_the_reference_configs_ship() -> None:
    names = {n for n, _ in list_shipped()}
    missing = [n for n in REFERENCE_CONFIGS if n not in names]
    assert not missing, f"missing from {shipped_configs_dir()}: {missing}"


@pytest.mark.parametrize(("name", "config", "threshold"), CASES, ids=[f"{n}+{t.name}" for n, _, t in CASES])
def test_shipped_config_loads_and_plans(tmp_path: Path, name: str, config: Path, threshold: Path) -> None:
    assert threshold.name.endswith("_threshold.json"), f"{name}: no threshold file ships with it"
    path = _prepared(tmp_path, config, threshold)
    loaded = load_config(path, user="alice")
    cfg = loaded.config
    assert loaded.preflight_errors == []
    assert loaded.runs, name
    assert not find_changeme(dump_config(cfg))
    # every placeholder resolved, but {run_dir}: the plan fills that in
    assert not any("{" in v.replace("{run_dir}", "") for v in cfg.paths.as_dict().values())

    # the mode follows the file name
    assert loaded.mode == ("distributed" if config.stem.endswith("_distributed") else "single")
    if loaded.mode == "distributed" and cfg.container.runtime.name == "docker":
        assert all(cfg.container.env.get(k) for k in DISTRIBUTED_ENV_VARS)
    cluster = (
        local_cluster()
        if loaded.mode == "single"
        else cluster_from_nodes_arg("localhost,localhost" if "local/" in name else "h1,h2", user="alice")
    )
    plan = build_plan(loaded, cluster, out_dir=tmp_path / "run", run_id="RID")
    assert "{run_dir}" not in json.dumps(plan.display_dict())
    if "local/" in name:  # the embedded default writes nothing outside its run folder
        run_dir = str((tmp_path / "run").resolve())
        assert all(r.base_output_directory.startswith(run_dir) for r in plan.runs)

    for run in loaded.runs:
        # every selected sweep has its threshold cell, and its key's precision reached MaxText
        assert run.key in loaded.thresholds, f"{threshold.name} has no cell for {run.key}"
        quant = run.maxtext_config["quantization"]
        if "PRECISION=FP8" in run.key:
            assert quant == fp8_flavor(cfg.gpu_name)
        if "PRECISION=BF16" in run.key:
            assert quant == ""
        assert "PRECISION=FP8" not in run.key or not cfg.gpu_name.startswith("mi35") or quant == "fp8"
    for planned in plan.runs:
        assert yaml.safe_load(planned.yaml_text) == planned.maxtext_config
        assert planned.maxtext_config["run_name"] == planned.run_name
        assert planned.base_output_directory.startswith(plan.paths["log_dir"] + "/RID/")
        assert ("XLA_FLAGS" in planned.env) == bool(cfg.train_params.xla_flags)
        assert len(planned.node_env) == len(cluster.nodes)
    names = [s.name for s in plan.stages]
    assert names[:7] == [
        "preflight",
        "node_health",
        "launch_container",
        "rdma",
        "tokenizer",
        "maxtext_setup",
        "smoke",
    ]
    assert names[-3:] == ["checkpoint_resume", "report", "teardown"]
    assert plan.stage("smoke").enabled == cfg.smoke.enabled
    synthetic = all(r.maxtext_config.get("dataset_type") == "synthetic" for r in plan.runs)
    assert plan.stage("tokenizer").enabled is not synthetic

    # a valid config round-trips without loss
    again = tmp_path / "again.json"
    again.write_text(json.dumps(dump_config(cfg)), encoding="utf-8")
    assert load_config(again, user="bob").config == cfg


@pytest.mark.parametrize("name", [n for n in REFERENCE_CONFIGS if n.endswith("_distributed")])
def test_shipped_distributed_configs_refuse_to_load_while_tagged(name: str) -> None:
    path = shipped_configs_dir() / f"{name}.json"
    if not path.exists():
        pytest.fail(f"{path} does not exist")
    with pytest.raises(UserError) as exc:
        load_config(path, user="alice")
    tagged_env = {line.split(":")[0] for line in exc.value.problems if line.startswith("container.env.")}
    assert tagged_env == {f"container.env.{k}" for k in DISTRIBUTED_ENV_VARS}


def test_shipped_image_tag_is_a_preflight_error() -> None:
    path = shipped_configs_dir() / "mi35x_jaxmaxtext_llama-3.1-70b_single.json"
    if not path.exists():
        pytest.fail(f"{path} does not exist")
    raw = json.loads(path.read_text(encoding="utf-8"))
    assert "<changeme>" in raw["container"]["image"]
    try:
        loaded = load_config(path, user="alice")
    except UserError as exc:  # any other tag must be reported as a load error, not the image
        assert not any(line.startswith("container.image") for line in exc.value.problems)
        return
    assert [line.split(":")[0] for line in loaded.preflight_errors] == ["container.image"]
