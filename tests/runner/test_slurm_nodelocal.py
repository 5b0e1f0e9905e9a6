"""Slurm without a shared run folder: node-local files, logs from the step's labelled stdout.

On the real two-node cluster (``.ci/slurm.sh up``). Its two nodes share this machine's disk, so the
node-local mode is forced with ``--slurm-files node-local``, or chosen by ``auto`` for a run folder the
nodes really cannot see (a tmpfs mounted in cvs-tui's own mount namespace). The trainer is the stand-in
of ``tests/suite_fixtures`` (a test double for MaxText only); srun, slurmstepd, scancel and the
node-local scratch are real.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import random
import shlex
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from _slurm_infra import needs_slurm, slurm, stepd_pid
from _slurm_suite import (
    CLI,
    SlurmSetup,
    cli_argv,
    cli_env,
    fast_options,
    make_setup,
    processes_with,
    run_suite_async,
    slurm_plan,
    squeue_jobs,
)

from cvs_tui.core.runner.slurm import target as st
from cvs_tui.core.runner.slurm.client import release_allocation, request_allocation
from cvs_tui.core.runner.slurm.nodelocal import NodeLocalStep
from cvs_tui.core.runner.slurm.stream import SRUN_MAX_MSG, LabelDemux
from cvs_tui.core.runner.suite import Suite

# the step's own files: none of them may be left in (or ever reach) the run folder in node-local mode
STEP_FILES = (".sh", ".yml", ".exit", ".pid", ".out", ".slurm", ".cancel")


def _mark(fn: Any) -> Any:
    for m in needs_slurm:
        fn = m(fn)
    return fn


def _node_local(s: SlurmSetup) -> SlurmSetup:
    """The stand-in config with its scratch (temp_dir) in the test's folder, to see it removed."""
    cfg = json.loads(s.config.read_text())
    cfg["paths"]["temp_dir"] = str(s.root / "scratch")
    s.config.write_text(json.dumps(cfg, indent=2))
    return s


def _scratch_left(s: SlurmSetup) -> list[str]:
    return [str(p) for p in (s.root / "scratch").rglob("*")] if (s.root / "scratch").exists() else []


def _step_files_in_run_folder(s: SlurmSetup) -> list[str]:
    return [str(p) for p in s.out.rglob("*") if p.is_file() and p.name.endswith(STEP_FILES)]


def _nothing_left(s: SlurmSetup) -> None:
    job = (s.plan().get("slurm") or {}).get("job_id")
    assert not [j for j in squeue_jobs() if job and j.split()[0] == job], squeue_jobs()
    assert processes_with(s.marker()) == []
    assert _scratch_left(s) == []
    assert _step_files_in_run_folder(s) == []


# ---------------------------------------------------------------------------------------------------------
# The label splitter
# ---------------------------------------------------------------------------------------------------------
TASK = r"""
r=$SLURM_NODEID
printf 'first %s\n\n\n' "$r"
printf 'part'; sleep 0.2; printf 'ial %s\n' "$r"
head -c 3000 /dev/zero | tr '\0' a; printf '\n'
head -c 1024 /dev/zero | tr '\0' b; printf '\n'
head -c 1023 /dev/zero | tr '\0' c; printf '\n'
i=0; while [ $i -lt 12 ]; do i=$((i+1)); printf 'rank %s line %s\n' "$r" "$i"; sleep 0.05; done
printf '\n'
printf 'tail %s' "$r"
"""


def _expected(rank: int) -> bytes:
    return (
        f"first {rank}\n\n\npartial {rank}\n".encode()
        + b"a" * 3000
        + b"\n"
        + b"b" * 1024
        + b"\n"
        + b"c" * 1023
        + b"\n"
        + b"".join(f"rank {rank} line {i}\n".encode() for i in range(1, 13))
        + b"\n"
        # the last line had no newline: srun gives it one (see slurm.stream); cvs-tui's launcher always
        # ends a log it finishes with a whole EXIT_CODE line
        + f"tail {rank}\n".encode()
    )


