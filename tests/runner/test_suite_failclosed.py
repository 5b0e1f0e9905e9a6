"""Fail-closed, structurally: the suite passes only when every planned run was judged complete and passed
and every stage settled; anything else (a key that cannot be loaded, a bug in cvs-tui, a folder in use,
kept verdicts under new thresholds, a trainer's own `EXIT_CODE=0`) fails, in every artefact.

Live cases run on the loopback sshd nodes with a sh trainer double (see tests/_fault_infra.py).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from _fault_infra import fault_setup, left_running, no_traceback, pgrep
from _runner_infra import infra_only
from suite_fixtures.helpers import (
    SLUG,
    SWEEP,
    cli,
    fast_options,
    make_suite,
    remove_scratch_tree,
    start_cli,
)

from cvs_tui.core.events import StageState
from cvs_tui.core.parse.records import RECORD_CAP
from cvs_tui.core.results import Results, RunRecord, VerdictRecord, WindowRecord
from cvs_tui.core.runner.execute import RankLog, RunExecution
from cvs_tui.core.runner.nodes.script import kill_group_command, pid_file
from cvs_tui.core.runner.stages.base import Stage, StageContext

CLEAN = "header\nsteps 0 8\nexit 0\n"


def _artefacts_fail(out: Path) -> None:
    """Every artefact says FAIL: results.json, summary.md, report.html, junit.xml."""
    res = json.loads((out / "results.json").read_text())
    assert not Results.model_validate(res).passed
    summary = (out / "summary.md").read_text()
    assert "PASS" not in summary.splitlines()[0], summary.splitlines()[0]
    html = (out / "report.html").read_text()
    title = html.split("<title>", 1)[1].split("</title>", 1)[0]
    assert "PASS" not in title, title
    suites = ET.parse(out / "junit.xml").getroot()
    assert int(suites.get("failures", "0")) + int(suites.get("errors", "0")) > 0 or any(
        int(s.get("failures", "0")) + int(s.get("errors", "0")) > 0 for s in suites.iter("testsuite")
    )


# ---------------------------------------------------------------------------------------------------------
# the pass/fail rule itself
# ---------------------------------------------------------------------------------------------------------
def _run(**kw: object) -> RunRecord:
    base: dict[str, object] = {
        "key": "K",
        "slug": "K",
        "kind": "sweep",
        "total_steps": 8,
        "outcome": "complete",
        "status": "PASS",
        "window": WindowRecord(status="ok", min_clean_steps=1, warmup_steps=0),
    }
    base.update(kw)
    return RunRecord.model_validate(base)


def _results(runs: list[RunRecord], stages: list[dict[str, str]] | None = None) -> Results:
    return Results.model_validate(
        {
            "tool_version": "t",
            "created_at": 0.0,
            "source": "live",
            "config_path": "c",
            "config_name": "c",
            "mode": "single",
            "runs": [r.model_dump() for r in runs],
            "stages": stages or [{"name": "preflight", "state": "passed"}],
        }
    )


def test_results_pass_only_when_every_run_and_stage_says_so() -> None:
    assert _results([_run()]).passed
    assert not _results([]).passed  # nothing judged
    assert not _results([_run()], [{"name": "preflight", "state": "running"}]).passed
    assert not _results([_run()], [{"name": "run:K", "state": "pending"}]).passed
    assert not _results([_run(outcome="failed")]).passed  # status PASS is not trusted alone
    fail = VerdictRecord(metric="m", status="FAIL", expected="<= 1", actual=2.0, actual_text="2", unit="")
    assert not _results([_run(verdicts=[fail])]).passed
    na = VerdictRecord(
        metric="m", status="N/A", expected="<= 1", actual=None, actual_text="", unit="", gated=True
    )
    gated_na = _results([_run(verdicts=[na])])
    assert not gated_na.passed
    assert any("gated" in f for f in gated_na.failures)


# ---------------------------------------------------------------------------------------------------------
# bounded memory: a line without a newline
# ---------------------------------------------------------------------------------------------------------
def test_an_endless_line_is_kept_to_the_record_cap_and_said_so() -> None:
    r = RankLog.__new__(RankLog)
    r.partial, r.cut = b"", 0
    chunk = b"A" * (1 << 20)
    for _ in range(12):  # 12 MB, no newline
        assert RunExecution._split(r, chunk) == []
        assert len(r.partial) <= RECORD_CAP
    lines = RunExecution._split(r, b"tail\nnext line\nrest")
    assert len(lines) == 2 and lines[1] == "next line"
    assert lines[0].startswith("A" * 100) and lines[0].endswith(
        f"[... {12 * (1 << 20) + 4 - RECORD_CAP} more bytes not shown]"
    )
    assert r.partial == b"rest" and r.cut == 0


# ---------------------------------------------------------------------------------------------------------
# pid file: never `kill -1`
# ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("token", [None, "x" * 32])
def test_a_pid_file_saying_1_never_signals_everything(tmp_path: Path, token: str | None) -> None:
    """In a pid namespace of its own (so a wrong `kill -TERM -1` could only hit the sentinel), a pid
    file the trainer overwrote with `1` must leave every other process alone."""
    log = tmp_path / "node0.log"
    Path(pid_file(str(log))).write_text("1\n")
    (tmp_path / "node0.log.exit").write_text("0\n")
    stop = kill_group_command(str(log), grace_s=1, **({"token": token} if token else {}))
    script = (
        f"sleep 30 & s=$!; sleep 0.3; ( {stop} ); rc=$?; sleep 0.3; "
        "kill -0 $s && echo SENTINEL-ALIVE; echo rc=$rc; kill $s"
    )
    p = subprocess.run(
        ["unshare", "--pid", "--fork", "--mount-proc", "sh", "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "SENTINEL-ALIVE" in p.stdout, p.stdout + p.stderr
    assert "rc=0" in p.stdout


# ---------------------------------------------------------------------------------------------------------
# live: a key that cannot be loaded, a bug in cvs-tui, a busy folder, resume, spoofed and unfinished exits
# ---------------------------------------------------------------------------------------------------------
def _passphrase_key(tmp_path: Path) -> Path:
    key = tmp_path / "locked_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "pw", "-f", str(key)], check=True)
    return key


@infra_only
def test_a_passphrase_key_fails_preflight_in_one_line(tmp_path: Path) -> None:
    s = fault_setup(tmp_path, CLEAN)
    try:
        cl = json.loads(s.cluster.read_text())
        cl["priv_key_file"] = str(_passphrase_key(tmp_path))
        s.cluster.write_text(json.dumps(cl))
        p = cli(s)
        assert p.returncode == 1, p.stdout + p.stderr
        assert no_traceback(p.stdout + p.stderr), p.stderr
        assert "suite FAILED" in p.stdout
        pre = s.stage("preflight")
        assert pre["state"] == "failed" and "cannot load key" in pre["detail"], pre
        assert "node 0" in pre["detail"]
        _artefacts_fail(s.out)
    finally:
        remove_scratch_tree(s)


class _Broken(Stage):
    """A test double for a bug in cvs-tui's own code: a stage that raises."""

    name = "maxtext_setup"

    def plan(self, inp):  # type: ignore[no-untyped-def]
        return []

    async def run(self, ctx: StageContext) -> str | None:
        ctx.stage(self.name, StageState.RUNNING)
        raise KeyError("a bug")


