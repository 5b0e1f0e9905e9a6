"""End to end with real MaxText on this machine's CPU: the embedded default configs, run by the real CLI.

Needs the workload environment (`scripts/setup-maxtext.sh`, or `CVS_TUI_MAXTEXT_PYTHON` pointing at a
Python >= 3.12 with MaxText). Each case runs `cvs-tui CONFIG --no-ui` in a subprocess, as a user would,
and checks the run folder it leaves behind.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
LOCAL = ROOT / "configs" / "local"
SINGLE = LOCAL / "cpu_jaxmaxtext_tiny-llama_single.json"
TWOPROC = LOCAL / "cpu_jaxmaxtext_tiny-llama_2proc_distributed.json"
CLI = Path(sys.executable).with_name("cvs-tui")


def _maxtext_python() -> str | None:
    given = os.environ.get("CVS_TUI_MAXTEXT_PYTHON")
    if given and Path(given).exists():
        return given
    venv = ROOT / ".venv-maxtext" / "bin" / "python"
    return str(venv) if venv.exists() else None


MAXTEXT_PY = _maxtext_python()
pytestmark = [
    pytest.mark.slow,
    pytest.mark.maxtext,
    pytest.mark.skipif(
        MAXTEXT_PY is None, reason="no MaxText workload environment: run scripts/setup-maxtext.sh first"
    ),
]


def _variant(src: Path, tmp: Path, edit: dict[str, Any]) -> Path:
    """A copy of a shipped config with some keys changed (threshold file kept where it is)."""
    cfg = json.loads(src.read_text())
    cfg["threshold_json"] = str(src.parent / cfg["threshold_json"])
    for dotted, value in edit.items():
        node = cfg
        *parents, last = dotted.split(".")
        for p in parents:
            node = node[p]
        node[last] = value
    out = tmp / src.name
    out.write_text(json.dumps(cfg, indent=2))
    return out


def _run(config: Path, out: Path, *extra: str, timeout: float = 600) -> tuple[int, dict[str, Any], str]:
    env = dict(os.environ, CVS_TUI_MAXTEXT_PYTHON=str(MAXTEXT_PY))
    proc = subprocess.run(
        [str(CLI), str(config), "--no-ui", "--out", str(out), *extra],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )
    results = json.loads((out / "results.json").read_text()) if (out / "results.json").exists() else {}
    return proc.returncode, results, proc.stdout + proc.stderr


def _run_record(results: dict[str, Any], key: str) -> dict[str, Any]:
    return next(r for r in results["runs"] if r["key"] == key)


def _metric(run: dict[str, Any], name: str) -> float | None:
    return next(m["value"] for m in run["metrics"] if m["name"] == name)


def test_single_node_smoke_sweep_and_checkpoint_resume(tmp_path: Path) -> None:
    cfg = json.loads(SINGLE.read_text())
    first = cfg["runs"][0]
    config = _variant(SINGLE, tmp_path, {"runs": [first]})
    rc, results, output = _run(config, tmp_path / "run")
    assert rc == 0, output[-3000:]
    # the run ends with one verdict line that links the report
    report = (tmp_path / "run" / "report.html").resolve()
    assert "suite PASSED" in output and f"file://{report}" in output and report.exists()

    keys = [r["key"] for r in results["runs"]]
    assert keys == ["SMOKE", first, "CKPT-1", "CKPT-2", "CKPT-REF"]
    sweep = _run_record(results, first)
    steps = cfg["sweeps"][first].get("steps", cfg["train_params"]["maxtext_config"]["steps"])
    assert sweep["status"] == "PASS" and sweep["outcome"] == "complete"
    node = sweep["nodes"][0]
    assert node["last_step"] == steps - 1 and node["exit_code"] == 0
    losses = [p["loss"] for p in node["steps"]]
    assert all(math.isfinite(x) for x in losses) and losses[-1] < losses[0]
    tok = _metric(sweep, "training.tokens_per_sec_per_gpu")
    assert tok is not None and tok > 0
    assert sweep["window"]["status"] == "ok" and len(sweep["window"]["steps"]) >= 5

    # checkpoint resume: phase 2 restored the step-5 checkpoint, resumed at step 6, and its losses match
    # the uninterrupted reference run step for step
    p2 = _run_record(results, "CKPT-2")
    ref = _run_record(results, "CKPT-REF")
    assert p2["status"] == "PASS", p2["verdicts"]
    p2_steps = {p["step"]: p["loss"] for p in p2["nodes"][0]["steps"]}
    ref_steps = {p["step"]: p["loss"] for p in ref["nodes"][0]["steps"]}
    assert min(p2_steps) == 6
    for s, loss in p2_steps.items():
        assert abs(loss - ref_steps[s]) <= 1e-6 + 0.01 * abs(ref_steps[s])
    assert any(c["action"] == "restore_done" for c in p2["nodes"][0]["checkpoints"])
    statuses = {v["metric"]: v["status"] for v in p2["verdicts"]}
    assert statuses["checkpoint.resumed"] == statuses["checkpoint.sentinel_losses"] == "PASS"

    # side effects stay in the run folder; the node log copy is byte-identical to what the node wrote
    run_dir = tmp_path / "run"
    assert (run_dir / "logs" / sweep["slug"] / "node0.log").read_bytes().endswith(b"EXIT_CODE=0\n")
    events = [json.loads(x) for x in (run_dir / "events.jsonl").read_text().splitlines()]
    assert events[-1]["type"] == "SuiteEndEvent" and events[-1]["passed"] is True


def test_two_processes_with_jax_distributed(tmp_path: Path) -> None:
    config = _variant(TWOPROC, tmp_path, {"smoke.enabled": False, "checkpoint_resume.enabled": False})
    rc, results, output = _run(config, tmp_path / "run", "--nodes", "localhost,localhost")
    assert rc == 0, output[-3000:]
    (run,) = [r for r in results["runs"] if r["kind"] == "sweep"]
    assert run["status"] == "PASS" and len(run["nodes"]) == 2
    for node in run["nodes"]:
        assert node["exit_code"] == 0 and node["last_step"] == run["total_steps"] - 1
    assert run["environment"]["num_devices"] == 2
    eff = _metric(run, "training.scaling_efficiency_pct")
    assert eff is not None and eff > 0
    total = _metric(run, "training.tokens_per_sec_total")
    per = _metric(run, "training.tokens_per_sec_per_gpu")
    assert total == pytest.approx(2 * per, rel=1e-6)


def test_nan_loss_fails_with_the_reason(tmp_path: Path) -> None:
    config = _variant(
        SINGLE,
        tmp_path,
        {
            "smoke.enabled": False,
            "checkpoint_resume.enabled": False,
            "runs": [json.loads(SINGLE.read_text())["runs"][0]],
            "train_params.maxtext_config.learning_rate": 1e6,
        },
    )
    rc, results, output = _run(config, tmp_path / "run")
    assert rc == 1, output[-3000:]
    (run,) = results["runs"]
    assert run["status"] == "FAIL" and run["outcome"] == "failed"
    assert "nan" in run["reason"].lower()
    final = next(m for m in run["metrics"] if m["name"] == "training.final_loss")
    assert final["value"] is None and final["absent"] == "non_finite"


def test_bad_maxtext_key_is_refused_before_anything_starts(tmp_path: Path) -> None:
    """The local MaxText is the trainer here, so its base.yml decides: an unknown key is a config error
    with did-you-mean, exit 2, and nothing is launched (before, MaxText itself failed at start-up)."""
    config = _variant(
        SINGLE,
        tmp_path,
        {
            "smoke.enabled": True,
            "checkpoint_resume.enabled": False,
            "train_params.maxtext_config.per_device_batch_sise": 1,
        },
    )
    rc, results, output = _run(config, tmp_path / "run")
    assert rc == 2, output[-3000:]
    assert "train_params.maxtext_config.per_device_batch_sise: not a MaxText setting" in output
    assert "did you mean 'per_device_batch_size'?" in output
    assert results == {} and "Traceback" not in output
