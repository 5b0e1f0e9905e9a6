"""The suite through Slurm on a real two-node cluster (``.ci/slurm.sh up``): the same verdicts as over SSH.

Real salloc, srun, scancel, slurmstepd and a shared run folder; the trainer is the stand-in of
``tests/suite_fixtures`` (a test double for MaxText only: these tests are about launching, following,
judging and stopping through Slurm; real MaxText through Slurm is tests/e2e/test_e2e_slurm_maxtext.py).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from pathlib import Path

from _slurm_infra import needs_slurm, slurm, stepd_pid
from _slurm_suite import (
    SlurmSetup,
    fast_options,
    make_setup,
    processes_with,
    run_cli,
    run_suite,
    run_suite_async,
    slurm_plan,
    squeue_jobs,
    start_cli,
)
from suite_fixtures.helpers import SLUG, SWEEP

pytestmark = needs_slurm


def _nothing_left(s: SlurmSetup) -> None:
    job = (s.plan().get("slurm") or {}).get("job_id")
    assert not [j for j in squeue_jobs() if job and j.split()[0] == job], squeue_jobs()
    assert processes_with(s.marker()) == []


def _node_states(events: list[dict], run: str = SWEEP) -> dict[int, list[str]]:
    out: dict[int, list[str]] = {}
    for e in events:
        if e["type"] == "NodeStatusEvent" and e["run"] == run:
            out.setdefault(e["node"], []).append(e["state"])
    return out


def _steps_in(path: Path) -> int:
    return path.read_bytes().count(b"completed step:") if path.exists() else 0


def _wait_training(s: SlurmSetup, proc: subprocess.Popen[str]) -> None:
    """Until both ranks logged 5 steps (the CLI still running)."""
    end = time.monotonic() + 60
    while min(_steps_in(s.node_log(r)) for r in (0, 1)) < 5:
        assert proc.poll() is None, proc.communicate()[0]
        assert time.monotonic() < end, "the ranks did not start training"
        time.sleep(0.05)


def test_clean_run_through_slurm_passes_with_verdicts(tmp_path: Path) -> None:
    s = make_setup(tmp_path)
    p = run_cli(s, "--slurm-args", "-N 2 -p debug -J cvs-suite-clean")
    assert p.returncode == 0, p.stdout + p.stderr
    plan = s.plan()
    assert plan["launcher"] == "slurm" and plan["slurm"]["owned"] is True
    assert plan["slurm"]["nodes"] == ["node1", "node2"] and plan["coordinator"] == "127.0.0.11"
    rec = s.run_record()
    assert rec["outcome"] == "complete" and rec["status"] == "PASS"
    assert [n["exit_code"] for n in rec["nodes"]] == [0, 0]
    assert [n["last_step"] for n in rec["nodes"]] == [7, 7]
    verdicts = {v["metric"]: v for v in rec["verdicts"]}
    assert (
        verdicts["training.final_loss"]["status"] == "PASS"
        and verdicts["training.final_loss"]["actual"] == 6.703
    )
    stages = {st["name"]: st["state"] for st in s.results()["stages"]}
    assert stages["preflight"] == stages[f"run:{SWEEP}"] == stages["teardown"] == "passed", stages
    # node health through side steps: each node's kernel log was read (not "not checked")
    health = s.results()["node_health"]
    assert [n["state"] for n in health] == ["ok", "ok"], health
    for rank in (0, 1):
        assert s.copied_log(rank).read_bytes() == s.node_log(rank).read_bytes()
        assert s.node_log(rank).read_bytes().endswith(b"EXIT_CODE=0\n")
        # the rank ran on its own Slurm node (rank 0 = first node of the allocation)
        where = (s.out / "slurm" / SLUG / f"node{rank}.slurm").read_text().split()[0]
        assert where == f"node{rank + 1}"
    _nothing_left(s)


def test_silent_crash_on_rank_1_root_cause_rank_1_rank_0_stopped(tmp_path: Path) -> None:
    s = make_setup(tmp_path, env={"CVS_STANDIN_MODE": "crash", "CVS_STANDIN_FAIL_RANK": "1"})
    suite = run_suite(s)
    assert not suite.results_passed()
    rec = s.run_record()
    assert rec["outcome"] == "failed" and rec["status"] == "FAIL"
    assert rec["root_cause_node"] == 1
    assert "node 1 exited with code 3" in rec["reason"], rec["reason"]
    assert rec["nodes"][1]["exit_code"] == 3
    assert "stopped" in _node_states(s.events())[0]
    assert s.node_log(1).read_bytes().endswith(b"EXIT_CODE=3\n")
    _nothing_left(s)


def test_hang_is_caught_by_the_watchdog(tmp_path: Path) -> None:
    s = make_setup(tmp_path, env={"CVS_STANDIN_MODE": "hang"})
    p = run_cli(
        s, "--slurm-args", "-N 2", "--compile-allowance", "20", "--hang-min", "2", "--hang-factor", "2"
    )
    assert p.returncode == 1, p.stdout + p.stderr
    rec = s.run_record()
    assert rec["outcome"] == "hung" and rec["status"] == "FAIL"
    assert "no progress for" in rec["reason"] and "at least 2 s" in rec["reason"], rec["reason"]
    assert [n["last_step"] for n in rec["nodes"]] == [2, 2]
    _nothing_left(s)


def test_nan_loss_fails(tmp_path: Path) -> None:
    s = make_setup(tmp_path, env={"CVS_STANDIN_MODE": "nan"})
    run_suite(s)
    rec = s.run_record()
    assert rec["outcome"] == "failed" and rec["status"] == "FAIL"
    assert [n["exit_code"] for n in rec["nodes"]] == [1, 1]
    names = " ".join(f"{e['name']} {e['text']}" for e in rec["errors"])
    assert "nan" in names.lower(), rec["errors"]
    assert {v["metric"]: v for v in rec["verdicts"]}["training.final_loss"]["status"] != "PASS"
    _nothing_left(s)


def test_ctrl_c_leaves_nothing_in_squeue_and_no_task(tmp_path: Path) -> None:
    s = make_setup(tmp_path, env={"CVS_STANDIN_STEP_SLEEP": "0.05"}, steps=5000)
    proc = start_cli(s, "--slurm-args", "-N 2 -J cvs-suite-ctrlc")
    try:
        _wait_training(s, proc)
        assert processes_with(s.marker())
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=90)
        assert proc.returncode == 130, out
        assert s.run_record()["outcome"] == "interrupted"
        assert s.stage("teardown")["state"] == "passed", s.stage("teardown")
        assert not [j for j in squeue_jobs() if "cvs-suite-ctrlc" in j], squeue_jobs()
        _nothing_left(s)
    finally:
        if proc.poll() is None:  # let cvs-tui tear down what it started, then make sure
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def test_lost_node_is_caught_by_the_watchdog_and_teardown_leaves_nothing(tmp_path: Path) -> None:
    """rank 1's slurmstepd is killed (-9) mid-run and its trainer frozen: srun hangs and the task is
    orphaned; the watchdog judges the run from the missing progress and teardown stops the orphan."""
    s = make_setup(tmp_path, env={"CVS_STANDIN_STEP_SLEEP": "0.2"}, steps=5000)

    async def go() -> None:
        plan = await slurm_plan(s, ["-N", "2", "-J", "cvs-suite-lost"])
        task = asyncio.create_task(run_suite_async(s, plan, fast_options(hang_min_s=3.0)))
        end = time.monotonic() + 60
        while min(_steps_in(s.node_log(r)) for r in (0, 1)) < 5:
            assert time.monotonic() < end and not task.done()
            await asyncio.sleep(0.1)
        step = (s.out / "slurm" / SLUG / "node1.slurm").read_text().split()[1]
        pid = stepd_pid(step, "node2")
        assert pid is not None
        os.kill(pid, signal.SIGKILL)  # the node's step daemon dies: Slurm does not notice, srun hangs
        pgid = int(Path(f"{s.node_log(1)}.pid").read_text())
        os.killpg(pgid, signal.SIGSTOP)  # and its trainer freezes: the node is gone as far as we can see
        await asyncio.wait_for(task, 120)

    asyncio.run(go())
    rec = s.run_record()
    assert rec["status"] == "FAIL" and rec["outcome"] == "hung", rec["outcome"]
    assert rec["root_cause_node"] == 1, rec["reason"]
    assert rec["nodes"][1]["exit_code"] == 137  # the orphan, killed through a side command on its node
    assert s.stage("teardown")["state"] == "passed", s.stage("teardown")
    _nothing_left(s)


def test_a_step_cancelled_from_outside_is_a_lost_node_after_lost_after(tmp_path: Path) -> None:
    """``scancel J.S`` by someone else mid-run: no rank records an exit status, each is unreachable in
    Slurm's words, and lost once ``--lost-after`` (3 s here, 15 by default) has passed."""
    s = make_setup(tmp_path, env={"CVS_STANDIN_STEP_SLEEP": "0.1"}, steps=5000)
    proc = start_cli(s, "--slurm-args", "-N 2 -J cvs-suite-scancel", "--lost-after", "3")
    try:
        _wait_training(s, proc)
        step = (s.out / "slurm" / SLUG / "node0.slurm").read_text().split()[1]
        slurm().cmd("scancel", step)
        out, _ = proc.communicate(timeout=90)
        assert proc.returncode == 1, out
        rec = s.run_record()
        assert rec["status"] == "FAIL" and rec["outcome"] == "failed", rec["outcome"]
        assert " lost: Slurm: the job step ended" in rec["reason"], rec["reason"]
        assert rec["reason"].endswith("not reachable for 3 s"), rec["reason"]
        assert not [j for j in squeue_jobs() if "cvs-suite-scancel" in j], squeue_jobs()
        _nothing_left(s)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_self_requested_allocation_is_released_on_failure(tmp_path: Path) -> None:
    s = make_setup(tmp_path, env={"CVS_STANDIN_MODE": "crash"})
    p = run_cli(s, "--slurm-args", "-N 2 -J cvs-suite-release")
    assert p.returncode == 1, p.stdout + p.stderr
    assert s.run_record()["outcome"] == "failed"
    assert not [j for j in squeue_jobs() if "cvs-suite-release" in j], squeue_jobs()
    _nothing_left(s)
