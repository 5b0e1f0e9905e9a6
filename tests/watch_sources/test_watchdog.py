"""The watchdog's rules as a pure function: per-rank watch state and an injected clock, no nodes.

Times are plain numbers (seconds on a fake clock), so every rule is checked in microseconds: the
compile allowance before the first step, k × p95 step time (at least hang_min_s) after it, the first
failure among several, the fail grace before the others are stopped as victims, a lost node, and the
clean end.
"""

from __future__ import annotations

from cvs_tui.core.events import RunOutcome, StepEvent, StepKind
from cvs_tui.core.watch.options import RunOptions
from cvs_tui.core.watch.watchdog import (
    NodeWatch,
    Verdict,
    decide,
    find_hang,
    first_failure,
    lost_reason,
    next_deadline,
    p95,
)

OPT = RunOptions(compile_allowance_s=100.0, hang_factor=10.0, hang_min_s=30.0, fail_grace_s=15.0)
T0 = 1000.0


def _watches(n: int = 2) -> list[NodeWatch]:
    return [NodeWatch(rank=r, host=f"h{r}", last_progress=T0) for r in range(n)]


def _train(w: NodeWatch, steps: int, seconds: float, at: float) -> None:
    for i in range(steps):
        w.on_step(StepEvent(step=i + 1, loss=1.0, line=i + 1, kind=StepKind.TRAIN, seconds=seconds), at)


# -- running, hung ------------------------------------------------------------------------------------
def test_no_step_yet_is_fine_within_the_compile_allowance() -> None:
    ws = _watches()
    assert decide(ws, T0 + 99.0, OPT, None) == (None, False)


def test_no_step_past_the_compile_allowance_is_a_hang_of_that_rank() -> None:
    ws = _watches()
    _train(ws[0], 10, 1.0, T0 + 100)  # rank 0 trains; rank 1 never logged a step
    verdict, stop = decide(ws, T0 + 101.0, OPT, None)
    assert stop and verdict is not None
    assert (verdict.outcome, verdict.root) == (RunOutcome.HUNG, 1)
    assert verdict.reason == (
        "node 1 (h1): no progress for 101 s waiting for the first step (compile allowance); no line yet"
    )


def test_after_the_first_step_the_limit_is_k_times_p95_step_time() -> None:
    ws = _watches(1)
    _train(ws[0], 50, 5.0, T0)  # p95 = 5 s: limit max(30, 10 x 5) = 50 s
    assert decide(ws, T0 + 49.9, OPT, None) == (None, False)
    verdict, stop = decide(ws, T0 + 50.0, OPT, None)
    assert stop and verdict is not None and verdict.outcome is RunOutcome.HUNG
    assert "waiting for the next step (10 x p95 step time, at least 30 s) while training" in verdict.reason


def test_fast_steps_still_get_hang_min_s() -> None:
    ws = _watches(1)
    _train(ws[0], 50, 0.1, T0)  # 10 x p95 = 1 s, but never less than 30 s
    assert find_hang(ws, T0 + 29.0, OPT) is None
    hang = find_hang(ws, T0 + 31.0, OPT)
    assert hang is not None and hang[0] == 0 and "no progress for 31 s" in hang[1]


def test_warmup_steps_do_not_count_towards_the_p95() -> None:
    w = _watches(1)[0]
    w.on_step(StepEvent(step=1, loss=1.0, line=1, kind=StepKind.TRAIN, seconds=500.0), T0)  # compile
    _train(w, 3, 2.0, T0)
    assert w.steps_seen == 4 and list(w.step_seconds) == [2.0]
    assert p95([1.0] * 19 + [100.0]) == 100.0 and p95([1.0] * 21 + [100.0]) == 1.0 and p95([]) == 0.0


def test_an_exited_rank_is_never_hung() -> None:
    ws = _watches()
    ws[1].exit_code = 0
    _train(ws[0], 5, 1.0, T0 + 90)
    assert find_hang(ws, T0 + 110.0, OPT) is None  # rank 1: no step, past the allowance, but exited


# -- failures ------------------------------------------------------------------------------------
def test_first_failure_is_the_earliest_among_fatal_exit_and_lost() -> None:
    ws = _watches(3)
    ws[0].on_fatal(line=42, now=T0 + 30)
    ws[1].exit_code, ws[1].last_progress = 1, T0 + 20  # died earlier than rank 0's fatal line
    ws[2].lost, ws[2].last_progress = "connection reset", T0 + 25
    assert first_failure(ws) == (1, "node 1 exited with code 1")
    ws[1].last_progress = T0 + 40
    assert first_failure(ws) == (2, "node 2 (h2) lost: connection reset")
    ws[2].last_progress = T0 + 50
    assert first_failure(ws) == (0, "node 0: fatal error at line 42")


def test_a_clean_exit_is_not_a_failure() -> None:
    ws = _watches()
    ws[0].exit_code = 0
    assert first_failure(ws) is None


def test_the_others_get_the_fail_grace_then_are_stopped_as_victims() -> None:
    ws = _watches(3)
    ws[0].on_fatal(line=7, now=T0 + 10)
    verdict, stop = decide(ws, T0 + 11.0, OPT, None)
    assert not stop and verdict == Verdict(RunOutcome.FAILED, "node 0: fatal error at line 7", 0, T0 + 11.0)
    # the failure stays the first one, whatever happens during the grace
    ws[1].exit_code, ws[1].last_progress = 3, T0 + 5
    assert decide(ws, T0 + 26.0, OPT, verdict) == (verdict, False)  # rank 2 still runs, no error of its own
    assert decide(ws, T0 + 26.5, OPT, verdict) == (verdict, True)


