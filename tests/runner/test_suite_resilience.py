"""The suite against real trouble: a dropped SSH connection, a node down at start, Ctrl-C, hostile
config values and `--resume`, on the loopback sshd nodes and dockerd (see test_suite_outcomes.py)."""

from __future__ import annotations

import asyncio
import json
import signal
import time
from pathlib import Path

import pytest
import yaml
from _runner_infra import infra, kill_ssh_connection, needs_infra
from suite_fixtures.helpers import (
    SLUG,
    SWEEP,
    UNREACHABLE_HOST,
    cli,
    containers_of,
    fast_options,
    make_setup,
    make_suite,
    processes_with,
    remove_scratch_tree,
    section,
    start_cli,
)

pytestmark = needs_infra


def _steps_in(path: Path) -> int:
    return path.read_bytes().count(b"completed step:") if path.exists() else 0


async def test_ssh_connection_killed_mid_run_loses_and_repeats_no_line(tmp_path: Path) -> None:
    """Node 1's SSH connection (log stream and forwarded Docker socket) is killed twice from the server
    side while the trainer streams; the copy in the run folder must still equal the node's log."""
    s = make_setup(tmp_path, env={"CVS_STANDIN_STEP_SLEEP": "0.08"}, sweeps={SWEEP: {"steps": 60}})
    suite = make_suite(s, fast_options())
    task = asyncio.create_task(suite.run())
    killed: list[int] = []
    try:
        for after_steps in (10, 30):
            end = time.monotonic() + 60
            while _steps_in(s.out / "logs" / SLUG / "node1.log") < after_steps:
                assert not task.done(), "the run ended before the connection could be killed"
                assert time.monotonic() < end, "node 1 did not log its steps"
                await asyncio.sleep(0.05)
            pids = kill_ssh_connection(suite.launcher.transports[1])  # type: ignore[arg-type]
            assert pids, "no sshd process served node 1's connection"
            killed += pids
        await asyncio.wait_for(task, 120)
    finally:
        suite.bus.close()
        if not task.done():
            task.cancel()
    try:
        rec = s.run_record()
        assert rec["outcome"] == "complete" and rec["status"] == "PASS", rec["reason"]
        for rank in (0, 1):
            own = s.node_log(rank).read_bytes()
            copied = s.copied_log(rank).read_bytes()
            assert copied == own, f"node {rank}: run-folder log differs from the node's own log"
            assert own.count(b"completed step:") == 60
        assert rec["nodes"][1]["lines"] == s.node_log(1).read_bytes().count(b"\n")
        assert containers_of(s.run_id()) == []
    finally:
        remove_scratch_tree(s)


def test_node_unreachable_at_start_fails_preflight_and_launches_nothing(tmp_path: Path) -> None:
    s = make_setup(tmp_path, hosts=[infra().nodes[0], UNREACHABLE_HOST])
    try:
        p = cli(s)
        assert p.returncode == 1, p.stdout + p.stderr
        pre = s.stage("preflight")
        assert pre["state"] == "failed"
        assert f"node 1 ({UNREACHABLE_HOST}) unreachable" in pre["detail"], pre["detail"]
        assert "node 0" not in pre["detail"]
        for name in ("launch_container", f"run:{SWEEP}"):
            assert s.stage(name)["state"] == "skipped"
        assert not [e for e in s.events() if e["type"] in ("RunStartEvent", "NodeStatusEvent")]
        assert s.results()["runs"] == []
        assert containers_of(s.run_id()) == []
        assert not (s.root / "runs" / s.run_id() / "cvs-logs").exists()  # no launcher ran on node 0
        # teardown claims no check it did not make: nothing was started, so nothing was checked
        assert s.stage("teardown")["detail"] == "nothing was started on the nodes: nothing to stop"
    finally:
        remove_scratch_tree(s)


def test_image_missing_on_the_nodes_fails_preflight_naming_them(tmp_path: Path) -> None:
    s = make_setup(tmp_path)
    cfg = json.loads(s.config.read_text())
    cfg["container"]["image"] = "cvs-test/no-such-image:0"
    s.config.write_text(json.dumps(cfg))
    try:
        p = cli(s)
        assert p.returncode == 1, p.stdout + p.stderr
        pre = s.stage("preflight")
        assert pre["state"] == "failed"
        for rank in (0, 1):
            assert (
                f"node {rank} (" in pre["detail"]
                # missing images are pulled now; one that no registry has fails preflight, named
                and "cannot pull cvs-test/no-such-image:0" in pre["detail"]
            )
        assert s.stage("launch_container")["state"] == "skipped"
        assert s.results()["runs"] == [] and containers_of(s.run_id()) == []
    finally:
        remove_scratch_tree(s)