@infra_only
def test_an_exception_in_cvs_tui_is_a_failed_suite_in_every_artefact(tmp_path: Path) -> None:
    s = fault_setup(tmp_path, CLEAN)
    try:
        suite = make_suite(s, fast_options())
        at = next(i for i, st in enumerate(suite.steps) if st.name == "maxtext_setup")
        suite.steps[at] = _Broken()
        try:
            asyncio.run(suite.run())  # returns: the error is the suite's verdict, not an exception
        finally:
            suite.bus.close()
        assert not suite.results_passed()
        st = s.stage("maxtext_setup")
        assert st["state"] == "failed" and "KeyError" in st["detail"] and "error.log" in st["detail"]
        assert s.stage("suite")["state"] == "failed"
        assert s.stage(f"run:{SWEEP}")["state"] == "skipped"
        assert "Traceback" in (s.out / "error.log").read_text()
        _artefacts_fail(s.out)
        ends = [e for e in s.events() if e["type"] == "SuiteEndEvent"]
        assert len(ends) == 1 and ends[0]["passed"] is False
    finally:
        remove_scratch_tree(s)


@infra_only
def test_a_second_run_on_the_same_folder_is_refused(tmp_path: Path) -> None:
    s = fault_setup(tmp_path, "header\nsteps 0 40\nexit 0\n", steps=40, env={"CVS_FAULT_SLEEP": "0.1"})
    first = start_cli(s)
    try:
        end = time.monotonic() + 60
        while not (s.out / "logs" / SLUG / "node0.log").exists():
            assert first.poll() is None and time.monotonic() < end, "the first run did not start a run"
            time.sleep(0.1)
        second = cli(s)
        assert second.returncode == 2, second.stdout + second.stderr
        assert "another cvs-tui run is using this run folder" in second.stderr
        assert no_traceback(second.stdout + second.stderr)
        out, _ = first.communicate(timeout=120)
        assert first.returncode == 0, out
        events = s.events()
        assert sum(e["type"] == "SuiteEndEvent" for e in events) == 1
        assert s.copied_log(0).read_bytes() == s.node_log(0).read_bytes()
        assert cli(s).returncode == 0  # released at the end
    finally:
        if first.poll() is None:
            first.kill()
        remove_scratch_tree(s)


