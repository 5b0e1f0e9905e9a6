"""cvs-tui inside `sbatch --wrap`, followed from the login node with `cvs-tui attach` (real Slurm).

The trainer is the stand-in of tests/suite_fixtures (a test double for MaxText only: this is about
where cvs-tui runs and how a user follows it).
"""

from __future__ import annotations

import json
import shlex
import subprocess
import time
from pathlib import Path

from _slurm_infra import needs_slurm, slurm
from _slurm_suite import CLI, cli_env, make_setup, squeue_jobs
from suite_fixtures.helpers import SWEEP

pytestmark = needs_slurm


def test_cvs_tui_inside_sbatch_is_followed_by_attach(tmp_path: Path) -> None:
    s = make_setup(tmp_path, env={"CVS_STANDIN_STEP_SLEEP": "0.3"}, steps=12)
    wrap = shlex.join([str(CLI), str(s.config), "--slurm", "--no-ui", "--out", str(s.out)])
    job = (
        slurm()
        .cmd(
            "env",
            f"SLURM_CONF={slurm().conf}",
            "sbatch",
            "--parsable",
            "-N",
            "2",
            "-J",
            "cvs-sbatch-attach",
            f"--output={tmp_path}/batch.out",
            "--wrap",
            wrap,
        )
        .strip()
    )
    try:
        end = time.monotonic() + 60
        while not (s.out / "events.jsonl").exists():
            assert time.monotonic() < end, (tmp_path / "batch.out").read_text()
            time.sleep(0.1)
        # attach from the login node (outside the allocation, outside the namespace: it only reads files)
        p = subprocess.run(
            [str(CLI), "attach", str(s.out), "--no-ui"],
            capture_output=True,
            text=True,
            timeout=180,
            env=cli_env(),
        )
        assert p.returncode == 0, p.stdout + p.stderr + (tmp_path / "batch.out").read_text()
        assert SWEEP in p.stdout and "PASS" in p.stdout, p.stdout
        plan = json.loads((s.out / "plan.json").read_text())
        assert plan["slurm"] == {
            "job_id": job,
            "nodes": ["node1", "node2"],
            "salloc_args": [],
            "owned": False,
        }
        rec = {r["key"]: r for r in json.loads((s.out / "results.json").read_text())["runs"]}[SWEEP]
        assert rec["status"] == "PASS" and [n["last_step"] for n in rec["nodes"]] == [11, 11]
        end = time.monotonic() + 30
        while [j for j in squeue_jobs() if j.split()[0] == job]:  # the batch job ends with cvs-tui
            assert time.monotonic() < end, squeue_jobs()
            time.sleep(0.2)
    finally:
        slurm().cmd("env", f"SLURM_CONF={slurm().conf}", "scancel", job)
