"""The section-aware hang budget, driven through the real parser and ingest path on a fake clock.

MaxText-shaped lines go through :func:`feed_rank` (the code a live run uses) with ``now`` taken from a
fake clock, and :func:`decide` is asked every 0.25 s of that clock, as the live watchdog does. Runs that
would take tens of minutes of real time (90 s checkpoint saves every 50 steps) are judged in a second.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from cvs_tui.core.events import RunOutcome
from cvs_tui.core.parse import NodeLogParser
from cvs_tui.core.watch.ingest import RankLog, feed_rank
from cvs_tui.core.watch.options import RunOptions
from cvs_tui.core.watch.sections import Section, line_section
from cvs_tui.core.watch.watchdog import NodeWatch, Verdict, decide, next_deadline

TICK = 0.25  # the live watchdog's look interval (execute.TICK_S)
STEP_S = 0.25


def _step(n: int, seconds: float = STEP_S) -> bytes:
    return (
        f"I1130 10:00:00.000000 140000000000001 metric_logger.py:265] completed step: {n}, seconds: "
        f"{seconds:.3f}, TFLOP/s/device: 1.0, Tokens/s/device: 1000.0, total_weights: 256, loss: 7.000\n"
    ).encode()


def _info(text: str) -> bytes:
    return f"I1130 10:00:00.000000 140000000000001 checkpointing.py:100] {text}\n".encode()


class Run:
    """Ranks fed on a fake clock; ``advance`` asks the watchdog every TICK like the live loop."""

    def __init__(self, tmp_path: Path, ranks: int = 2, opt: RunOptions | None = None) -> None:
        self.now = 0.0
        self.opt = opt or RunOptions()
        self.ranks = [
            RankLog(
                watch=NodeWatch(rank=r, host=f"node-{r}", last_progress=0.0),
                local_log=tmp_path / f"node{r}.log",
                parser=NodeLogParser(),
            )
            for r in range(ranks)
        ]
        self.verdict: Verdict | None = None
        self.verdict_at: float | None = None

    def feed(self, rank: int, data: bytes) -> None:
        feed_rank(
            self.ranks[rank], "R", data, now=self.now, emit=lambda ev: None, node_status=lambda *a: None
        )

    def advance(self, seconds: float) -> None:
        """Looks as the live loop does: every TICK, and at the first rank's hang deadline if sooner."""
        end = self.now + seconds
        while True:
            due = next_deadline([r.watch for r in self.ranks], self.opt) if self.verdict is None else None
            look = self.now + TICK if due is None else min(self.now + TICK, max(due, self.now))
            if look > end + 1e-9:
                break
            self.now = look
            if self.verdict is None:
                verdict, _ = decide([r.watch for r in self.ranks], self.now, self.opt, None)
                if verdict is not None:
                    self.verdict, self.verdict_at = verdict, self.now
        self.now = end


def _train(run: Run, first: int, last: int, ranks: Iterator[int] | None = None) -> None:
    for n in range(first, last + 1):
        run.advance(STEP_S)
        for r in ranks if ranks is not None else range(len(run.ranks)):
            run.feed(r, _step(n))


def test_a_rank_silent_at_a_quarter_second_per_step_is_hung_within_60_s_of_its_last_line(
    tmp_path: Path,
) -> None:
    run = Run(tmp_path)
    _train(run, 1, 400)
    silent_from = run.now  # rank 1 stops (SIGSTOP); rank 0 logs one more step, then waits in a collective
    run.advance(0.1)
    run.feed(0, _step(401))
    run.advance(120.0)
    assert run.verdict is not None and run.verdict_at is not None
    assert run.verdict.outcome is RunOutcome.HUNG and run.verdict.root == 1
    # called at the budget from its last line's arrival, not at the next 0.25 s look after it
    assert run.verdict_at - silent_from == 60.0, run.verdict_at - silent_from
    reason = run.verdict.reason
    assert reason.startswith("node 1 (node-1): no progress for 60 s waiting for the next step")
    assert "(3 x p95 step time, at least 60 s) while training" in reason
    assert "; last line 400: I1130 10:00:00.000000" in reason and "completed step: 400," in reason


def test_90_s_checkpoint_saves_every_50_steps_raise_no_false_hang(tmp_path: Path) -> None:
    """Only rank 0 announces the save (orbax logs on the primary host); rank 1 is covered by it."""
    run = Run(tmp_path)
    for block in range(20):
        _train(run, block * 50 + 1, block * 50 + 50)
        run.feed(0, _info(f"Saving checkpoint at step {block * 50 + 50}"))
        run.advance(90.0)
    _train(run, 1001, 1010)
    assert run.now > 2000.0  # 20 saves of 90 s: every one far past the 60 s training budget
    assert run.verdict is None, run.verdict
    assert run.ranks[0].watch.longest[Section.CHECKPOINT_SAVE] == pytest.approx(90.25)


def test_without_the_announcement_the_same_save_is_a_hang(tmp_path: Path) -> None:
    """The same 90 s pause with no save line: the training budget applies, so it is called at 60 s."""
    run = Run(tmp_path)
    _train(run, 1, 50)
    run.advance(90.0)
    assert run.verdict is not None and run.verdict.outcome is RunOutcome.HUNG
    assert run.verdict_at == pytest.approx(50 * STEP_S + 60.0)


