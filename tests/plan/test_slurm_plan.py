"""`--slurm` planning without a cluster: what will be requested, the rank map, and the one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cvs_tui.cli.main import main
from cvs_tui.core.errors import UserError
from cvs_tui.core.runner.slurm.target import requested_nodes, slurm_args_or_none

TWOPROC = (
    Path(__file__).resolve().parents[2] / "configs/local/cpu_jaxmaxtext_tiny-llama_2proc_distributed.json"
)


@pytest.fixture(autouse=True)
def _outside_slurm(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("SLURM_JOB_ID", "SLURM_JOBID", "SLURM_JOB_NODELIST"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("CVS_TUI_MAXTEXT_PYTHON", "/usr/bin/python3")


def test_plan_outside_an_allocation_shows_the_request_and_rank_map(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["plan", str(TWOPROC), "--slurm", "--slurm-args", "-N 2 -p debug --time=10"]) == 0
    out = capsys.readouterr().out
    assert "will request: salloc --no-shell -N 2 -p debug --time=10  (released at the end)" in out
    assert "rank 0  node 1 of the allocation" in out and "rank 1  node 2 of the allocation" in out
    assert "runtime host under Slurm" in out and "release the allocation (scancel)" in out


def test_plan_json_carries_the_launcher_and_the_request(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", str(TWOPROC), "--slurm", "--slurm-args=--nodes=2", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["launcher"] == "slurm"
    assert d["slurm"] == {"job_id": None, "nodes": [], "salloc_args": ["--nodes=2"], "owned": True}
    assert len(d["nodes"]) == 2


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--slurm"], "not inside a Slurm allocation"),
        (["--slurm", "--slurm-args", "-p debug"], "no node count; add -N"),
        (["--slurm", "--slurm-args", "-N two"], "give the node count as one number"),
        (["--slurm", "--slurm-args", "--jobid=3 -N 2"], "--jobid=3 is set by cvs-tui"),
        (["--slurm-args", "-N 2"], "only with --slurm"),
    ],
)
def test_bad_slurm_arguments_are_one_line_errors(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["plan", str(TWOPROC), *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err


def test_slurm_args_inside_an_allocation_are_refused() -> None:
    with pytest.raises(UserError, match="runs inside Slurm job 42"):
        slurm_args_or_none("-N 2", {"SLURM_JOB_ID": "42"})
    assert slurm_args_or_none(None, {"SLURM_JOB_ID": "42"}) is None


def test_requested_nodes_forms() -> None:
    assert requested_nodes(["-N", "3"]) == requested_nodes(["-N3"]) == requested_nodes(["--nodes=3"]) == 3
