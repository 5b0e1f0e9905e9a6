"""Scheduler endings: reading slurmstepd/srun lines (the corpus is tests/world/test_world_slurm.py) and the
run's reason naming them in ``analyze`` and the judge."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from _analysis_samples import FIXTURES, load_local, synthetic_node

from cvs_tui.core.events import RunOutcome
from cvs_tui.core.judge.facts import RunFacts
from cvs_tui.core.judge.outcome import decide_outcome
from cvs_tui.core.parse.endings import read_ending, read_log_ending
from cvs_tui.core.sources.offline import analyze_paths

KEY = "BS=2,PRECISION=BF16,SL=128"
TIME_LIMIT = "slurmstepd: error: *** STEP 7.0 ON gpu-3 CANCELLED AT 2024-04-20T09:09:37 DUE TO TIME LIMIT ***"
OOM = [
    "slurmstepd: error: Detected 1 oom_kill event in StepId=7.0. Some of the step tasks have been OOM"
    " Killed.",
    "srun: error: gpu-2: task 1: Out Of Memory",
    "srun: Terminating StepId=7.0",
    "slurmstepd: error: *** STEP 7.0 ON gpu-2 CANCELLED AT 2024-04-20T09:09:37 ***",
]


def test_describe_names_cause_node_and_step() -> None:
    e = read_ending([TIME_LIMIT, "srun: error: gpu-3: tasks 0-3: Terminated"])
    assert e is not None and e.cause == "time_limit" and e.slurm_id == "7.0"
    assert e.describe(120) == "Slurm: time limit reached at step 120 (gpu-3)"
    oom = read_ending(OOM)
    assert oom is not None and oom.describe(5) == "Slurm: out of memory (oom_kill) on gpu-2 at step 5"
    code = read_ending(["srun: error: gpu-1: task 0: Exited with exit code 3"])
    assert code is not None and code.describe() == "Slurm: task on gpu-1 exited with code 3"
    sig = read_ending(["srun: error: gpu-1: task 0: Bus error"])
    assert sig is not None and sig.describe() == "Slurm: task on gpu-1 ended by signal (Bus error)"
    assert read_ending(["srun: error: gpu-1: task 0: Exited with exit code 0", "hello"]) is None


def test_requeue_and_node_failure_lines() -> None:
    rq = read_ending(
        ["slurmstepd: error: *** JOB 9 ON n1 CANCELLED AT 2024-01-01T00:00:00 DUE TO JOB REQUEUE ***"]
    )
    assert rq is not None and rq.cause == "requeue" and rq.node == "n1"
    old = read_ending(["slurmstepd: *** JOB 9 CANCELLED AT 2024-01-01T00:00:00 DUE TO NODE n4 FAILURE ***"])
    assert old is not None and old.cause == "node_failure" and old.node == "n4"


@pytest.fixture
def hang_guard() -> Iterator[None]:
    """A hang is a failure: the patterns are bounded, a 1 MB line takes milliseconds."""

    def boom(*_: object) -> None:
        raise TimeoutError("ending patterns did not finish")

    old = signal.signal(signal.SIGALRM, boom)
    signal.alarm(60)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


@pytest.mark.usefixtures("hang_guard")
@pytest.mark.parametrize(
    "unit", ["*** ", "*** JOB 1 ON ", "srun: error: a", "Detected 1 oom_kill event in StepId="]
)
def test_long_hostile_lines_finish(unit: str) -> None:
    read_ending([unit * (1_000_000 // len(unit))])


def test_read_log_ending_reads_the_tail(tmp_path: Path) -> None:
    log = tmp_path / "job.out"
    log.write_text("x" * 200_000 + "\n" + TIME_LIMIT + "\n")
    e = read_log_ending(log)
    assert e is not None and e.cause == "time_limit"
    assert read_log_ending(tmp_path / "missing.log") is None


def test_outcome_names_the_ending_instead_of_stopped_early() -> None:
    e = read_ending([TIME_LIMIT])
    out, reason, root = decide_outcome([synthetic_node(12)], 20, RunFacts(endings=[e]))
    assert out is RunOutcome.FAILED and root == 0
    assert reason.startswith("Slurm: time limit reached at step 11") and "ends at step 11 of 20" in reason
    # the victims' exit codes (TERM) are named after the scheduler's cause
    out, reason, _ = decide_outcome([synthetic_node(12)], 20, RunFacts(exit_codes=[143], endings=[e]))
    assert reason == "Slurm: time limit reached at step 11 (gpu-3) (node 0 exited with code 143)"
    # a complete run stays complete whatever the scheduler printed after it
    assert (
        decide_outcome([synthetic_node(20)], 20, RunFacts(endings=[read_ending(OOM)]))[0]
        is RunOutcome.COMPLETE
    )


def test_analyze_names_a_time_limit_after_healthy_steps(tmp_path: Path) -> None:
    text = (FIXTURES / "single_20steps.log").read_text().splitlines(keepends=True)
    log = tmp_path / "node0.log"
    log.write_text(
        "".join(text[:44])
        + "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.\n"
        + TIME_LIMIT
        + "\n"
    )
    loaded = load_local(tmp_path, steps=20, runs=[KEY])
    run = analyze_paths(loaded, [log]).runs[0]
    assert run.status == "FAIL"
    assert run.reason.startswith("Slurm: time limit reached at step 11"), run.reason