def _split(raw: bytes, sizes: list[int]) -> list[bytes]:
    d = LabelDemux(2)
    at = 0
    for n in sizes:
        d.feed(raw[at : at + n])
        at += n
    d.feed(raw[at:])
    d.close()
    assert d.stray_count == 0, list(d.stray)
    return [r.take() for r in d.ranks]


@_mark
async def test_label_demux_on_real_srun_output(tmp_path: Path) -> None:
    client = slurm().client()
    alloc = await request_allocation(client, ["-N", "2", "--oversubscribe", "-J", "cvs-test-demux"], 60)
    try:
        script = tmp_path / "task.sh"
        script.write_text(TASK)
        srun = ["srun", "--jobid", alloc.job_id, "-N2", "-n2", "--ntasks-per-node=1", "--quiet", "--label"]
        p = await client.run([*srun, "bash", str(script)], 60)
        assert p.rc == 0, p.err
    finally:
        assert await release_allocation(client, alloc) == []
    raw = p.out.encode()
    labels = [line[:1] for line in raw.split(b"\n") if line.startswith((b"0: rank", b"1: rank"))]
    switches = sum(a != b for a, b in itertools.pairwise(labels))
    assert switches >= 3, f"the ranks did not interleave: {labels}"
    assert raw.count(b"0: " + b"a" * SRUN_MAX_MSG + b"\n") == 2  # the long line came in pieces
    want = [_expected(0), _expected(1)]
    assert _split(raw, []) == want
    rng = random.Random(7)
    for _ in range(20):  # any chunking of srun's output (a pipe hands out what it has)
        assert _split(raw, [rng.randint(1, 700) for _ in range(40)]) == want


def test_label_demux_padded_labels_stray_lines_and_a_cut_last_line() -> None:
    d = LabelDemux(12)
    d.feed(b" 3: x\n11: y\n 3: \nsrun: oops\n12: out of range\n 3: cut")
    d.close()
    assert d.ranks[3].take() == b"x\n\ncut"
    assert d.ranks[11].take() == b"y\n"
    assert d.stray_count == 2 and list(d.stray) == [b"srun: oops", b"12: out of range"]
    assert all(r.eof for r in d.ranks)


def test_task_failure_line_needs_the_steps_tag() -> None:
    d = LabelDemux(2, failure_tag=b"CVS_TUI_TASK_FAILED=n0nce ")
    d.feed(b"0: CVS_TUI_TASK_FAILED=other 2\n1: CVS_TUI_TASK_FAILED=n0nce 2\n")
    assert d.ranks[0].task_failed is None and d.ranks[1].task_failed == 2
    assert d.ranks[1].take() == b"CVS_TUI_TASK_FAILED=n0nce 2\n"  # still part of the rank's bytes


def test_exit_line_hint_only_for_a_whole_last_line() -> None:
    d = LabelDemux(1)
    d.feed(b"0: EXIT_CODE=3 is what I print\n")
    assert not d.ranks[0].exit_line
    d.feed(b"0: EXIT_CODE=3\n")
    assert d.ranks[0].exit_line
    d.feed(b"0: more\n")
    assert not d.ranks[0].exit_line


# ---------------------------------------------------------------------------------------------------------
# The suite with node-local files
# ---------------------------------------------------------------------------------------------------------
async def _plan(s: SlurmSetup, name: str) -> Any:
    plan = await slurm_plan(s, ["-N", "2", "--oversubscribe", "-J", name])
    return st.with_files(plan, "node-local")


