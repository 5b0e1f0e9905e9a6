"""The nodes launcher held to the Launcher/Job contract on real nodes (loopback sshd, dockerd).

No suite: the test drives the seam itself, as a stage or the run execution would. Two ranks run the
stand-in trainer in crash mode (rank 1 exits 3 after three steps, rank 0 waits forever), so one job
shows a recorded non-zero exit, a cancel, byte-identical log streams, side commands and a clean
teardown.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from _runner_infra import needs_infra
from suite_fixtures.helpers import (
    SLUG,
    containers_of,
    fast_options,
    make_setup,
    processes_with,
    remove_scratch_tree,
)

from cvs_tui.core.cluster import load_cluster
from cvs_tui.core.config.loader import load_config
from cvs_tui.core.plan import build_plan, new_run_id
from cvs_tui.core.runner.launch import Job, launcher_for
from cvs_tui.core.runner.nodes.launcher import NodeLauncher

pytestmark = needs_infra


async def _follow(job: Job, rank: int, into: bytearray, until: bytes | None = None) -> None:
    async for chunk in job.follow(rank):
        into += chunk
        if until is not None and until in into:
            return


async def _exit_status(job: Job, rank: int, timeout: float = 30.0) -> int | None:
    end = asyncio.get_running_loop().time() + timeout
    while (code := await job.exit_status(rank)) is None and asyncio.get_running_loop().time() < end:
        await asyncio.sleep(0.1)
    return code


@pytest.mark.parametrize("runtime", ["docker", "host"])
async def test_a_job_streams_records_exits_cancels_and_tears_down(tmp_path: Path, runtime: str) -> None:
    s = make_setup(tmp_path, runtime=runtime, maxtext={"standin_mode": "crash"})
    cluster = load_cluster(s.cluster)
    plan = build_plan(load_config(s.config, user=cluster.user), cluster, out_dir=s.out, run_id=new_run_id())
    launcher = launcher_for(plan, fast_options())
    assert isinstance(launcher, NodeLauncher) and launcher.name == plan.launcher == "nodes"
    node_log = s.root / "runs" / plan.run_id / "cvs-logs" / SLUG
    try:
        assert await launcher.prepare() == []
        if runtime == "docker":
            ok, detail = await launcher.launch_containers()
            assert ok, detail
        job = await launcher.start(plan.runs[0])
        assert (job.run_key, job.ranks) == (plan.runs[0].key, 2)

        crashed = bytearray()
        await asyncio.wait_for(_follow(job, 1, crashed, until=b"EXIT_CODE=3\n"), 60)
        job.stop_following(1)
        assert await _exit_status(job, 1) == 3
        assert bytes(crashed) == (node_log / "node1.log").read_bytes()

        waiting = bytearray()
        reader = asyncio.create_task(_follow(job, 0, waiting))
        assert await job.exit_status(0) is None  # still running: waits on its dead peer
        await job.cancel([0])
        stopped = await _exit_status(job, 0)
        assert stopped is not None and stopped != 0
        job.stop_following(0)
        await asyncio.wait_for(reader, 30)
        waiting += await job.read_rest(0)
        assert bytes(waiting) == (node_log / "node0.log").read_bytes()
        assert waiting.endswith(f"EXIT_CODE={stopped}\n".encode())

        host = await launcher.run_on_node(0, "echo on-host", 30, where="host")
        inside = await launcher.run_on_node(1, "echo inside; exit 4", 30)
        assert (host.rc, host.out, inside.rc, inside.out) == (0, "on-host\n", 4, "inside\n")
    finally:
        problems = await launcher.teardown()
        try:
            assert problems == []
            assert containers_of(plan.run_id) == []
            assert processes_with(s.marker()) == []
        finally:
            remove_scratch_tree(s)
