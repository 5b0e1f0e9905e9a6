"""The Slurm launcher against a real two-node Slurm cluster (``.ci/slurm.sh up``).

The trainer is a shell script (a test double for MaxText only: these tests are about starting,
following and stopping ranks through Slurm); everything else is real: salloc, srun, squeue, scancel,
slurmstepd, the launcher scripts and the shared run folder.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import TypeVar

import pytest
from _config_samples import write_config
from _slurm_infra import needs_slurm, pids_matching, slurm, stepd_pid

from cvs_tui.core.cluster import cluster_from_nodes_arg
from cvs_tui.core.config.loader import load_config
from cvs_tui.core.errors import UserError
from cvs_tui.core.events import RunOutcome, StepEvent
from cvs_tui.core.judge.facts import RunFacts
from cvs_tui.core.judge.outcome import decide_outcome
from cvs_tui.core.parse import NodeLogParser
from cvs_tui.core.parse.endings import read_ending
from cvs_tui.core.plan import build_plan
from cvs_tui.core.runner.nodes.script import LaunchSpec, exit_code_from_log_tail
from cvs_tui.core.runner.slurm.client import (
    Allocation,
    SlurmClient,
    SlurmError,
    allocation_from_env,
    parse_slurm_args,
    release_allocation,
    request_allocation,
)
from cvs_tui.core.runner.slurm.launcher import SlurmJob, SlurmLauncher
from cvs_tui.core.runner.slurm.steps import SlurmStep, side_command, task_script

TRAINER = r"""
# stand-in trainer: MODE=ok|crash|hang; prints MaxText-like step lines
echo "rank $RANK config $1"
trap 'echo "rank $RANK got TERM"; exit 143' TERM
i=0
while :; do
  i=$((i+1))
  echo "completed step: $i, seconds: 0.1, loss: 1.0"
  if [ "$MODE" = ok ] && [ "$i" -ge 3 ]; then exit 0; fi
  if [ "$MODE" = crash ] && [ "$i" -ge 2 ]; then exit 7; fi
  sleep 0.1
