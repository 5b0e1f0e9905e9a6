"""The suite on real nodes (loopback sshd, dockerd): how each way a run can end is judged.

Two nodes reached over SSH, a busybox container per run reached through each node's SSH-forwarded
Docker socket, and a stand-in trainer (`suite_fixtures/standin_trainer.sh`; see its header) in place
of MaxText. Everything is asserted from what a user gets: exit code, results.json, events.jsonl and
the node logs in the run folder.
"""

from __future__ import annotations

from pathlib import Path

from _runner_infra import needs_infra
from suite_fixtures.helpers import (
    SWEEP,
    cli,
    containers_of,
    fast_options,
    make_setup,
    processes_with,
    remove_scratch_tree,
    run_suite,
)

pytestmark = needs_infra


def _assert_nothing_left(setup) -> None:  # type: ignore[no-untyped-def]
    assert containers_of(setup.run_id()) == []
    assert processes_with(setup.marker()) == []


def _node_states(events: list[dict], run: str = SWEEP) -> dict[int, list[str]]:
    out: dict[int, list[str]] = {}
    for e in events:
        if e["type"] == "NodeStatusEvent" and e["run"] == run:
            out.setdefault(e["node"], []).append(e["state"])
    return out


def test_clean_two_node_docker_run_passes_with_verdicts(tmp_path: Path) -> None:
    s = make_setup(tmp_path, smoke=True)
    try:
        p = cli(s)
        assert p.returncode == 0, p.stdout + p.stderr
        res = s.results()
        assert res["source"] == "live" and len(res["hosts"]) == 2
        stages = {st["name"]: st["state"] for st in res["stages"]}
        for name in ("preflight", "launch_container", "rdma", "smoke", f"run:{SWEEP}", "teardown", "report"):
            assert stages[name] == "passed", (name, res["stages"])
        rec = s.run_record()
        assert rec["outcome"] == "complete" and rec["status"] == "PASS"
        assert [n["exit_code"] for n in rec["nodes"]] == [0, 0]
        assert [n["last_step"] for n in rec["nodes"]] == [7, 7]
        verdicts = {v["metric"]: v for v in rec["verdicts"]}
        for gated in (
            "training.tflops_per_sec_per_gpu",
            "training.tokens_per_sec_per_gpu",
            "training.final_loss",
            "training.loss_decreased",
        ):
            assert verdicts[gated]["status"] == "PASS" and verdicts[gated]["gated"], verdicts[gated]
        assert verdicts["training.final_loss"]["actual"] == 6.703  # 8.000 falling by 1/40 a step for 7 steps
        # each node's log is in the run folder byte for byte, ending with the launcher's exit line
        for rank in (0, 1):
            own = s.node_log(rank).read_bytes()
            assert s.copied_log(rank).read_bytes() == own
            assert own.endswith(b"EXIT_CODE=0\n")
        ends = [e for e in s.events() if e["type"] == "RunEndEvent"]
        assert [(e["run"], e["outcome"]) for e in ends] == [("SMOKE", "complete"), (SWEEP, "complete")]
        assert (s.out / "report.html").is_file() and (s.out / "junit.xml").is_file()
        _assert_nothing_left(s)
    finally:
        remove_scratch_tree(s)


def test_silent_crash_fails_naming_exit_code(tmp_path: Path) -> None:
    """Rank 1 exits 3 without printing any error; rank 0 waits on it forever (a victim)."""
    s = make_setup(tmp_path, env={"CVS_STANDIN_MODE": "crash", "CVS_STANDIN_FAIL_RANK": "1"})
    try:
        suite = run_suite(s, fast_options())
        assert not suite.results_passed()
        rec = s.run_record()
        assert rec["outcome"] == "failed" and rec["status"] == "FAIL"
        assert "exited with code" in rec["reason"], rec["reason"]
        assert rec["nodes"][1]["exit_code"] == 3
        assert rec["errors"] == [] or all(e["node"] != 1 for e in rec["errors"])  # it printed none
        states = _node_states(s.events())
        assert "stopped" in states[0], states  # the victim was stopped, not left waiting
        assert s.node_log(1).read_bytes().endswith(b"EXIT_CODE=3\n")
        assert s.stage(f"run:{SWEEP}")["state"] == "failed"
        _assert_nothing_left(s)
    finally:
        remove_scratch_tree(s)


