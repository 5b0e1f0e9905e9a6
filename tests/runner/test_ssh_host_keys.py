"""Audit 2 #16: host keys are checked against an explicit known_hosts (never what ~/.ssh/config says), and
opting out is said in the plan."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import asyncssh
import pytest
from _analysis_samples import load_local

from cvs_tui.core.cluster import load_cluster
from cvs_tui.core.plan import HOST_KEYS_OFF, build_plan
from cvs_tui.core.runner.nodes.ssh import SSHTransport


def _options(t: SSHTransport) -> asyncssh.SSHClientConnectionOptions:
    opts = t._options()
    return asyncio.run(
        asyncssh.SSHClientConnectionOptions.construct(None, host=t.host, **{**opts, "config": ()})
    )


def test_user_known_hosts_file_none_does_not_turn_checks_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ssh = tmp_path / ".ssh"
    ssh.mkdir()
    (ssh / "config").write_text("Host *\n UserKnownHostsFile none\n")
    monkeypatch.setenv("HOME", str(tmp_path))
    t = SSHTransport("n", user="u", port=22)
    assert t._options()["known_hosts"] is not None
    assert _options(t).known_hosts is not None  # asyncssh verifies (None would mean no checks)
    (ssh / "known_hosts").write_text("")
    assert t._options()["known_hosts"] == str(ssh / "known_hosts")
    assert SSHTransport("n", verify_host_keys=False)._options()["known_hosts"] is None


def test_opting_out_is_a_plan_warning(tmp_path: Path) -> None:
    cl = tmp_path / "cluster.json"
    cl.write_text(json.dumps({"node_dict": {"10.0.0.5": {}}, "username": "u", "verify_host_keys": False}))
    loaded = load_local(tmp_path, steps=20)
    plan = build_plan(loaded, load_cluster(cl), out_dir=tmp_path, run_id="t")
    assert HOST_KEYS_OFF in plan.warnings
    cl.write_text(json.dumps({"node_dict": {"10.0.0.5": {}}, "username": "u"}))
    assert HOST_KEYS_OFF not in build_plan(loaded, load_cluster(cl), out_dir=tmp_path, run_id="t").warnings


def test_opting_out_is_said_at_the_top_of_the_report(tmp_path: Path) -> None:
    """The warning reaches results.json and report.html, not only the terminal (audit #16)."""
    from cvs_tui.core.judge.finalize import base_results
    from cvs_tui.core.report import write_reports

    cl = tmp_path / "cluster.json"
    cl.write_text(json.dumps({"node_dict": {"10.0.0.5": {}}, "username": "u", "verify_host_keys": False}))
    plan = build_plan(load_local(tmp_path, steps=20), load_cluster(cl), out_dir=tmp_path, run_id="t")
    results = base_results(plan, source="live", hosts=["10.0.0.5"])
    assert HOST_KEYS_OFF in results.warnings
    html = write_reports(results, tmp_path / "out")["html"].read_text(encoding="utf-8")
    top = html[: html.index('id="overall"') + 2000]
    assert "warning: SSH host-key checks are off" in top