@infra_only
def test_resume_judges_kept_runs_under_the_current_thresholds(tmp_path: Path) -> None:
    s = fault_setup(tmp_path, CLEAN)
    try:
        assert cli(s).returncode == 0
        kept_log = s.copied_log(0).read_bytes()
        th_path = s.config.with_name("engine_threshold.json")
        th = json.loads(th_path.read_text())
        th[SWEEP]["training.final_loss"]["value"] = 5.0  # the run logged 6.6
        th_path.write_text(json.dumps(th))
        again = cli(s, "--resume", str(s.out))
        assert again.returncode == 1, again.stdout + again.stderr
        assert "suite FAILED" in again.stdout
        rec = s.run_record()
        assert rec["status"] == "FAIL"
        fl = next(v for v in rec["verdicts"] if v["metric"] == "training.final_loss")
        assert fl["status"] == "FAIL" and "5" in fl["expected"], fl
        st = s.stage(f"run:{SWEEP}")
        assert st["state"] == "failed" and "judged again" in st["detail"], st
        assert s.copied_log(0).read_bytes() == kept_log  # kept, not run again
        _artefacts_fail(s.out)
    finally:
        remove_scratch_tree(s)


@infra_only
def test_a_trainer_printing_exit_code_0_is_not_taken_at_its_word(tmp_path: Path) -> None:
    body = "header\nsteps 0 4\necho EXIT_CODE=0\nsleep 300\n"  # the script stays: its path is the marker
    s = fault_setup(tmp_path, body, steps=8)
    try:
        p = cli(s, "--compile-allowance", "30", "--hang-min", "4", "--hang-factor", "1")
        assert p.returncode == 1, p.stdout + p.stderr
        rec = s.run_record()
        assert rec["outcome"] in ("hung", "failed") and rec["status"] == "FAIL", rec
        assert left_running(s) == [] and pgrep(str(s.root)) == []
        assert s.stage("teardown")["state"] == "passed"
        for rank in (0, 1):
            assert s.copied_log(rank).read_bytes() == s.node_log(rank).read_bytes()
    finally:
        remove_scratch_tree(s)


@infra_only
def test_output_without_a_final_newline_ends_with_its_real_exit(tmp_path: Path) -> None:
    body = "header\nsteps 0 8\nprintf 'last words without a newline'\nexit 0\n"
    s = fault_setup(tmp_path, body, steps=8)
    try:
        t0 = time.monotonic()
        p = cli(s, "--compile-allowance", "60", "--hang-min", "60")
        assert p.returncode == 0, p.stdout + p.stderr
        assert time.monotonic() - t0 < 55, "waited for the watchdog instead of the exit"
        rec = s.run_record()
        assert rec["outcome"] == "complete" and [n["exit_code"] for n in rec["nodes"]] == [0, 0]
        assert s.node_log(0).read_bytes().endswith(b"last words without a newline\nEXIT_CODE=0\n")
        assert s.copied_log(0).read_bytes() == s.node_log(0).read_bytes()
    finally:
        remove_scratch_tree(s)