@_mark
def test_clean_run_node_local_logs_byte_identical(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    s = _node_local(make_setup(tmp_path))
    node_logs: dict[int, bytes] = {}
    original = NodeLocalStep._check_and_remove

    async def spy(self: NodeLocalStep, rank: int) -> str | None:
        # the node's own log, just before cvs-tui compares it with its copy and removes it
        node_logs[rank] = Path(self.log_path(rank)).read_bytes()
        assert Path(self.log_path(rank)).parent.stat().st_mode & 0o777 == 0o700
        return await original(self, rank)

    monkeypatch.setattr(NodeLocalStep, "_check_and_remove", spy)

    async def go() -> Suite:
        return await run_suite_async(s, await _plan(s, "cvs-nl-clean"), fast_options())

    suite = asyncio.run(go())
    assert suite.results_passed()
    rec = s.run_record()
    assert rec["outcome"] == "complete" and rec["status"] == "PASS"
    assert [n["exit_code"] for n in rec["nodes"]] == [0, 0]
    assert [n["last_step"] for n in rec["nodes"]] == [7, 7]
    assert s.stage("teardown")["state"] == "passed", s.stage("teardown")
    assert s.plan()["slurm"]["files"] == "node-local"
    for rank in (0, 1):
        copy = s.copied_log(rank).read_bytes()
        assert copy == node_logs[rank] and copy.endswith(b"EXIT_CODE=0\n")
        assert f"SLURM_NODEID={rank}\n".encode() in copy  # rank r ran as the step's r-th task
    assert not (s.out / "slurm").exists()
    _nothing_left(s)


@_mark
def test_silent_crash_on_rank_1_node_local(tmp_path: Path) -> None:
    s = _node_local(make_setup(tmp_path, env={"CVS_STANDIN_MODE": "crash", "CVS_STANDIN_FAIL_RANK": "1"}))

    async def go() -> Suite:
        return await run_suite_async(s, await _plan(s, "cvs-nl-crash"), fast_options())

    suite = asyncio.run(go())
    assert not suite.results_passed()
    rec = s.run_record()
    assert rec["outcome"] == "failed" and rec["status"] == "FAIL"
    assert rec["root_cause_node"] == 1
    assert "node 1 exited with code 3" in rec["reason"], rec["reason"]
    assert rec["nodes"][1]["exit_code"] == 3
    states = [e["state"] for e in s.events() if e["type"] == "NodeStatusEvent" and e["node"] == 0]
    assert "stopped" in states, states
    assert s.copied_log(1).read_bytes().endswith(b"EXIT_CODE=3\n")
    assert s.copied_log(0).read_bytes().endswith(b"EXIT_CODE=143\n")  # TERMed, its own status recorded
    assert s.stage("teardown")["state"] == "passed", s.stage("teardown")
    _nothing_left(s)


@_mark
def test_ctrl_c_node_local_leaves_nothing(tmp_path: Path) -> None:
    s = _node_local(make_setup(tmp_path, env={"CVS_STANDIN_STEP_SLEEP": "0.05"}, steps=5000))
    argv = cli_argv(
        str(s.config), "--slurm", "--no-ui", "--out", str(s.out), "--slurm-files", "node-local",
        "--slurm-args", "-N 2 --oversubscribe -J cvs-nl-ctrlc",
    )  # fmt: skip
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=cli_env())
    try:
        end = time.monotonic() + 90
        copies = [s.copied_log(r) for r in (0, 1)]
        while min(p.read_bytes().count(b"completed step:") if p.exists() else 0 for p in copies) < 5:
            assert proc.poll() is None, proc.communicate()[0]
            assert time.monotonic() < end, "the ranks did not start training"
            time.sleep(0.05)
        assert processes_with(s.marker()) and _scratch_left(s)
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=90)
        assert proc.returncode == 130, out
        assert s.run_record()["outcome"] == "interrupted"
        assert s.stage("teardown")["state"] == "passed", s.stage("teardown")
        assert not [j for j in squeue_jobs() if "cvs-nl-ctrlc" in j], squeue_jobs()
        for r in (0, 1):
            assert s.copied_log(r).read_bytes().endswith(b"EXIT_CODE=143\n")
        _nothing_left(s)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@_mark
