"""The checkpoint-resume stage's delete on real nodes (loopback sshd, dockerd): the checkpoint folder is
deleted inside the trainer's container on every node, as the container's user, and a delete that fails
is reported with the node, the path and the size left behind.

The trainer is not run: the test is about the delete, so it writes the folder itself inside the
containers the nodes launcher started, as the container's user.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from _runner_infra import needs_infra
from suite_fixtures.helpers import containers_of, fast_options, make_setup, remove_scratch_tree

from cvs_tui.core.cluster import load_cluster
from cvs_tui.core.config.loader import load_config
from cvs_tui.core.plan import build_plan, new_run_id
from cvs_tui.core.runner.launch import launcher_for
from cvs_tui.core.runner.stages.checkpoint_resume import delete_checkpoints

pytestmark = [
    *needs_infra,
    pytest.mark.skipif(
        shutil.which("chattr") is None or os.geteuid() != 0,
        reason="needs root and chattr to make a checkpoint file immutable",
    ),
]


async def test_delete_in_every_container_and_a_failed_delete_is_reported(tmp_path: Path) -> None:
    s = make_setup(tmp_path, runtime="docker")
    cfg = json.loads(s.config.read_text())
    cfg["checkpoint_resume"] = {"enabled": True, "steps_before_ckpt": 2, "checkpoint_period": 1}
    s.config.write_text(json.dumps(cfg))
    cluster = load_cluster(s.cluster)
    plan = build_plan(load_config(s.config, user=cluster.user), cluster, out_dir=s.out, run_id=new_run_id())
    run = plan.run("CKPT-1")
    ckpt = f"{run.base_output_directory}/{run.run_name}/checkpoints"
    opt = fast_options()
    launcher = launcher_for(plan, opt)
    ranks = range(len(plan.nodes))
    try:
        assert await launcher.prepare() == []
        ok, detail = await launcher.launch_containers()
        assert ok, detail
        # what phase 1 leaves: a checkpoint per node, written by the container's user
        for rank in ranks:
            r = await launcher.run_on_node(
                rank, f"mkdir -p {ckpt}/1/items && head -c 300000 /dev/zero > {ckpt}/1/items/d", 30
            )
            assert r.rc == 0, r
        assert await delete_checkpoints(launcher, len(plan.nodes), run, opt.command_timeout_s) == []
        for rank in ranks:
            gone = await launcher.run_on_node(rank, f"test -e {ckpt}", 30)
            assert gone.rc == 1, f"node {rank} still has {ckpt}"

        # a folder that cannot be deleted, even by root: a file in it made immutable on the node's disk
        # (the run folder is the host's, mounted into the container)
        made = await launcher.run_on_node(
            0, f"mkdir -p {ckpt}/2/items && head -c 300000 /dev/zero > {ckpt}/2/items/d", 30
        )
        assert made.rc == 0, made
        pinned = Path(ckpt) / "2" / "items" / "d"
        assert pinned.is_file()
        subprocess.run(["chattr", "+i", str(pinned)], check=True)
        try:
            problems = await delete_checkpoints(launcher, len(plan.nodes), run, opt.command_timeout_s)
        finally:
            subprocess.run(["chattr", "-i", str(pinned)], check=True)
        # the test nodes share one disk, so every node finds the folder still there and says so
        assert len(problems) == len(plan.nodes), problems
        for rank, line in enumerate(problems):
            assert line.startswith(f"node {rank}: could not delete checkpoints {ckpt} ("), line
            left = line.split(" (", 1)[1].split(" left)", 1)[0]
            assert left[0].isdigit() and left != "0", line  # du's size of what is left, e.g. 296K
            assert "not permitted" in line, line
        assert await delete_checkpoints(launcher, len(plan.nodes), run, opt.command_timeout_s) == []
    finally:
        problems = await launcher.teardown()
        try:
            assert problems == []
            assert containers_of(plan.run_id) == []
        finally:
            remove_scratch_tree(s)