done
"""


def test_parse_slurm_args() -> None:
    assert parse_slurm_args("-N 2 -p batch --time=10") == ["-N", "2", "-p", "batch", "--time=10"]
    with pytest.raises(UserError, match="--slurm-args"):
        parse_slurm_args("-N '2")
    with pytest.raises(UserError, match="--jobid=3 is set by cvs-tui"):
        parse_slurm_args("--jobid=3")


def test_task_script_quotes_folder_and_selects_rank() -> None:
    s = task_script("/shared/run dir/$(x)")
    assert "dir='/shared/run dir/$(x)'" in s
    assert '. "$dir/node$rank.sh"' in s
    assert "rank=${SLURM_NODEID:?" in s


async def test_not_inside_an_allocation_is_a_user_error() -> None:
    with pytest.raises(UserError, match="SLURM_JOB_ID"):
        await allocation_from_env(SlurmClient(), {})


F = TypeVar("F", bound=Callable[..., object])


def _mark(fn: F) -> F:
    for m in needs_slurm:
        fn = m(fn)
    return fn


@pytest.fixture
async def alloc(tmp_path: Path) -> AsyncIterator[Allocation]:
    a = await request_allocation(slurm().client(), ["-N", "2", "-J", f"cvs-test-{uuid.uuid4().hex[:6]}"], 60)
    try:
        yield a
    finally:
        assert await release_allocation(slurm().client(), a) == []


def _specs(folder: Path, modes: list[str]) -> list[LaunchSpec]:
    trainer = folder / "trainer.sh"
    trainer.write_text(TRAINER)
    return [
        LaunchSpec(
            log_path=str(folder / f"node{r}.log"),
            config_path=f"cfg-{r}.yml",
            train_script_paths=[str(trainer)],
            python="bash",
            env={"RANK": str(r), "MODE": mode},
        )
        for r, mode in enumerate(modes)
    ]


async def _start(alloc: Allocation, tmp: Path, modes: list[str]) -> tuple[SlurmJob, str]:
    marker = f"cvs{uuid.uuid4().hex[:10]}"
    folder = tmp / marker
    folder.mkdir()
    step = SlurmStep(slurm().client(), alloc, str(folder), f"cvs-test-{marker}", len(modes))
    await step.start(_specs(folder, modes))
    return SlurmJob("SMOKE", step, grace_s=5.0), marker


async def _collect(job: SlurmJob, rank: int, until: bytes, timeout: float) -> bytes:
    got = b""
    async with asyncio.timeout(timeout):
        async for data in job.follow(rank):
            got += data
            if until in got:
                break
    return got


async def _exit(job: SlurmJob, rank: int, timeout: float) -> int:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        rc = await job.exit_status(rank)
        if rc is not None:
            return rc
        await asyncio.sleep(0.02)
    raise AssertionError(f"rank {rank}: no exit status after {timeout} s")


@_mark
async def test_inherited_allocation_nodes_in_order(alloc: Allocation) -> None:
    env = {"SLURM_JOB_ID": alloc.job_id}  # as under sbatch, without the node list: read from squeue
    a = await allocation_from_env(slurm().client(), env)
    assert a.nodes == slurm().nodes and not a.owned
    assert await release_allocation(slurm().client(), a) == []  # not ours: never cancelled
    assert alloc.job_id in slurm().cmd("squeue", "-h", "-o", "%i").split()


@_mark
async def test_clean_two_rank_step(alloc: Allocation, tmp_path: Path) -> None:
    job, marker = await _start(alloc, tmp_path, ["ok", "ok"])
    logs = await asyncio.gather(*(_collect(job, r, b"EXIT_CODE=", 60) for r in range(2)))
    for r in range(2):
        assert await _exit(job, r, 10) == 0
        rest = await job.read_rest(r)
        full = logs[r] + rest
        assert full == Path(job.step.log_path(r)).read_bytes()  # byte-identical
        assert full.startswith(f"rank {r} config cfg-{r}.yml\n".encode())
        assert exit_code_from_log_tail(full) == 0
        node, step_id = Path(job.step.folder, f"node{r}.slurm").read_text().split()
        assert node == alloc.nodes[r]  # rank r runs on the r-th node of the allocation
        assert step_id.startswith(f"{alloc.job_id}.")
    assert await job.wait_ended(10)
    assert Path(job.step.folder, "node0.out").exists() and Path(job.step.folder, "node1.out").exists()
    assert pids_matching(marker) == []


@_mark
async def test_rank1_crash_exit_status_is_the_ranks_own(alloc: Allocation, tmp_path: Path) -> None:
    job, marker = await _start(alloc, tmp_path, ["hang", "crash"])
    assert await _exit(job, 1, 60) == 7
    assert await job.exit_status(0) is None  # rank 0 still running: the watchdog decides, not srun
    t0 = time.monotonic()
    await job.cancel([0])
    assert job.problems == []
    assert await job.exit_status(0) == 143  # got TERM, exited by itself
    assert b"rank 0 got TERM" in Path(job.step.log_path(0)).read_bytes()
    assert time.monotonic() - t0 < 30
    assert slurm().cmd("squeue", "-h", "-s", "-j", alloc.job_id, "-o", "%i|%j").count(marker) == 0
    assert pids_matching(marker) == []


@_mark
async def test_cancel_with_term_leaves_nothing(alloc: Allocation, tmp_path: Path) -> None:
    job, marker = await _start(alloc, tmp_path, ["hang", "hang"])
    await asyncio.gather(*(_collect(job, r, b"completed step: 2", 30) for r in range(2)))
    assert await job.step.find_step(5) is not None
    await job.cancel([0, 1])
    assert job.problems == []
    for r in range(2):
        assert await job.exit_status(r) == 143
        log = Path(job.step.log_path(r)).read_bytes()
        assert f"rank {r} got TERM".encode() in log and exit_code_from_log_tail(log) == 143
    assert marker not in slurm().cmd("squeue", "-h", "-s", "-o", "%j")
    assert pids_matching(marker) == []
    assert job.step.proc is not None and job.step.proc.returncode is not None


@_mark
async def test_lost_node_is_no_progress_then_clean_cancel(tmp_path: Path) -> None:
    client = slurm().client()
    alloc = await request_allocation(client, ["-N", "2", "-J", f"cvs-test-{uuid.uuid4().hex[:6]}"], 60)
    try:
        job, marker = await _start(alloc, tmp_path, ["hang", "hang"])
        await asyncio.gather(*(_collect(job, r, b"completed step: 1", 30) for r in range(2)))
        sid = await job.step.find_step(5)
        assert sid is not None
        pid = stepd_pid(sid, alloc.nodes[1])
        assert pid is not None
        os.kill(pid, signal.SIGKILL)  # the node's step daemon dies: Slurm does not notice, srun hangs
        pgid = int(Path(f"{job.step.log_path(1)}.pid").read_text())
        os.killpg(pgid, signal.SIGSTOP)  # and its trainer freezes: the node is gone as far as we can see
        await asyncio.sleep(0.3)
        size = Path(job.step.log_path(1)).stat().st_size
        await asyncio.sleep(1.5)
        # what the watchdog sees: no progress on rank 1, no exit status, srun still running
        assert Path(job.step.log_path(1)).stat().st_size == size
        assert job.step.proc is not None and job.step.proc.returncode is None
        assert await job.exit_status(1) is None
        await job.cancel([0, 1])
        assert job.problems == []
        assert await job.exit_status(0) == 143
        assert await job.exit_status(1) == 137  # the orphaned trainer was killed through a side command
        assert pids_matching(marker) == []
        assert job.step.proc.returncode is not None
    finally:
        assert await release_allocation(client, alloc) == []
    assert alloc.job_id not in slurm().cmd("squeue", "-h", "-o", "%i").split()


@_mark
async def test_side_command_next_to_a_running_step(alloc: Allocation, tmp_path: Path) -> None:
    job, _ = await _start(alloc, tmp_path, ["hang", "hang"])
    try:
        await _collect(job, 1, b"completed step: 1", 30)
        r = await side_command(slurm().client(), alloc, alloc.nodes[1], "echo $SLURMD_NODENAME; exit 3", 30)
        assert (r.rc, r.out.strip()) == (3, alloc.nodes[1])
    finally:
        await job.cancel([0, 1])


@_mark
async def test_self_requested_allocation_released_on_failure() -> None:
    client = slurm().client()
    name = f"cvs-test-{uuid.uuid4().hex[:6]}"
    a = await request_allocation(client, ["-N", "2", "-J", name], 60)
    try:
        with pytest.raises(SlurmError, match="stage failed"):
            r = await side_command(client, a, "nosuchnode", "true", 20)
            assert r.rc != 0 and "Unable to create step" in r.err  # not a node of the allocation
            raise SlurmError("stage failed")  # as a failing stage does, with the allocation held
    finally:
        assert await release_allocation(client, a) == []
    assert name not in slurm().cmd("squeue", "-h", "-o", "%j")


@_mark
async def test_request_interrupted_while_pending_is_cancelled() -> None:
    client = slurm().client()
    name = f"cvs-test-{uuid.uuid4().hex[:6]}"
    # three nodes do not exist: the request stays pending until the interruption
    task = asyncio.create_task(request_allocation(client, ["-N", "3", "-J", name, "--immediate=0"], 60))
    await asyncio.sleep(1.5)
    task.cancel()
    with pytest.raises((asyncio.CancelledError, SlurmError)):
        await task
    await asyncio.sleep(0.5)
    assert name not in slurm().cmd("squeue", "-h", "-o", "%j")


@_mark
async def test_launcher_seam_prepare_start_side_command_teardown(tmp_path: Path) -> None:
    """SlurmLauncher as the Suite will drive it: its own allocation, a planned run, a side command."""
    loaded = load_config(write_config(tmp_path / "cfg"), user="alice")
    plan = build_plan(
        loaded, cluster_from_nodes_arg("node1,node2", user="alice"), out_dir=tmp_path, run_id="R"
    )
    trainer = tmp_path / "trainer.sh"
    trainer.write_text('echo "config $1"; grep -c . "$1"; exit 0\n')
    plan = plan.model_copy(update={"python": "bash", "train_script_paths": [str(trainer)]})
    name = f"cvs-test-{uuid.uuid4().hex[:6]}"
    launcher = SlurmLauncher(plan, tmp_path / "run", ["-N", "2", "-J", name], client=slurm().client())
    try:
        assert await launcher.prepare() == []
        assert launcher.alloc is not None and launcher.alloc.nodes == slurm().nodes
        run = plan.runs[0]
        job = await launcher.start(run)
        for r in range(2):
            log = await _collect(job, r, b"EXIT_CODE=", 60)
            assert f"config {tmp_path}/run/slurm/{run.slug}/maxtext.node{r}.yml".encode() in log
            assert await _exit(job, r, 10) == 0
        res = await launcher.run_on_node(1, "echo $SLURMD_NODENAME", 30)
        assert (res.rc, res.out.strip()) == (0, "node2")
    finally:
        assert await launcher.teardown() == []
    assert name not in slurm().cmd("squeue", "-h", "-o", "%j")


@_mark
@pytest.mark.slow
async def test_time_limit_is_named_from_the_steps_stderr(tmp_path: Path) -> None:
    """A step that outlives the job's --time is cancelled by slurmctld; the ending read from the step's
    stderr (what the launcher hands the judge) says so, with the node, and the run's reason names it."""
    a = await request_allocation(
        slurm().client(), ["-N", "2", "--time=1", "-J", f"cvs-test-{uuid.uuid4().hex[:6]}"], 60
    )
    try:
        job, marker = await _start(a, tmp_path, ["hang", "hang"])
        await asyncio.gather(*(_collect(job, r, b"completed step: 2", 30) for r in range(2)))
        codes = [await _exit(job, r, 150) for r in range(2)]  # the limit (1 min) plus slurmctld's check
        ending = read_ending(await job.scheduler_lines(0))
        assert ending is not None and ending.cause == "time_limit", await job.scheduler_lines(0)
        assert ending.node == a.nodes[0] and (ending.slurm_id or "").startswith(a.job_id)
        # the stand-in's step lines, as the judge has them (the step the run reached, when parsed)
        steps = [
            e
            for e in NodeLogParser().feed(Path(job.step.log_path(0)).read_bytes())
            if isinstance(e, StepEvent)
        ]
        out, reason, root = decide_outcome(
            [steps, steps], 400, RunFacts(exit_codes=codes, endings=[ending, None])
        )
        assert out is RunOutcome.FAILED and root == 0
        at = f" at step {steps[-1].step}" if steps else ""
        assert reason.startswith(f"Slurm: time limit reached{at} ({a.nodes[0]})"), reason
        assert await job.wait_ended(30)
        for _ in range(150):  # slurmstepd's KILL after KillWait: the trainers are gone shortly after
            if not pids_matching(marker):
                break
            await asyncio.sleep(0.1)
        assert pids_matching(marker) == []
    finally:
        await release_allocation(slurm().client(), a)
