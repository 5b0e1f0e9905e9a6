"""The live view at small and large terminals, the one step counter, error incidents, and the view at scale.

Fed recorded MaxText logs through the real parser (tests/tui/tui_streams.py); the 256-node cases use synthetic
log lines in the MaxText format, since the point there is the table's size, not the parser.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from _pilot import Settle
from rich.text import Text
from tui_streams import CLOCK, paced, suite_events

from cvs_tui.core.events import (
    ErrorHit,
    LogLinesEvent,
    NodeLogEvent,
    NodeState,
    NodeStatusEvent,
    RunEvent,
    RunStartEvent,
    Severity,
    StepEvent,
)
from cvs_tui.core.state import ErrorRow
from cvs_tui.render.format import fmt_steps, steps_done
from cvs_tui.render.incidents import group_incidents
from cvs_tui.tui.app import CvsApp
from cvs_tui.tui.screens.dashboard import cut_words
from cvs_tui.tui.screens.errors import ErrorsScreen
from cvs_tui.tui.widgets.log_lines import LevelHighlighter, wrap_line
from cvs_tui.tui.widgets.log_pane import LogPane
from cvs_tui.tui.widgets.node_table import NodeTable
from cvs_tui.tui.widgets.run_header import header_line

INFO = {
    "config": "cpu_jaxmaxtext_tiny-llama_2proc_distributed_threshold.json",
    "model": "tiny-llama",
    "mode": "distributed",
    "gpu": "cpu",
}


def make_app(events: list[RunEvent], **kwargs: object) -> CvsApp:
    return CvsApp(paced(events), title="cvs-tui", info=INFO, clock=lambda: CLOCK, **kwargs)  # type: ignore[arg-type]


def screen_text(app: CvsApp) -> str:
    """What the terminal shows, one line per row."""
    strips = app.screen._compositor.render_strips()
    return "\n".join("".join(seg.text for seg in strip) for strip in strips)


def test_step_counter_counts_completed_steps() -> None:
    assert steps_done(None) == 0 and steps_done(0) == 1 and steps_done(19) == 20
    assert fmt_steps(19, 20) == "20/20" and fmt_steps(None, 30) == "-/30" and fmt_steps(4, 0) == "5/?"


def test_header_line_shortens_the_config_name_first() -> None:
    line = header_line(INFO, "cvs-tui", 78)
    assert line.cell_len <= 78
    assert "model tiny-llama" in line.plain and "gpu cpu" in line.plain and "…" in line.plain


def test_cut_words_never_cuts_mid_word() -> None:
    text = "launch_container runtime host: the trainer runs on the host"
    cut = cut_words(text, 30)
    assert len(cut) <= 30 and cut.endswith("…")
    assert text.startswith(cut[:-1]) and text[len(cut) - 1] == " "


@pytest.mark.parametrize("size", [(80, 24), (120, 40), (200, 50)])
async def test_verdict_status_and_key_columns_fit(size: tuple[int, int], settle: Settle) -> None:
    app = make_app(suite_events())
    async with app.run_test(size=size) as pilot:
        await settle(pilot)
        text = screen_text(app)
        lines = text.splitlines()
        assert lines[1].lstrip().startswith("suite FAILED"), lines[:3]
        # the suite is at its last run, which stopped at step index 3 on the NaN node: 4 steps done
        assert "viewing" not in lines[1] and "run LR_1E6 step 4/20" in lines[1]
        for col in ("node", "status", "health", "steps", "lag", "errors"):
            assert col in text, (col, text)
        # each run once, outcome glyph first
        assert "run:BS2_SL64" not in text and "run:LR_1E6" not in text
        assert re.search(r"✔ BS2_SL64", text) and re.search(r"✘ LR_1E6", text)
        # the failed run's reason is on the detail line, whole words only
        assert "LR_1E6 failed: non-finite loss on node 1" in text


async def test_header_follows_the_viewed_run(settle: Settle) -> None:
    app = make_app(suite_events(fraction=1.0))
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("left_square_bracket")
        await pilot.pause()
        app.refresh_now()
        await pilot.pause()
        line = screen_text(app).splitlines()[1]
        assert "viewing BS2_SL64 step 20/20" in line


def _hit(name: str, line: int, text: str = "", sev: Severity = Severity.FATAL) -> ErrorHit:
    return ErrorHit(name, sev, text or name, line, "builtin")


def test_one_oom_is_one_incident_labelled_out_of_memory() -> None:
    oom = "RuntimeError: HIP error: out of memory (hipErrorOutOfMemory)"
    rows = [
        ErrorRow("R", 0, _hit("gpu fault", 43, oom), 1),
        ErrorRow("R", 0, _hit("resource", 44, "RESOURCE_EXHAUSTED: Out of memory"), 2),
        ErrorRow("R", 0, _hit("jax runtime error", 44), 3),
        ErrorRow("R", 0, _hit("out of memory", 44), 4),
        ErrorRow("R", 0, _hit("python traceback", 44), 5),
        ErrorRow("R", 0, _hit("python traceback", 90), 6),  # far away: another incident
        ErrorRow("R", 1, _hit("python traceback", 44), 7),  # another node: another incident
    ]
    incidents = group_incidents(rows)
    assert len(incidents) == 3
    first = incidents[0]
    assert first.label == "out of memory" and first.lines == "43-44" and len(first.hits) == 5
    assert first.tags[0] == "resource" and "python traceback" in first.tags
    assert incidents[1].label == "python traceback"


async def test_errors_screen_lists_incidents_and_an_empty_state(settle: Settle) -> None:
    app = make_app(suite_events())
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot)
        await pilot.press("e")
        await pilot.pause()
        assert isinstance(app.screen, ErrorsScreen)
        incidents = group_incidents(app.view.errors)
        assert app.screen.query_one("DataTable").row_count == len(incidents) >= 1
    clean = make_app(suite_events(fraction=0.3))
    async with clean.run_test(size=(160, 48)) as pilot:
        await settle(pilot)
        await pilot.press("e")
        await pilot.pause()
        title = str(clean.screen.query_one("#errors-title").render())
        assert re.search(r"no error-pattern hits \(\d+ patterns, [1-9]\d* lines scanned\)", title), title


def test_log_levels_are_coloured_and_harmless_chatter_dimmed() -> None:
    hl = LevelHighlighter()
    err = Text("E1201 12:41:50.715435 140417 train.py:12] RuntimeError: boom")
    hl.highlight(err)
    assert any("red" in str(s.style) for s in err.spans)
    merged = Text("[n03] W1201 12:41:50.715435 140417 train.py:12] slow")
    hl.highlight(merged)
    assert any("yellow" in str(s.style) for s in merged.spans)
    noop = Text("[NO-OP] mldiagnostics: dependency missing; using stub.")
    hl.highlight(noop)
    assert any("dim" in str(s.style) for s in noop.spans)
    info = Text("I1201 12:41:50.715435 140417 metric_logger.py:265] completed step: 3")
    hl.highlight(info)
    assert not info.spans


def test_wrap_line_keeps_every_character() -> None:
    line = "x" * 95
    pieces = wrap_line(line, 40)
    assert all(len(p) <= 40 for p in pieces) and pieces[1].startswith("  ↪ ")
    assert "".join(p.removeprefix("  ↪ ") for p in pieces) == line


async def test_w_wraps_the_log_pane(settle: Settle) -> None:
    app = make_app(suite_events(fraction=0.6))
    async with app.run_test(size=(80, 30)) as pilot:
        await settle(pilot)
        log = app.screen.query_one(LogPane).log_widget
        width = log.scrollable_content_region.width
        assert max(len(x) for x in log.lines) > width
        await pilot.press("w")
        await pilot.pause()
        assert max(len(x) for x in log.lines) <= width
        await pilot.press("w")
        await pilot.pause()
        assert max(len(x) for x in log.lines) > width


def _many_nodes(n: int) -> list[RunEvent]:
    evs: list[RunEvent] = [RunStartEvent("BIG", 100, tuple(f"gpu-node-{i:03d}" for i in range(n)), at=CLOCK)]
    for i in range(n):
        step = 50 - (i % 7)
        evs.append(LogLinesEvent("BIG", i, 1, (f"I1201 00:00:00.000000 1 m.py:1] completed step: {step}",)))
        evs.append(NodeLogEvent("BIG", i, StepEvent(step, 3.0, 1, seconds=0.1)))
        if i % 50 == 7:
            evs.append(NodeLogEvent("BIG", i, _hit("python traceback", 1, sev=Severity.WARNING)))
    evs.append(NodeStatusEvent("BIG", 200, "gpu-node-200", NodeState.HUNG, "no progress", at=CLOCK))
    return evs


async def test_node_table_scrolls_sorts_and_filters_at_256_nodes(settle: Settle) -> None:
    app = make_app(_many_nodes(256))
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        table = app.dashboard.query_one(NodeTable)
        assert table.row_count == 256
        await pilot.press("end")
        await pilot.pause()
        assert table.selected_rank() == 255 and table.top > 0  # scrolled
        order = []
        for _ in range(3):
            await pilot.press("s")
            await pilot.pause()
            app.refresh_now()
            await pilot.pause()
            order.append((table.sort_mode, table._ranks[0]))
        # lag: the furthest-behind node (step 44) first; errors: the first node with a hit; status: hung
        assert order[0][0] == "lag" and app.view.runs["BIG"].nodes[order[0][1]].step == 44
        assert order[1] == ("errors", 7)
        assert order[2] == ("status", 200)
        # the sorted column is marked in its own label; no note is written over another column's label
        header = table._header(table.size.width).text
        assert "status▼" in header and "errors" in header and " by " not in header, header
        await pilot.press("n", *"node-123")
        await pilot.pause()
        app.refresh_now()
        await pilot.pause()
        assert table._ranks == [123]
        await pilot.press("escape")
        await pilot.pause()
        app.refresh_now()
        await pilot.pause()
        assert table.row_count == 256
        await pilot.press("n", *"hung")
        await pilot.pause()
        app.refresh_now()
        await pilot.pause()
        assert table._ranks == [200]


async def test_older_lines_are_read_back_from_the_node_log(
    tmp_path: Path, settle: Settle, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ring buffer keeps the newest lines; scrolling past the top reads older ones from the file."""
    import cvs_tui.core.state as state

    monkeypatch.setattr(state, "NODE_BUFFER_LINES", 50)
    log = tmp_path / "node0.log"
    all_lines = [f"line {n}" for n in range(1, 301)]
    log.write_text("\n".join(all_lines) + "\n")
    evs: list[RunEvent] = [RunStartEvent("R", 10, ("h0",), at=CLOCK)]
    evs += [LogLinesEvent("R", 0, n, tuple(all_lines[n - 1 : n + 9])) for n in range(1, 301, 10)]
    app = make_app(evs)
    monkeypatch.setattr(app, "node_log_path", lambda run, node: log)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        p = app.screen.query_one(LogPane)
        await pilot.press("a", "a")  # all nodes and back: the pane is rebuilt from the ring buffer
        await pilot.pause()
        assert p.log_widget.lines[0] == "line 251"
        p.log_widget.focus()
        await pilot.press("home")
        await pilot.pause()
        shown = list(p.log_widget.lines)
        assert shown[0] == "line 1" and shown[-1] == "line 300" and len(shown) == 300
        assert "read back from node0.log" in str(p.query_one("#log-status").render())


async def test_the_viewed_run_stays_in_view(settle: Settle) -> None:
    """`[` to a run above the fold scrolls the run list to it (F5)."""
    from cvs_tui.core.events import RunEndEvent, RunOutcome

    evs: list[RunEvent] = []
    for i in range(14):
        key = f"BS={i},PRECISION=BF16,SL=128"
        evs += [RunStartEvent(key, 5, ("h0",), at=CLOCK), RunEndEvent(key, RunOutcome.COMPLETE, at=CLOCK)]
    app = make_app(evs)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        assert "✔ BS=13,PRECISION=BF16,SL=128" in screen_text(app)  # the list scrolled to the last run
        for _ in range(13):
            await pilot.press("left_square_bracket")
        await pilot.pause(0.2)
        app.refresh_now()
        await pilot.pause(0.2)
        text = screen_text(app)
        assert app.dashboard.viewed_run == "BS=0,PRECISION=BF16,SL=128"
        assert "✔ BS=0,PRECISION=BF16,SL=128" in text and "viewing BS=0," in text
