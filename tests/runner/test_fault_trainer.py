"""Fault injection, trainer behaviour: a trainer that ignores SIGTERM, one that forks children that call
setsid (leaving its process group), and clock skew between the nodes. Each must get the right verdict,
keep every line and leave nothing running (checked with pgrep on the host, which the loopback nodes
share). The trainer is a sh double (tests/_fault_infra.py)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from _fault_infra import fault_setup, left_running, pgrep
from _runner_infra import needs_infra
from suite_fixtures.helpers import cli, remove_scratch_tree

pytestmark = needs_infra

FAST = ("--compile-allowance", "30", "--hang-min", "4", "--hang-factor", "1")


@pytest.mark.parametrize("runtime", ["host", "docker"])
def test_a_trainer_that_ignores_sigterm_is_killed_and_judged_hung(tmp_path: Path, runtime: str) -> None:
    body = "trap '' TERM\nheader\nsteps 0 3\nwhile :; do sleep 1; done\n"
    s = fault_setup(tmp_path, body, steps=8, runtime=runtime)
    try:
        p = cli(s, *FAST, timeout=180)
        assert p.returncode == 1, p.stdout + p.stderr
        rec = s.run_record()
        assert rec["outcome"] == "hung" and rec["status"] == "FAIL", rec
        for rank in (0, 1):
            own = s.node_log(rank).read_bytes()
            assert s.copied_log(rank).read_bytes() == own
            assert own.count(b"completed step:") == 3
            assert own.endswith(b"EXIT_CODE=137\n")  # it took a KILL
        assert left_running(s) == []
        assert s.stage("teardown")["state"] == "passed"
    finally:
        remove_scratch_tree(s)


@pytest.mark.parametrize("ends", ["exits", "hangs"])
def test_children_that_call_setsid_are_stopped_too(tmp_path: Path, ends: str) -> None:
    tag = f"escaped_{tmp_path.name}"
    # the child's own command line carries the tag (no `exec`: dash has no `exec -a`)
    spawn = f"setsid sh -c 'sleep 300; : {tag}' </dev/null >/dev/null 2>&1 &\n"
    last = "exit 0\n" if ends == "exits" else "while :; do sleep 1; done\n"
    s = fault_setup(tmp_path, f"header\n{spawn}steps 0 8\n{last}", steps=8)
    try:
        p = cli(s, *FAST, timeout=180)
        rec = s.run_record()
        if ends == "exits":  # the trainer itself finished: its run passes, its leftovers are stopped
            assert p.returncode == 0 and rec["outcome"] == "complete", p.stdout + p.stderr
        else:
            assert p.returncode == 1 and rec["outcome"] == "hung", rec
        for rank in (0, 1):
            assert s.copied_log(rank).read_bytes() == s.node_log(rank).read_bytes()
        assert pgrep(tag) == [] and left_running(s) == []
        assert b"completed step: 7" in s.node_log(0).read_bytes()  # the child was spawned before
    finally:
        for line in pgrep(tag):  # only when the test failed: stop what the double left
            os.kill(int(line.split()[0]), signal.SIGKILL)
        remove_scratch_tree(s)


def test_clock_skew_between_nodes_changes_no_verdict(tmp_path: Path) -> None:
    """Node 1 stamps its lines an hour ahead, node 0 an hour behind: the watchdog uses the
    controller's clock and the judge the logged step times, so the run passes as it would without."""
    body = 'case "$RANK" in 1) SKEW=3600;; *) SKEW=-3600;; esac\nheader\nsteps 0 12\nexit 0\n'
    s = fault_setup(tmp_path, body, steps=12)
    try:
        p = cli(s, *FAST, timeout=180)
        assert p.returncode == 0, p.stdout + p.stderr
        rec = s.run_record()
        assert rec["outcome"] == "complete" and rec["status"] == "PASS"
        own0, own1 = s.node_log(0).read_text(), s.node_log(1).read_text()
        assert own0 != own1  # the stamps really differ
        for rank in (0, 1):
            assert s.copied_log(rank).read_bytes() == s.node_log(rank).read_bytes()
        assert left_running(s) == []
    finally:
        remove_scratch_tree(s)
