"""Node health in a live two-node run over SSH on the loopback test nodes (real sshd, real /dev/kmsg).

The trainer is the POSIX stand-in (tests/suite_fixtures/standin_trainer.sh): these tests are about the
health wiring, not MaxText. GPU telemetry comes from the smi stand-ins in tests/fixtures/smi/ (they
replace GPU hardware this machine lacks by replaying real recorded outputs), put on the nodes' PATH
through the cluster file's env_vars.

Shared kernel, honestly: both test nodes are sshd instances on this machine, so they share one kernel
and one /dev/kmsg. A line written there is read by every node that can read the log; nothing in the
line says which "node" it belongs to, and no per-node filter can exist. With ``kernel_log: sudo`` both
nodes read it, both record the finding, and the run fails with the node whose follower delivered the
line first as the root cause (the race the test cannot steer). The test therefore checks that the root
cause is a node that really saw the line, that the reason is that line's, that both nodes are FAIL, and
that the run and step are attributed. On real clusters each node has its own kernel and the
attribution is the node's.

That the RIGHT node is blamed is shown by test_injected_gpu_reset_blames_the_node_that_read_it: there
the nodes log in as different users and only node 1's user may read the kernel log, so only node 1 can
see the line, and the run must name node 1 while node 0 stays ``not checked``.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from _health_kmsg import (
    RESET,
    inject,
    needs_kmsg_writer,
    nonce,
    sudo_kmsg_rule,
    trust_injected,  # noqa: F401 (a fixture, used by name)
)
from _runner_infra import infra, infra_only
from suite_fixtures.helpers import SWEEP, Setup, fast_options, make_setup, make_suite, remove_scratch_tree

from cvs_tui.core.events import (
    GpuTelemetryEvent,
    HealthFindingEvent,
    HealthState,
    NodeHealthEvent,
    NodeState,
    NodeStatusEvent,
    RunEndEvent,
    RunEvent,
    RunOutcome,
)
from cvs_tui.core.runner.suite import Suite

SMI = Path(__file__).resolve().parents[1] / "fixtures" / "smi"


def health_setup(
    tmp_path: Path, *, access: str, smi: bool = False, env: dict[str, str] | None = None
) -> Setup:
    s = make_setup(tmp_path, runtime="host", env=env)
    cfg = json.loads(s.config.read_text())
    cfg["health"] = {"kernel_log": access, "telemetry_interval_s": 0.5}
    s.config.write_text(json.dumps(cfg, indent=2))
    if smi:
        # a copy the node user can run: the stand-ins replace GPU hardware (see fixtures/smi/README.md)
        tools = s.root / "smi"
        shutil.copytree(SMI, tools)
        for name in ("rocm-smi", "nvidia-smi"):
            (tools / name).unlink()  # only amd-smi on PATH: the first tool found is the one used
        for p in [tools, *tools.iterdir()]:
            shutil.chown(p, infra().user, infra().user)
        cl = json.loads(s.cluster.read_text())
        cl["env_vars"] = {"PATH": f"{tools}:/usr/local/bin:/usr/bin:/bin"}
        s.cluster.write_text(json.dumps(cl))
    return s


class Recorder:
    """Every event the suite publishes, with the time it was published."""

    def __init__(self, suite: Suite) -> None:
        self.events: list[tuple[float, RunEvent]] = []
        orig = suite.emit

        def emit(ev: RunEvent) -> None:
            self.events.append((time.time(), ev))
            orig(ev)

        suite.emit = emit  # type: ignore[method-assign]
        suite.runs.emit = emit

    def of(self, kind: type) -> list[tuple[float, Any]]:
        return [(t, e) for t, e in self.events if isinstance(e, kind)]


async def _until(cond: Any, timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


def _steps(suite: Suite) -> int:
    rv = suite.state.runs.get(SWEEP)
    if rv is None:
        return -1
    return min((n.step if n.step is not None else -1) for n in rv.nodes.values()) if rv.nodes else -1


async def _run_and_inject(suite: Suite, *, before_first_step: bool) -> tuple[str, float, Recorder]:
    rec = Recorder(suite)
    task = asyncio.create_task(suite.run())
    try:
        if before_first_step:
            await _until(lambda: SWEEP in suite.state.runs, 60, "the run to start")
            # the kernel's clock is mapped to wall time within ~10 ms (more on a loaded machine): write the
            # line clearly inside the run, still long before its first step (the trainer sleeps 20 s)
            await asyncio.sleep(1.0)
        else:
            await _until(lambda: _steps(suite) >= 3, 60, "three steps on every node")
        tag = nonce()
        written = inject(RESET.format(tag=tag))
        await asyncio.wait_for(task, 120)
    finally:
        if not task.done():
            task.cancel()
        suite.bus.close()
    return tag, written, rec


def _latency(rec: Recorder, tag: str, written: float) -> dict[str, float]:
    failed = [
        t
        for t, e in rec.of(NodeStatusEvent)
        if e.state is NodeState.FAILED and "node health" in e.detail and tag in e.detail
    ]
    ended = [t for t, e in rec.of(RunEndEvent) if e.outcome is RunOutcome.FAILED]
    return {"to_node_failed_s": failed[0] - written, "to_run_end_s": ended[0] - written}


@needs_kmsg_writer
@infra_only
@pytest.mark.usefixtures("trust_injected")
def test_injected_gpu_reset_fails_the_live_run(tmp_path: Path) -> None:
    """Shared kernel: both nodes read the line, so this cannot show which node is blamed (see the module
    docstring); test_injected_gpu_reset_blames_the_node_that_read_it shows that with per-node access."""
    s = health_setup(tmp_path, access="sudo", smi=True, env={"CVS_STANDIN_STEP_SLEEP": "0.5"})
    s_cfg = json.loads(s.config.read_text())
    s_cfg["sweeps"][SWEEP]["steps"] = 400
    s.config.write_text(json.dumps(s_cfg, indent=2))
    try:
        with sudo_kmsg_rule(infra().user):
            suite = make_suite(s, fast_options(fail_grace_s=0.5))
            tag, written, rec = asyncio.run(_run_and_inject(suite, before_first_step=False))
        lat = _latency(rec, tag, written)
        print(
            "\nhealth detection latency: kernel write -> node FAILED "
            f"{lat['to_node_failed_s'] * 1000:.0f} ms, "
            f"-> run FAILED (RunEndEvent) {lat['to_run_end_s'] * 1000:.0f} ms"
        )
        assert lat["to_node_failed_s"] < 1.5
        run = s.run_record()
        assert run["outcome"] == "failed" and run["status"] == "FAIL"
        assert run["reason"].startswith("node health: amdgpu_reset") and tag in run["reason"]
        root = run["root_cause_node"]
        host = infra().nodes[root]
        assert f"on {host}:" in run["reason"]
        res = s.results()
        assert res["schema_version"] == 2
        nh = {n["rank"]: n for n in res["node_health"]}
        assert {nh[0]["state"], nh[1]["state"]} == {"fail"}  # one shared kernel: both saw the line
        # the stages table says what the findings did, not "passed" alone
        stages = {x["name"]: x for x in res["stages"]}
        assert f"fatal findings failed 1 run(s): {SWEEP}" in stages["node_health"]["detail"]
        mine = [f for f in nh[root]["findings"] if tag in f["line"]]
        assert len(mine) == 1 and mine[0]["run"] == SWEEP and mine[0]["severity"] == "fatal"
        assert mine[0]["step"] is not None and mine[0]["step"] >= 3  # in training, after step 3 was logged
        assert any(tag in f["line"] for f in run["health_findings"])
        metrics = {m["name"]: m["value"] for m in run["metrics"]}
        assert metrics["health.findings.fatal"] >= 1 and metrics["health.nodes.not_checked"] == 0
        # telemetry from the replayed amd-smi output, in results.json, the report and the events
        assert nh[0]["telemetry_tool"] == "amd-smi" and nh[0]["telemetry_last"]
        html = (s.out / "report.html").read_text()
        assert "Node health" in html and tag in html and "amd-smi" in html and "util" in html
        assert (
            tag in (s.out / "junit.xml").read_text() and "Node health" in (s.out / "summary.md").read_text()
        )
        tele = rec.of(GpuTelemetryEvent)
        assert {e.node for _, e in tele} == {0, 1} and tele[0][1].samples[0].power_w is not None
    finally:
        remove_scratch_tree(s)


@needs_kmsg_writer
@infra_only
@pytest.mark.usefixtures("trust_injected")
def test_finding_before_the_first_step_fails_the_run(tmp_path: Path) -> None:
    s = health_setup(tmp_path, access="sudo", env={"CVS_STANDIN_START_SLEEP": "20"})
    try:
        with sudo_kmsg_rule(infra().user):
            suite = make_suite(s, fast_options(fail_grace_s=0.5))
            tag, _, rec = asyncio.run(_run_and_inject(suite, before_first_step=True))
        run = s.run_record()
        assert run["outcome"] == "failed" and tag in run["reason"]
        (f,) = [f for f in run["health_findings"] if tag in f["line"] and f["node"] == run["root_cause_node"]]
        assert f["run"] == SWEEP and f["step"] is None  # before the first step of that node
        ev = [e for _, e in rec.of(HealthFindingEvent) if tag in e.line]
        assert ev and all(e.run == SWEEP and e.step is None for e in ev)
    finally:
        remove_scratch_tree(s)


@infra_only
def test_plain_access_is_not_checked_everywhere(tmp_path: Path) -> None:
    """cvsnode cannot read /dev/kmsg (dmesg_restrict=1, no CAP_SYSLOG): not checked, never ok."""
    if Path("/proc/sys/kernel/dmesg_restrict").read_text().strip() != "1":
        pytest.skip("the not-checked path needs dmesg_restrict=1 on this machine")
    s = health_setup(tmp_path, access="plain")
    try:
        suite = make_suite(s, fast_options())
        rec = Recorder(suite)
        try:
            asyncio.run(suite.run())
        finally:
            suite.bus.close()
        res = s.results()
        for n in res["node_health"]:
            assert n["state"] == "not checked" and "Operation not permitted" in n["reason"], n
        states = [e.state for _, e in rec.of(NodeHealthEvent)]
        assert states and HealthState.OK not in states
        metrics = {m["name"]: m["value"] for m in s.run_record()["metrics"]}
        assert metrics["health.nodes.not_checked"] == 2
        html = (s.out / "report.html").read_text()
        assert re.search(r"<b>not checked</b>", html)
        assert "not checked" in (s.out / "summary.md").read_text()
        # the same events drive the TUI: its node table shows the state (see test_tui_health.py)
        assert os.path.exists(s.out / "events.jsonl")
    finally:
        remove_scratch_tree(s)


def _per_user_setup(tmp_path: Path, user2: str) -> Setup:
    """Node 0 logs in as the infra user, node 1 as ``user2`` (per-node users in the cluster file)."""
    s = health_setup(tmp_path, access="sudo", env={"CVS_STANDIN_STEP_SLEEP": "0.5"})
    cfg = json.loads(s.config.read_text())
    cfg["sweeps"][SWEEP]["steps"] = 400
    s.config.write_text(json.dumps(cfg, indent=2))
    cl = json.loads(s.cluster.read_text())
    h0, h1 = cl.pop("nodes")
    cl["node_dict"] = {h0: {}, h1: {"username": user2}}
    s.cluster.write_text(json.dumps(cl))
    # one shared folder, two node users: a default ACL lets each write what the other created (on a real
    # cluster the shared file system's group permissions do this)
    acl = f"u:{infra().user}:rwx,u:{user2}:rwx,d:u:{infra().user}:rwx,d:u:{user2}:rwx"
    subprocess.run(["setfacl", "-R", "-m", acl, str(s.root)], check=True, capture_output=True)
    return s


@needs_kmsg_writer
@infra_only
@pytest.mark.usefixtures("trust_injected")
def test_injected_gpu_reset_blames_the_node_that_read_it(tmp_path: Path) -> None:
    """The right node is blamed: only node 1's user may read the kernel log, so only node 1 sees the line.

    Both test nodes share this machine's kernel, so a per-node kernel cannot be staged. What can differ
    per node is access: node 0 logs in as ``cvsnode`` (no sudo rule: with ``kernel_log: sudo`` its
    follower cannot start, so it is ``not checked``), node 1 as ``cvsnode2``, whose sudoers rule allows
    exactly the kernel-log read. An amdgpu reset line written mid-run must fail the run with node 1 as
    root cause, attributed to the run and step, while node 0 stays ``not checked`` (neither blamed nor
    ok) in results.json, report.html and summary.md.
    """
    user2 = infra().user2
    if user2 is None or shutil.which("setfacl") is None:
        pytest.skip("needs the second node user and setfacl from a current .ci/infra.sh up")
    s = _per_user_setup(tmp_path, user2)
    h0, h1 = infra().nodes[:2]
    try:
        with sudo_kmsg_rule(user2):
            suite = make_suite(s, fast_options(fail_grace_s=0.5))
            tag, written, rec = asyncio.run(_run_and_inject(suite, before_first_step=False))
        failed = [
            (t, e.node)
            for t, e in rec.of(NodeStatusEvent)
            if e.state is NodeState.FAILED and "node health" in e.detail and tag in e.detail
        ]
        assert [n for _, n in failed] == [1], failed  # node 0 never read the line
        lat = _latency(rec, tag, written)
        print(
            "\nper-node health detection latency: kernel write -> node 1 FAILED "
            f"{lat['to_node_failed_s'] * 1000:.0f} ms, "
            f"-> run FAILED (RunEndEvent) {lat['to_run_end_s'] * 1000:.0f} ms"
        )
        run = s.run_record()
        assert run["outcome"] == "failed" and run["status"] == "FAIL"
        assert run["root_cause_node"] == 1
        assert run["reason"].startswith("node health: amdgpu_reset") and tag in run["reason"]
        assert f"on {h1}:" in run["reason"] and h0 not in run["reason"]
        res = s.results()
        nh = {n["rank"]: n for n in res["node_health"]}
        assert nh[1]["state"] == "fail" and nh[0]["state"] == "not checked", nh
        assert nh[0]["findings"] == [] and "sudo" in nh[0]["reason"]
        (mine,) = [f for f in nh[1]["findings"] if tag in f["line"]]
        assert mine["node"] == 1 and mine["run"] == SWEEP and mine["severity"] == "fatal"
        assert mine["step"] is not None and mine["step"] >= 3
        assert [f["node"] for f in run["health_findings"] if tag in f["line"]] == [1]
        metrics = {m["name"]: m["value"] for m in run["metrics"]}
        assert metrics["health.findings.fatal"] >= 1 and metrics["health.nodes.not_checked"] == 1
        html = (s.out / "report.html").read_text()
        assert re.search(
            rf'<tr class="health-not-checked">\s*<td>0</td><td class="mono">{re.escape(h0)}</td>', html
        )
        assert re.search(rf'<tr class="health-fail">\s*<td>1</td><td class="mono">{re.escape(h1)}</td>', html)
        md = (s.out / "summary.md").read_text()
        assert f"| 0 | `{h0}` | not checked |" in md and f"| 1 | `{h1}` | FAIL |" in md
        assert "- node 1 fatal `amdgpu_reset`" in md and "- node 0 " not in md
    finally:
        remove_scratch_tree(s)