def test_lost_node_node_local_copy_completed_through_a_side_command(tmp_path: Path) -> None:
    """rank 1's slurmstepd is killed (-9) mid-run and its trainer frozen: srun hangs and rank 1's output
    stops reaching it. The watchdog judges the run hung; teardown stops the orphan through a side
    command, and the end of rank 1's log (its EXIT_CODE line), which srun never delivered, is read
    from the node, so the copy is still the node's log byte for byte."""
    s = _node_local(make_setup(tmp_path, env={"CVS_STANDIN_STEP_SLEEP": "0.2"}, steps=5000))

    async def go() -> None:
        plan = await _plan(s, "cvs-nl-lost")
        task = asyncio.create_task(run_suite_async(s, plan, fast_options(hang_min_s=3.0)))
        end = time.monotonic() + 60
        copies = [s.copied_log(r) for r in (0, 1)]
        while min(p.read_bytes().count(b"completed step:") if p.exists() else 0 for p in copies) < 5:
            assert time.monotonic() < end and not task.done()
            await asyncio.sleep(0.1)
        (rank1,) = (s.root / "scratch").glob("*/*/node1")
        step = (rank1 / "node1.slurm").read_text().split()[1]
        pid = stepd_pid(step, "node2")
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        os.killpg(int((rank1 / "node1.log.pid").read_text()), signal.SIGSTOP)
        await asyncio.wait_for(task, 120)

    asyncio.run(go())
    rec = s.run_record()
    assert rec["status"] == "FAIL" and rec["outcome"] == "hung", rec["outcome"]
    assert rec["root_cause_node"] == 1, rec["reason"]
    assert rec["nodes"][1]["exit_code"] == 137
    assert s.stage("teardown")["state"] == "passed", s.stage("teardown")
    assert s.copied_log(1).read_bytes().endswith(b"EXIT_CODE=137\n")
    _nothing_left(s)


@_mark
def test_a_node_that_cannot_take_the_files_fails_the_run_at_once(tmp_path: Path) -> None:
    """temp_dir cannot be created on the nodes: each task says why on its stdout with its own exit
    status (no launcher ran, so no .exit file will come) instead of leaving the run to the watchdog."""
    s = _node_local(make_setup(tmp_path))
    cfg = json.loads(s.config.read_text())
    cfg["paths"]["temp_dir"] = "/dev/null/cvs-scratch"
    s.config.write_text(json.dumps(cfg, indent=2))

    async def go() -> Suite:
        return await run_suite_async(
            s, await _plan(s, "cvs-nl-nodir"), fast_options(compile_allowance_s=600.0)
        )

    t0 = time.monotonic()
    suite = asyncio.run(go())
    assert time.monotonic() - t0 < 120  # far below the 600 s the watchdog would wait
    assert not suite.results_passed()
    rec = s.run_record()
    assert rec["outcome"] == "failed" and rec["root_cause_node"] in (0, 1), rec["reason"]
    assert [n["exit_code"] for n in rec["nodes"]] == [2, 2]
    for rank in (0, 1):
        log = s.copied_log(rank).read_text()
        assert f"node{rank + 1}: cannot create /dev/null/cvs-scratch/" in log, log
    assert s.stage("teardown")["state"] == "passed", s.stage("teardown")
    _nothing_left(s)


@_mark
def test_auto_picks_node_local_when_the_nodes_do_not_see_the_run_folder(tmp_path: Path) -> None:
    """cvs-tui runs in its own mount namespace with the run folder on a tmpfs there: the Slurm nodes
    (slurmd in the machine's namespace) cannot see it, as on a cluster without shared storage."""
    s = _node_local(make_setup(tmp_path))
    s.out.mkdir()
    kept = tmp_path / "kept"
    kept.mkdir()
    inner = cli_argv(
        str(s.config), "--slurm", "--no-ui", "--out", str(s.out), "--slurm-args", "-N 2 --oversubscribe"
    )
    script = (
        f"mount -t tmpfs cvs-private {s.out} && {shlex.join(inner)}; rc=$?; cp -a {s.out}/. {kept}/; exit $rc"
    )
    p = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-c", script],
        capture_output=True, text=True, timeout=240, env=cli_env(),
    )  # fmt: skip
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert "does not see" not in p.stdout + p.stderr
    assert f"rank 0 (node1), rank 1 (node2): no run folder {s.out}" in p.stdout, p.stdout[-3000:]
    assert list(s.out.iterdir()) == []  # the run folder lived on the private tmpfs only
    s.out = kept
    rec = s.run_record()
    assert rec["status"] == "PASS" and [n["exit_code"] for n in rec["nodes"]] == [0, 0]
    assert "files" not in s.plan()["slurm"]  # the default, left out of plan.json
    assert s.stage("teardown")["state"] == "passed", s.stage("teardown")
    _nothing_left(s)


