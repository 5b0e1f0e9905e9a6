"""What the live view keeps is bounded: per-node line buffers hold exactly their cap (packed), a run's loss
curve is thinned with its spikes kept, and lines the buffer dropped are read back from the run folder."""

from __future__ import annotations

import itertools
import random
from collections import deque
from pathlib import Path

from _pilot import Settle
from tui_streams import CLOCK, paced

from cvs_tui.core.bounded import BLOCK_LINES, LineBuffer, thin_curve
from cvs_tui.core.events import LogLinesEvent, NodeLogEvent, RunEvent, RunStartEvent, StepEvent
from cvs_tui.core.run_folder import RunFolder
from cvs_tui.core.state import LOSS_CURVE_POINTS, NODE_BUFFER_LINES, RunState
from cvs_tui.tui.app import CvsApp
from cvs_tui.tui.widgets.log_pane import OLDER_CHUNK, LogPane

LINE = "I1130 07:29:46.{n:06d} 1397821569 metric_logger.py:265] completed step: {n}, seconds: 0.118, loss: 9"


def test_a_node_fed_past_the_cap_keeps_exactly_the_cap_packed() -> None:
    buf = LineBuffer(NODE_BUFFER_LINES)
    total = NODE_BUFFER_LINES * 3 + 77
    for first in range(1, total + 1, 50):
        buf.extend(first, [LINE.format(n=n) for n in range(first, min(first + 50, total + 1))])
    assert len(buf) == NODE_BUFFER_LINES and buf.next_line == total + 1
    assert buf.first_line == total + 1 - NODE_BUFFER_LINES
    assert buf.get(buf.first_line - 1) is None and buf.get(total) == LINE.format(n=total)
    held = list(buf)
    assert held == [LINE.format(n=n) for n in range(buf.first_line, total + 1)]
    # packed: fewer than a block of lines are plain strings; the rest are compressed blocks
    assert len(buf._tail) < BLOCK_LINES
    assert all(isinstance(b, bytes) for b in buf._blocks)
    assert len(buf._blocks) * BLOCK_LINES + len(buf._tail) < NODE_BUFFER_LINES + BLOCK_LINES


def test_line_buffer_matches_a_plain_ring_buffer() -> None:
    """Random batches, gaps, and odd lines (a newline inside, a lone surrogate, over-long) against a deque."""
    rnd = random.Random(18)
    for cap in (1, 3, 50, 333):
        buf, ref, nxt = LineBuffer(cap), deque[str](maxlen=cap), 1
        for _ in range(300):
            if rnd.random() < 0.03:
                nxt += rnd.randint(1, 4)  # a gap: numbering restarts there
                ref.clear()
            batch = [
                f"line {nxt + i}" + rnd.choice(["", "", "", "\nsecond half", "\udc80", "x" * 1200])
                for i in range(rnd.randint(0, 40))
            ]
            buf.extend(nxt, batch)
            ref.extend(t if len(t) <= 1000 else t[:1000] + " …" for t in batch)
            nxt += len(batch)
            first = nxt - len(ref)
            assert (len(buf), buf.first_line, buf.next_line, list(buf)) == (len(ref), first, nxt, list(ref))
            ask = rnd.randint(first - 2, nxt + 1)
            start = max(ask, first)
            assert buf.since(ask) == (start, list(ref)[start - first :])
            assert buf.get(ask) == (list(ref)[ask - first] if first <= ask < nxt else None)


def test_loss_curve_stays_bounded_over_a_long_run_and_keeps_a_spike() -> None:
    view = RunState()
    view.apply(RunStartEvent("R", 40_000, ("h0", "h1"), at=CLOCK))
    steps = 36_000
    for s in range(steps):
        loss = 50.0 if s == 20_001 else 10.0 - s * 1e-4
        for node in (0, 1):
            view.apply(NodeLogEvent("R", node, StepEvent(s, loss, s + 1, seconds=0.1)))
    curve = view.runs["R"].loss_curve
    assert len(curve) <= LOSS_CURVE_POINTS
    assert curve[20_001] == 50.0  # the spike survived every thinning
    assert 0 in curve and steps - 1 in curve  # the first and the latest point
    assert min(curve.values()) == 10.0 - (steps - 1) * 1e-4
    # thinned evenly: no stretch of the run lost all its points
    widest_gap = max(b - a for a, b in itertools.pairwise(sorted(curve)))
    assert widest_gap <= 4 * steps / (LOSS_CURVE_POINTS // 4)


def test_thin_curve_keeps_each_stretchs_extremes() -> None:
    curve = {s: float(s % 7) for s in range(100)}
    thin = thin_curve(curve, 40)  # 100 steps in stretches of 16: each keeps its min (0) and max (6)
    assert len(thin) <= 40 // 2 + 2 and 0 in thin and 99 in thin
    assert set(thin.values()) == {0.0, 6.0, float(99 % 7)}


async def test_pane_reads_lines_past_the_cap_back_from_the_run_folder(tmp_path: Path, settle: Settle) -> None:
    """A node fed 2.5x the cap: the view keeps the cap; Home in the pane pages older lines back from the
    node's log in the run folder until line 1."""
    total = NODE_BUFFER_LINES * 5 // 2
    lines = [f"line {n}" for n in range(1, total + 1)]
    log = RunFolder(tmp_path).run_log("R", 0)
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("\n".join(lines) + "\n")
    evs: list[RunEvent] = [RunStartEvent("R", 10, ("h0",), at=CLOCK)]
    evs += [LogLinesEvent("R", 0, n, tuple(lines[n - 1 : n + 99])) for n in range(1, total + 1, 100)]
    app = CvsApp(paced(evs), title="t", clock=lambda: CLOCK, run_dir=tmp_path)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        buf = app.view.runs["R"].nodes[0].lines
        assert len(buf) == NODE_BUFFER_LINES and buf.first_line == total - NODE_BUFFER_LINES + 1
        p = app.screen.query_one(LogPane)
        await pilot.press("a", "a")  # all nodes and back: rebuilt from the ring buffer
        await pilot.pause()
        assert p.log_widget.lines[0] == f"line {buf.first_line}"
        assert len(p.log_widget.lines) == NODE_BUFFER_LINES
        p.log_widget.focus()
        reads = -(-(buf.first_line - 1) // OLDER_CHUNK)
        for _ in range(reads):
            await pilot.press("home")
            await pilot.pause()
        shown = list(p.log_widget.lines)
        assert shown == lines
        assert f"read back from {log.name}" in str(p.query_one("#log-status").render())
        assert len(buf) == NODE_BUFFER_LINES  # reading back does not refill the view model