@pytest.mark.parametrize("runtime", ["docker", "host"])
def test_ctrl_c_mid_run_leaves_nothing_running_and_exits_130(tmp_path: Path, runtime: str) -> None:
    s = make_setup(
        tmp_path, runtime=runtime, env={"CVS_STANDIN_STEP_SLEEP": "0.05"}, sweeps={SWEEP: {"steps": 5000}}
    )
    proc = start_cli(s)
    try:
        end = time.monotonic() + 60
        while min(_steps_in(s.out / "logs" / SLUG / f"node{r}.log") for r in (0, 1)) < 5:
            assert proc.poll() is None, proc.communicate()[0]
            assert time.monotonic() < end, "the nodes did not start training"
            time.sleep(0.05)
        assert processes_with(s.marker()), "no trainer running before Ctrl-C"
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=90)
        assert proc.returncode == 130, out
        res = s.results()
        assert {st["name"]: st["state"] for st in res["stages"]}["interrupted"] == "failed"
        assert s.run_record()["outcome"] == "interrupted"
        assert s.stage("teardown")["state"] in ("passed", "skipped")
        assert containers_of(s.run_id()) == []
        assert processes_with(s.marker()) == []
        for rank in (0, 1):  # everything the node logged up to the stop is in the run folder
            assert s.copied_log(rank).read_bytes() == s.node_log(rank).read_bytes()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        remove_scratch_tree(s)


@pytest.mark.parametrize("runtime", ["docker", "host"])
def test_hostile_config_values_reach_the_node_unchanged_and_unexecuted(tmp_path: Path, runtime: str) -> None:
    root_probe = tmp_path / "probe"  # created only if a value was executed
    value = (
        f'it\'s "quoted" $(touch {root_probe}-dollar) `touch {root_probe}-tick`; touch {root_probe}-semi'
        f" && echo $HOME | cat\nsecond line ; $(id)\n\tthird"
    )
    s = make_setup(
        tmp_path,
        runtime=runtime,
        env={"CVS_HOSTILE": value},
        maxtext={"hostile_value": value, "hostile_list": [value, "plain"]},
    )
    try:
        p = cli(s)
        assert p.returncode == 0, p.stdout + p.stderr
        for rank in (0, 1):
            log = s.node_log(rank).read_text()
            assert f"CVS_HOSTILE={value}\n" in section(log, "ENV")
            dumped = yaml.safe_load(section(log, "YAML"))
            assert dumped["hostile_value"] == value
            assert dumped["hostile_list"] == [value, "plain"]
        assert sorted(p.name for p in tmp_path.glob("probe*")) == []
        # the plan in the run folder keeps the value too (masked only for secret names)
        plan = json.loads((s.out / "plan.json").read_text())
        assert plan["runs"][0]["env"]["CVS_HOSTILE"] == value
    finally:
        remove_scratch_tree(s)


def test_resume_keeps_a_completed_run_and_reruns_the_failed_one(tmp_path: Path) -> None:
    good, bad = SWEEP, "BS=1,PRECISION=BF16,SL=64"
    bad_slug = "BS_1_PRECISION_BF16_SL_64"
    s = make_setup(tmp_path, sweeps={good: {"steps": 8}, bad: {"steps": 8, "standin_mode": "nan"}})
    try:
        first = cli(s)
        assert first.returncode == 1, first.stdout + first.stderr
        runs1 = {r["key"]: r for r in s.results()["runs"]}
        assert runs1[good]["status"] == "PASS" and runs1[bad]["status"] == "FAIL"
        first_id = s.run_id()
        good_log = s.copied_log(0).read_bytes()

        again = cli(s, "--resume", str(s.out))
        assert again.returncode == 1, again.stdout + again.stderr
        second_id = s.run_id()
        assert second_id != first_id
        runs2 = {r["key"]: r for r in s.results()["runs"]}
        assert runs2[good] == runs1[good]  # kept as it was, not run again
        assert "kept from" in s.stage(f"run:{good}")["detail"]
        assert runs2[bad]["started_at"] > runs1[bad]["ended_at"]  # the failed one ran again
        assert s.copied_log(0).read_bytes() == good_log
        node_runs = s.root / "runs" / second_id / "cvs-logs"
        assert (node_runs / bad_slug).is_dir() and not (node_runs / SLUG).exists()
        assert containers_of(first_id) == [] and containers_of(second_id) == []
    finally:
        remove_scratch_tree(s)