def test_silent_crash_root_cause_is_the_crashed_node(tmp_path: Path) -> None:
    s = make_setup(tmp_path, env={"CVS_STANDIN_MODE": "crash", "CVS_STANDIN_FAIL_RANK": "1"})
    try:
        run_suite(s, fast_options())
        rec = s.run_record()
        assert rec["root_cause_node"] == 1
        assert "node 1 exited with code 3" in rec["reason"], rec["reason"]
    finally:
        remove_scratch_tree(s)


def test_fatal_signature_on_second_node_only(tmp_path: Path) -> None:
    s = make_setup(tmp_path, env={"CVS_STANDIN_MODE": "fatal", "CVS_STANDIN_FAIL_RANK": "1"})
    try:
        run_suite(s, fast_options())
        rec = s.run_record()
        assert rec["outcome"] == "failed" and rec["status"] == "FAIL"
        assert rec["root_cause_node"] == 1, rec["reason"]
        assert rec["reason"].startswith("node 1 line "), rec["reason"]
        assert "JAX distributed service detected fatal errors" in rec["reason"]
        fatal = [e for e in rec["errors"] if e["severity"] == "fatal"]
        assert fatal and {e["node"] for e in fatal} == {1}
        assert "JAX distributed service detected fatal errors" in fatal[0]["text"]
        states = _node_states(s.events())
        assert "failed" in states[1] and "stopped" in states[0], states
        assert "failed" not in states[0]
        hits = [
            e for e in s.events() if e["type"] == "NodeLogEvent" and e["event"].get("severity") == "fatal"
        ]
        assert hits and {e["node"] for e in hits} == {1}
        _assert_nothing_left(s)
    finally:
        remove_scratch_tree(s)


def test_hang_is_judged_hung_within_the_configured_limits(tmp_path: Path) -> None:
    """Steps 0-2, then silence: HUNG after --hang-min seconds (no step-time history yet)."""
    s = make_setup(tmp_path, env={"CVS_STANDIN_MODE": "hang"})
    try:
        p = cli(s, "--compile-allowance", "20", "--hang-min", "2", "--hang-factor", "2")
        assert p.returncode == 1, p.stdout + p.stderr
        rec = s.run_record()
        assert rec["outcome"] == "hung" and rec["status"] == "FAIL"
        assert "no progress for" in rec["reason"] and "at least 2 s" in rec["reason"], rec["reason"]
        assert rec["root_cause_node"] in (0, 1)
        assert [n["last_step"] for n in rec["nodes"]] == [2, 2]
        states = _node_states(s.events())
        assert all("stopped" in states[r] or "hung" in states[r] for r in (0, 1)), states
        _assert_nothing_left(s)
    finally:
        remove_scratch_tree(s)


def test_nan_loss_fails(tmp_path: Path) -> None:
    s = make_setup(tmp_path, env={"CVS_STANDIN_MODE": "nan"})
    try:
        run_suite(s, fast_options())
        rec = s.run_record()
        assert rec["outcome"] == "failed" and rec["status"] == "FAIL"
        assert rec["root_cause_node"] in (0, 1)
        assert [n["exit_code"] for n in rec["nodes"]] == [1, 1]
        names = " ".join(f"{e['name']} {e['text']}" for e in rec["errors"])
        assert "NaN" in names or "nan" in names.lower(), rec["errors"]
        verdicts = {v["metric"]: v for v in rec["verdicts"]}
        assert verdicts["training.final_loss"]["status"] != "PASS"  # never the last finite loss
        _assert_nothing_left(s)
    finally:
        remove_scratch_tree(s)
