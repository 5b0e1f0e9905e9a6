"""The maxtext_setup stage on the local node: branch checkout and install command, then the runs.

The trainer is the stand-in (`tests/suite_fixtures/standin_trainer.sh`): this test is about the set-up
stage and what it gates, not training. The MaxText checkout is a real git repository with two branches.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

FIX = Path(__file__).resolve().parents[1] / "suite_fixtures"
CLI = Path(sys.executable).with_name("cvs-tui")
SWEEP = "BS=1,PRECISION=BF16,SL=128"
pytestmark = [pytest.mark.slow, pytest.mark.skipif(shutil.which("git") is None, reason="needs git")]


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True
    ).stdout.strip()


def _setup(tmp: Path, branch: str) -> tuple[Path, Path]:
    repo = tmp / "maxtext"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "config", "user.email", "ci@example.invalid")
    _git(repo, "config", "user.name", "ci")
    (repo / "README").write_text("main\n")
    _git(repo, "add", "README")
    _git(repo, "commit", "-q", "-m", "main")
    _git(repo, "checkout", "-q", "-b", "release/v1")
    (repo / "README").write_text("release\n")
    _git(repo, "commit", "-q", "-am", "release")
    _git(repo, "checkout", "-q", "main")
    (repo / "README").write_text("local edit the checkout must discard\n")

    node = tmp / "node"
    (node / "bin").mkdir(parents=True)
    shutil.copy(FIX / "standin_trainer.sh", node / "bin" / "standin_trainer.sh")
    cfg = json.loads((FIX / "standin_distributed.json").read_text())
    cfg["paths"]["shared_fs"] = str(node)
    cfg["container"]["runtime"] = {"name": "host", "args": {}}
    cfg["train_params"]["maxtext_root"] = str(repo)
    cfg["train_params"]["maxtext_branch"] = branch
    cfg["train_params"]["maxtext_install_cmd"] = "touch installed.marker"
    cfg["smoke"]["enabled"] = False
    cfg["threshold_json"] = str(FIX / "standin_distributed_threshold.json")
    path = tmp / "setup.json"
    path.write_text(json.dumps(cfg))
    return path, repo


def _run(config: Path, out: Path) -> tuple[int, dict]:  # type: ignore[type-arg]
    p = subprocess.run(
        [str(CLI), str(config), "--nodes", "localhost", "--no-ui", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    return p.returncode, json.loads((out / "results.json").read_text())


def test_branch_checkout_and_install_then_the_run(tmp_path: Path) -> None:
    config, repo = _setup(tmp_path, "release/v1")
    rc, res = _run(config, tmp_path / "run")
    stages = {s["name"]: s for s in res["stages"]}
    assert stages["maxtext_setup"]["state"] == "passed", stages["maxtext_setup"]
    assert _git(repo, "rev-parse", "--abbrev-ref", "HEAD") == "release/v1"
    assert (repo / "README").read_text() == "release\n"  # the local edit was reset away
    assert (repo / "installed.marker").exists()  # the install command ran in maxtext_root
    assert stages[f"run:{SWEEP}"]["state"] == "passed" and rc == 0


def test_unknown_branch_fails_setup_and_skips_the_runs(tmp_path: Path) -> None:
    config, repo = _setup(tmp_path, "no-such-branch")
    rc, res = _run(config, tmp_path / "run")
    stages = {s["name"]: s for s in res["stages"]}
    assert stages["maxtext_setup"]["state"] == "failed"
    assert stages[f"run:{SWEEP}"]["state"] == "skipped" and res["runs"] == []
    assert not (repo / "installed.marker").exists()
    assert rc == 1