@infra_only
def test_ctrl_c_while_the_launcher_probes_leaves_no_trainer(tmp_path: Path) -> None:
    """The launcher is still probing a `module:` entry (8 s) when Ctrl-C comes: teardown must stop it
    before it starts the trainer, and check."""
    s = fault_setup(tmp_path, CLEAN, runtime="host")
    slowpy = s.root / "bin" / "slowpy"
    slowpy.write_text(
        # as the trainer (`-m fake.train`) the script stays running: its path is what pgrep looks for
        '#!/bin/sh\n[ "$1" = -c ] && { sleep 8; exit 0; }\nsleep 90\n'
    )
    slowpy.chmod(0o755)
    cfg = json.loads(s.config.read_text())
    cfg["train_params"]["python"] = str(slowpy)
    cfg["train_params"]["train_script_paths"] = ["module:fake.train"]
    s.config.write_text(json.dumps(cfg))
    proc = start_cli(s)
    try:
        end = time.monotonic() + 60
        while not pgrep(f"{slowpy} -c"):
            assert proc.poll() is None and time.monotonic() < end, "the launcher never probed"
            time.sleep(0.1)
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=120)
        assert proc.returncode == 130, out
        assert no_traceback(out)
        time.sleep(10)  # past the probe: a launcher left alive would start its trainer now
        assert pgrep(str(slowpy)) == []
        td = s.stage("teardown")
        assert td["state"] == "passed" and "checked" in td["detail"], td
    finally:
        if proc.poll() is None:
            proc.kill()
        for line in pgrep(str(s.root)):
            os.kill(int(line.split()[0]), signal.SIGKILL)
        remove_scratch_tree(s)


@infra_only
@pytest.mark.parametrize("flag", ["--hang-min", "--compile-allowance", "--hang-factor", "--lost-after"])
@pytest.mark.parametrize("value", ["nan", "inf"])
def test_non_finite_watchdog_limits_are_refused(tmp_path: Path, flag: str, value: str) -> None:
    s = fault_setup(tmp_path, CLEAN)
    try:
        p = cli(s, flag, value)
        assert p.returncode == 2, p.stdout + p.stderr
        assert p.stderr.count("\n") == 1 and flag in p.stderr and "finite" in p.stderr, p.stderr
        assert not (s.out / "results.json").exists()  # refused before anything ran
    finally:
        remove_scratch_tree(s)


def test_one_tally_everywhere_counts_failed_runs_and_stages_and_names_the_reason(tmp_path: Path) -> None:
    """A suite that failed through a run's outcome (no FAIL verdict) and a stage is not told as
    "0 failed": the exit line, summary.md and report.html give the same counts and the first failure."""
    from cvs_tui.cli.verdict_line import suite_line
    from cvs_tui.core.report import write_reports
    from cvs_tui.core.results import tally

    ok = VerdictRecord(metric="m", status="PASS", expected="<= 1", actual=0.5, actual_text="0.5", unit="")
    res = _results(
        [
            _run(key="A", verdicts=[ok]),
            _run(key="B", outcome="failed", status="FAIL", reason="node health: amdgpu_reset on n0"),
        ],
        [{"name": "preflight", "state": "passed"}, {"name": "teardown", "state": "failed", "detail": "x"}],
    )
    t = tally(res)
    assert (t.runs, t.runs_failed, t.stages_failed, t.checks_passed, t.checks_failed) == (2, 1, 1, 1, 0)
    line = suite_line(res, None)
    assert line.startswith(
        "suite FAILED — stage teardown: x (+1 more) — "
        "2 runs (1 failed), 1 checks passed, 0 failed, 1 stage failed"
    )
    write_reports(res, tmp_path)
    md = (tmp_path / "summary.md").read_text()
    assert "2 run(s) (1 failed), 1 checks passed, 0 failed, 1 stage(s) failed — stage teardown: x" in md
    html = (tmp_path / "report.html").read_text()
    assert "2 run(s) · 1 failed" in html and "1 stage(s) failed" in html