def test_a_save_that_never_ends_is_a_hang_naming_the_section(tmp_path: Path) -> None:
    run = Run(tmp_path)
    _train(run, 1, 50)
    run.feed(0, _info("Saving checkpoint at step 50"))
    run.advance(90.0)
    _train(run, 51, 100)
    announced = run.now
    run.feed(0, _info("Saving checkpoint at step 100"))
    run.advance(400.0)
    assert run.verdict is not None and run.verdict.outcome is RunOutcome.HUNG
    # budget: max(300 s floor, 3 x the longest save so far, 90.25 s) = 300 s from the announcement
    assert run.verdict_at == pytest.approx(announced + 300.0)
    assert run.verdict.root == 0  # both went silent at step 100; rank 0's last line is the later one
    assert "waiting for the end of the checkpoint save announced 300 s ago" in run.verdict.reason
    assert "(3 x the longest checkpoint save so far, at least 300 s: 300 s)" in run.verdict.reason
    assert "last line 102: " in run.verdict.reason and "Saving checkpoint at step 100" in run.verdict.reason


def test_a_long_save_widens_the_next_budget_by_the_factor(tmp_path: Path) -> None:
    run = Run(tmp_path)
    _train(run, 1, 50)
    run.feed(0, _info("Saving checkpoint at step 50"))
    run.advance(200.0)
    _train(run, 51, 100)
    run.feed(0, _info("Saving checkpoint at step 100"))
    run.advance(590.0)  # 3 x 200.25 s = 600.75 s: still inside
    assert run.verdict is None
    run.advance(20.0)
    assert run.verdict is not None and "at least 300 s: 601 s" in run.verdict.reason


def test_eval_and_compilation_sections_are_announced_and_closed(tmp_path: Path) -> None:
    run = Run(tmp_path)
    _train(run, 1, 20)
    run.feed(1, _info("Starting eval after train step 20"))
    assert run.ranks[1].watch.section is Section.EVAL
    run.advance(150.0)
    run.feed(1, _info("Completed eval after train step 20, loss=2.5"))
    assert run.ranks[1].watch.section is None
    run.feed(0, _info("Compiling jit(train_step) with global shapes and types [ShapedArray(int32[8])]."))
    run.advance(200.0)
    run.feed(0, _info("Finished XLA compilation of jit(train_step) in 199.9 sec"))
    _train(run, 21, 30)
    assert run.verdict is None
    assert run.ranks[1].watch.longest[Section.EVAL] == pytest.approx(150.0)
    assert run.ranks[0].watch.longest[Section.COMPILE] == pytest.approx(200.0)


def test_overrides_still_set_the_budgets(tmp_path: Path) -> None:
    opt = RunOptions(hang_factor=10.0, hang_min_s=5.0, section_min_s=20.0, section_factor=2.0)
    run = Run(tmp_path, ranks=1, opt=opt)
    _train(run, 1, 20)
    run.advance(6.0)
    assert run.verdict is not None and "at least 5 s" in run.verdict.reason
    run = Run(tmp_path, ranks=1, opt=opt)
    _train(run, 1, 20)
    run.feed(0, _info("Saving checkpoint at step 20"))
    run.advance(19.0)
    assert run.verdict is None
    run.advance(2.0)
    assert run.verdict is not None and "at least 20 s: 20 s" in run.verdict.reason


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("Waiting for step 50 to finish before checkpoint", (Section.CHECKPOINT_SAVE, True)),
        ("Started an asynchronous checkpoint save for step 50", (Section.CHECKPOINT_SAVE, True)),
        ("Waiting for previous save to complete took 3.2 seconds", (Section.CHECKPOINT_SAVE, True)),
        ("Restoring checkpoint from gs://b/run/checkpoints/50", (Section.CHECKPOINT_RESTORE, True)),
        ("Finished restoring checkpoint in 12.5 seconds from /ck/50", (Section.CHECKPOINT_RESTORE, False)),
        ("No existing checkpoints found, not restoring checkpoint.", None),
        ("Completed eval step: 3, seconds: 0.5, running loss=2.0", None),  # an eval step inside the eval
        ("eval metrics after step: 20, loss=2.5", (Section.EVAL, False)),
        (
            "completed profiler activation/deactivation step: 10, total_weights: 256, loss: 7.0",
            (Section.PROFILER, True),
        ),
        ("Compiling train_step for with global shapes and types [...]", (Section.COMPILE, True)),
        ("Persistent compilation cache hit for 'jit_train_step'", None),
        ("an unrelated line about compiling things", None),
    ],
)
def test_the_section_each_line_announces(line: str, expected: tuple[Section, bool] | None) -> None:
    assert line_section(f"I1130 10:00:00.000000 140000000000001 x.py:1] {line}") == expected


def test_a_chunk_is_read_from_its_last_step_or_section_line(tmp_path: Path) -> None:
    """One chunk with a step, a save that finished and a new save: the new save counts from now."""
    run = Run(tmp_path, ranks=1)
    _train(run, 1, 10)
    run.feed(0, _info("Saving checkpoint at step 10"))
    w = run.ranks[0].watch
    opened = w.section_since
    run.advance(50.0)
    chunk = (
        _info("Finished blocking save in 50.0 seconds @ /ck/10")
        + _step(11)
        + _info("Saving checkpoint at step 11")
        + _info("an unrelated line after it")
    )
    run.feed(0, chunk)
    assert w.section is Section.CHECKPOINT_SAVE and w.section_since == run.now > opened
    assert w.longest[Section.CHECKPOINT_SAVE] == pytest.approx(50.0)
    run.feed(0, _step(12) + _info("a line after the step"))
    assert w.section is None
