"""End to end through Slurm with real MaxText on the CPU: two ranks, one per Slurm node, one job step.

`cvs-tui CONFIG --slurm --slurm-args '-N 2'` runs as a user on a login node would, inside the Slurm
cluster's network namespace (``.ci/slurm.sh up``), which also keeps MaxText's fixed CPU coordinator port
(1234) off the host's loopback. Needs the MaxText workload environment (`CVS_TUI_MAXTEXT_PYTHON` or the
repo's .venv-maxtext).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from _slurm_infra import needs_slurm, slurm
from _slurm_suite import cli_argv, cli_env, squeue_jobs
from test_e2e_local_maxtext import MAXTEXT_PY, TWOPROC, _metric, _variant

pytestmark = [
    *needs_slurm,
    pytest.mark.maxtext,
    pytest.mark.skipif(
        MAXTEXT_PY is None, reason="no MaxText workload environment: run scripts/setup-maxtext.sh"
    ),
]


def test_two_ranks_of_real_maxtext_through_srun(tmp_path: Path) -> None:
    config = _variant(TWOPROC, tmp_path, {"smoke.enabled": False, "checkpoint_resume.enabled": False})
    out = tmp_path / "run"
    argv = cli_argv(
        str(config), "--slurm", "--slurm-args", "-N 2 -J cvs-e2e-maxtext", "--no-ui", "--out", str(out)
    )
    env = dict(cli_env(), CVS_TUI_MAXTEXT_PYTHON=str(MAXTEXT_PY))
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=900)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-3000:]
    plan = json.loads((out / "plan.json").read_text())
    assert plan["launcher"] == "slurm" and plan["slurm"]["nodes"] == slurm().nodes[:2]
    results = json.loads((out / "results.json").read_text())
    (run,) = [r for r in results["runs"] if r["kind"] == "sweep"]
    assert run["status"] == "PASS" and len(run["nodes"]) == 2
    for node in run["nodes"]:
        assert node["exit_code"] == 0 and node["last_step"] == run["total_steps"] - 1
    assert run["environment"]["num_devices"] == 2
    total = _metric(run, "training.tokens_per_sec_total")
    per = _metric(run, "training.tokens_per_sec_per_gpu")
    assert total == pytest.approx(2 * per, rel=1e-6)
    # each rank ran in the job step on its own Slurm node, and its log is in the run folder byte for byte
    for rank in (0, 1):
        where = (out / "slurm" / run["slug"] / f"node{rank}.slurm").read_text().split()[0]
        assert where == slurm().nodes[rank]
        own = (out / "slurm" / run["slug"] / f"node{rank}.log").read_bytes()
        assert (out / "logs" / run["slug"] / f"node{rank}.log").read_bytes() == own
        assert own.endswith(b"EXIT_CODE=0\n")
    assert not [j for j in squeue_jobs() if "cvs-e2e-maxtext" in j]