def test_the_grace_ends_once_every_running_rank_wrote_its_own_error() -> None:
    ws = _watches(3)
    ws[0].exit_code = 1
    verdict, stop = decide(ws, T0 + 1.0, OPT, None)
    assert verdict is not None and verdict.root == 0 and not stop
    ws[1].on_fatal(line=40, now=T0 + 2.0)  # a victim's own error (its peer vanished)
    assert decide(ws, T0 + 2.5, OPT, verdict) == (verdict, False)  # rank 2 has said nothing yet
    ws[2].on_fatal(line=41, now=T0 + 3.0)
    assert decide(ws, T0 + 3.5, OPT, verdict) == (verdict, False)  # the rest of its traceback may follow
    assert decide(ws, T0 + 4.0, OPT, verdict) == (verdict, True)  # 11 s before the grace would end


def test_no_hang_is_declared_while_a_failure_is_in_its_grace() -> None:
    ws = _watches()
    ws[0].exit_code = 2
    verdict, stop = decide(ws, T0 + 500.0, OPT, None)  # rank 1 is far past its compile allowance
    assert verdict is not None and verdict.outcome is RunOutcome.FAILED and not stop


# -- the end ------------------------------------------------------------------------------------
def test_all_exited_cleanly_ends_with_no_verdict() -> None:
    ws = _watches()
    ws[0].exit_code = ws[1].exit_code = 0
    assert decide(ws, T0 + 1.0, OPT, None) == (None, True)


def test_all_done_with_a_lost_node_fails_on_it() -> None:
    ws = _watches()
    ws[0].exit_code = 0
    ws[1].lost = "gave up after 8 retries"
    verdict, stop = decide(ws, T0 + 3.0, OPT, None)
    assert stop and verdict == Verdict(
        RunOutcome.FAILED, "node 1 (h1) lost: gave up after 8 retries", 1, T0 + 3.0
    )


def test_all_done_keeps_the_failure_already_chosen() -> None:
    ws = _watches()
    first = Verdict(RunOutcome.FAILED, "node 0: fatal error at line 3", 0, T0)
    ws[0].exit_code, ws[1].lost = 1, "reset"
    assert decide(ws, T0 + 1.0, OPT, first) == (first, True)


def test_all_exited_non_zero_without_an_earlier_look_leaves_it_to_the_judge() -> None:
    """The exit codes reach the judge, which fails the run; the watchdog only says the run is over."""
    ws = _watches()
    ws[0].exit_code, ws[1].exit_code = 0, 1
    assert decide(ws, T0 + 1.0, OPT, None) == (None, True)


# -- the hang deadline, a lost node ---------------------------------------------------------------------
def test_the_hang_is_due_at_the_budget_from_the_last_line_not_at_a_later_look() -> None:
    ws = _watches()
    _train(ws[0], 10, 0.25, T0 + 3.1)
    _train(ws[1], 10, 0.25, T0 + 3.0)
    due = next_deadline(ws, OPT)
    assert due == T0 + 3.0 + 30.0  # hang_min_s after rank 1's last step arrived
    assert find_hang(ws, due - 1e-6, OPT) is None
    hung = find_hang(ws, due, OPT)
    assert hung is not None and hung[0] == 1


def test_no_deadline_once_every_rank_exited() -> None:
    ws = _watches()
    ws[0].exit_code = ws[1].exit_code = 0
    assert next_deadline(ws, OPT) is None


def test_a_node_its_launcher_cannot_reach_is_lost_after_lost_after_s_not_hung() -> None:
    ws = _watches()
    _train(ws[1], 10, 0.25, T0)
    ws[1].on_link("connection lost (ssh: Timeout, server not responding)", T0 + 20.0)
    ws[1].on_link("connection lost (ssh: Timeout, server not responding)", T0 + 30.0)  # still since 20
    assert lost_reason(ws[1], T0 + 34.9, OPT) is None
    assert lost_reason(ws[1], T0 + 35.0, OPT) == (
        "connection lost (ssh: Timeout, server not responding); not reachable for 15 s"
    )
    # past its hang budget while unreachable: never called hung (it is lost once that lasts)
    assert find_hang([ws[1]], T0 + 31.0, OPT) is None


def test_a_connection_that_comes_back_is_not_lost() -> None:
    ws = _watches()
    ws[1].on_link("connection lost (ssh: Connection reset)", T0)
    ws[1].on_link(None, T0 + 5.0)
    ws[1].on_link("connection lost (ssh: Connection reset)", T0 + 10.0)
    assert lost_reason(ws[1], T0 + 20.0, OPT) is None  # down again only since T0 + 10
    assert lost_reason(ws[1], T0 + 25.0, OPT) is not None


def test_an_unreachable_or_lost_rank_sets_no_hang_deadline() -> None:
    """The watch loop sleeps until the next deadline: one already past that can never be called
    (the rank is unreachable, or lost) would wake it without pause."""
    ws = _watches()
    _train(ws[0], 10, 0.25, T0)
    _train(ws[1], 10, 0.25, T0 + 5.0)
    ws[0].on_link("connection lost (ssh: Connection reset)", T0 + 1.0)
    assert next_deadline(ws, OPT) == T0 + 5.0 + 30.0
    ws[1].lost = "gave up"
    assert next_deadline(ws, OPT) is None