def test_plan_shows_the_files_mode(tmp_path: Path) -> None:
    s = make_setup(tmp_path)
    argv = [str(CLI), "plan", str(s.config), "--slurm", "--slurm-args", "-N 2", "--slurm-files", "node-local"]
    p = subprocess.run(argv, capture_output=True, text=True, env=cli_env())
    assert p.returncode == 0, p.stderr
    want = "files       node-local: node-local scratch (temp_dir); logs from the step's labelled stdout"
    assert want in p.stdout, p.stdout
    assert "node-local files (--slurm-files node-local), logs from the step's labelled stdout" in p.stdout
    for bad, says in (
        (["--slurm-files", "shared"], "--slurm-files: only with --slurm"),
        (["--slurm", "--slurm-args", "-N 2", "--slurm-files", "nfs"], "--slurm-files: invalid choice: 'nfs'"),
    ):
        p = subprocess.run(
            [str(CLI), "plan", str(s.config), *bad], capture_output=True, text=True, env=cli_env()
        )
        assert p.returncode == 2 and says in p.stderr and "Traceback" not in p.stderr, p.stderr


@_mark
@pytest.mark.maxtext
def test_two_ranks_of_real_maxtext_node_local(tmp_path: Path) -> None:
    """tests/e2e/test_e2e_slurm_maxtext.py's scenario (real MaxText on the CPU, two ranks through srun) with
    node-local files: the logs come through the step's labelled stdout only."""
    from tests.e2e.test_e2e_local_maxtext import MAXTEXT_PY, TWOPROC, _variant

    if MAXTEXT_PY is None:
        pytest.skip("no MaxText workload environment: run scripts/setup-maxtext.sh")
    config = _variant(TWOPROC, tmp_path, {"smoke.enabled": False, "checkpoint_resume.enabled": False})
    out = tmp_path / "run"
    argv = cli_argv(
        str(config), "--slurm", "--slurm-args", "-N 2 --oversubscribe -J cvs-nl-maxtext",
        "--slurm-files", "node-local", "--no-ui", "--out", str(out),
    )  # fmt: skip
    env = dict(cli_env(), CVS_TUI_MAXTEXT_PYTHON=str(MAXTEXT_PY))
    t0 = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=900)
    wall = time.monotonic() - t0
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    results = json.loads((out / "results.json").read_text())
    (run,) = [r for r in results["runs"] if r["kind"] == "sweep"]
    assert run["status"] == "PASS" and len(run["nodes"]) == 2
    for node in run["nodes"]:
        assert node["exit_code"] == 0 and node["last_step"] == run["total_steps"] - 1
    assert run["environment"]["num_devices"] == 2
    stages = {s["name"]: s["state"] for s in results["stages"]}
    assert stages["teardown"] == "passed", results["stages"]
    for rank in (0, 1):
        assert (out / "logs" / run["slug"] / f"node{rank}.log").read_bytes().endswith(b"EXIT_CODE=0\n")
    assert not (out / "slurm").exists()
    assert not [j for j in squeue_jobs() if "cvs-nl-maxtext" in j]
    tps = {v["metric"]: v["actual"] for v in run["verdicts"]}.get("training.tokens_per_sec_total")
    took = run["ended_at"] - run["started_at"]
    print(f"node-local MaxText: cvs-tui {wall:.1f} s, the run {took:.1f} s, tokens/s total {tps}")
