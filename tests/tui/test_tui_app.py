"""The Textual monitor driven by keys (Pilot), fed recorded MaxText logs through the real parser."""

from __future__ import annotations

from pathlib import Path

from _pilot import Settle
from textual.widgets import Input
from tui_streams import CLOCK, paced, suite_events

from cvs_tui.core.events import NodeLogEvent, RunEndEvent, RunEvent, Severity
from cvs_tui.tui.app import CvsApp
from cvs_tui.tui.screens.errors import ErrorsScreen
from cvs_tui.tui.screens.node_log import NodeLogScreen
from cvs_tui.tui.screens.quit_dialog import QuitDialog
from cvs_tui.tui.screens.verdicts import VerdictsScreen
from cvs_tui.tui.widgets.log_lines import WRAP_MARK
from cvs_tui.tui.widgets.log_pane import LogPane
from cvs_tui.tui.widgets.node_table import NodeTable

SIZE = (160, 48)


def make_app(events: list[RunEvent], **kwargs: object) -> CvsApp:
    return CvsApp(paced(events), title="cvs-tui test", info={"model": "tiny"}, clock=lambda: CLOCK, **kwargs)  # type: ignore[arg-type]


def pane(app: CvsApp) -> LogPane:
    return app.screen.query_one(LogPane)


async def test_select_node_switches_the_log(settle: Settle) -> None:
    app = make_app(suite_events(fraction=0.6))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        table = app.screen.query_one(NodeTable)
        assert table.row_count == 2 and table.selected_rank() == 0
        first_node_lines = list(pane(app).log_widget.lines)
        await pilot.press("down")
        await pilot.pause()
        assert table.selected_rank() == 1
        assert pane(app).source is not None and pane(app).source.node == 1
        assert list(pane(app).log_widget.lines) != first_node_lines
        assert any("Jax process id is 1" in line for line in pane(app).log_widget.lines)
        await pilot.press("a")  # merged view: every node, prefixed
        await pilot.pause()
        lines = list(pane(app).log_widget.lines)
        assert any(line.startswith("[n00] ") for line in lines) and any(
            line.startswith("[n01] ") for line in lines
        )


async def test_follow_pauses_on_scroll_counts_new_lines_and_resumes(settle: Settle) -> None:
    events = suite_events()
    cut = len(events) // 3
    app = make_app(events[:cut])
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        p = pane(app)
        assert p.follow
        p.log_widget.focus()
        await pilot.press("pageup")  # scrolling up turns follow off
        await pilot.pause()
        assert not p.follow
        for ev in events[cut:]:  # more lines of the same run arrive while paused
            if isinstance(ev, RunEndEvent):
                break
            app.view.apply(ev)
        app.refresh_now()
        await pilot.pause()
        assert p.pending > 0
        assert "new lines" in str(p.query_one("#log-status").render())
        await pilot.press("f")
        await pilot.pause()
        assert p.follow and p.pending == 0
        assert p.log_widget.is_vertical_scroll_end


async def test_filter_keeps_matching_lines_and_escape_clears(settle: Settle) -> None:
    app = make_app(suite_events(fraction=0.6))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        all_lines = list(pane(app).log_widget.lines)
        await pilot.press("slash", *"completed step")
        await pilot.pause()
        assert isinstance(app.focused, Input)
        shown = list(pane(app).log_widget.lines)
        assert shown and all("completed step" in line for line in shown) and len(shown) < len(all_lines)
        await pilot.press("escape")
        await pilot.pause()
        assert list(pane(app).log_widget.lines) == all_lines


async def test_export_writes_the_current_view(tmp_path: Path, settle: Settle) -> None:
    app = make_app(suite_events(fraction=0.6), export_dir=tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("x")
        await pilot.pause()
        files = list(tmp_path.glob("*.log"))
        assert len(files) == 1
        assert files[0].read_text().splitlines() == list(pane(app).log_widget.lines)


async def test_errors_screen_jumps_to_the_line_in_context(settle: Settle) -> None:
    events = suite_events()
    fatal = [
        e
        for e in events
        if isinstance(e, NodeLogEvent) and getattr(e.event, "severity", None) is Severity.FATAL
    ]
    assert fatal, "the recorded NaN run must produce a fatal hit"
    app = make_app(events)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("e")
        await pilot.pause()
        assert isinstance(app.screen, ErrorsScreen)
        first = app.screen.selected()
        assert first is not None and first.hit.severity is Severity.FATAL
        await pilot.press("enter")
        await pilot.pause(0.1)
        assert isinstance(app.screen, NodeLogScreen)
        lines = list(app.screen.query_one(LogPane).log_widget.lines)
        target = [line for line in lines if line.startswith(">>")]
        assert len(target) == 1 and f"{first.hit.line:>6}" in target[0]
        assert len(lines) > 1  # context around it
        await pilot.press("escape")
        await pilot.pause()
        assert isinstance(app.screen, ErrorsScreen)


async def test_verdicts_fill_in_and_show_the_result(settle: Settle) -> None:
    app = make_app(suite_events())
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("v")
        await pilot.pause(0.1)
        app.refresh_now()
        await pilot.pause(0.1)
        assert isinstance(app.screen, VerdictsScreen)
        banner = str(app.screen.query_one("#banner").render())
        assert "SUITE FAIL" in banner
        tables = " ".join(str(w.render()) for w in app.screen.query(".run-title"))
        assert "BS2_SL64" in tables and "root cause: node 1" in tables
        await pilot.press("d")
        await pilot.pause()
        assert app.screen is app.dashboard


async def test_leaving_a_live_run_asks_stop_or_detach(settle: Settle) -> None:
    app = make_app(suite_events(fraction=0.5), live=True)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        app.source_done = False  # the live source is still open
        await pilot.press("q")
        await pilot.pause()
        assert isinstance(app.screen, QuitDialog)
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, QuitDialog)
        await pilot.press("q", "d")
        await pilot.pause()
    assert app.return_value == "detach"


async def test_node_table_at_64_nodes_scrolls(settle: Settle) -> None:
    from cvs_tui.core.events import LogLinesEvent, RunStartEvent

    hosts = tuple(f"n{i}" for i in range(64))
    events: list[RunEvent] = [RunStartEvent("BIG", 100, hosts)]
    events += [LogLinesEvent("BIG", i, 1, (f"hello from {i}",)) for i in range(64)]
    app = make_app(events)
    async with app.run_test(size=(120, 30)) as pilot:
        await settle(pilot)
        table = app.screen.query_one(NodeTable)
        assert table.row_count == 64
        await pilot.press("end")
        await pilot.pause()
        assert table.selected_rank() == 63
        assert pane(app).log_widget.lines[-1] == "hello from 63"


async def test_command_palette_opens_screens_and_jumps_to_nodes(settle: Settle) -> None:
    app = make_app(suite_events(fraction=0.6))
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("ctrl+p", *"Go to node 1")
        await pilot.pause(0.3)
        await pilot.press("enter")
        await pilot.pause(0.2)
        assert app.screen is app.dashboard
        assert app.dashboard.query_one(NodeTable).selected_rank() == 1
        await pilot.press("ctrl+p", *"Errors")
        await pilot.pause(0.3)
        await pilot.press("enter")
        await pilot.pause(0.2)
        assert isinstance(app.screen, ErrorsScreen)


async def test_ascii_mode_draws_no_box_or_block_characters(settle: Settle) -> None:
    app = make_app(suite_events(fraction=0.6), ascii_only=True)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        text = app.export_screenshot()
    import re

    body = re.sub(r"<[^>]+>", "", text.split("</style>", 1)[1])
    assert not set(body) & set("▁▂▃▄▅▆▇█╭╮╰╯─│▸◆✔✘")
    from textual.scrollbar import ScrollBarRender

    assert ScrollBarRender.VERTICAL_BARS[0] == "▁"  # other apps in this process keep their glyphs


async def test_log_pane_keys_work_on_the_node_log_screen(tmp_path: Path, settle: Settle) -> None:
    """f, slash and x belong to the log pane: the full-screen node log gets them without its own copies."""
    app = make_app(suite_events(fraction=0.6), export_dir=tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("l")
        await pilot.pause()
        assert isinstance(app.screen, NodeLogScreen)
        p = pane(app)
        assert p.follow
        await pilot.press("f")
        await pilot.pause()
        assert not p.follow and "PAUSED" in str(p.query_one("#log-status").render())
        await pilot.press("G")
        await pilot.pause()
        assert p.follow and "FOLLOW" in str(p.query_one("#log-status").render())
        await pilot.press("x")
        await pilot.pause()
        files = list(tmp_path.glob("*.log"))
        assert len(files) == 1 and files[0].read_text().splitlines() == list(p.log_widget.lines)
        await pilot.press("slash")
        await pilot.pause()
        assert isinstance(app.focused, Input)


def _footer_keys(app: CvsApp) -> dict[str, str]:
    """The footer's shown keys and their labels, as the user reads them."""
    from textual.widgets._footer import FooterKey

    return {k.key_display or k.key: k.description for k in app.screen.query(FooterKey)}


async def test_q_goes_back_where_the_footer_says_back(settle: Settle) -> None:
    """On every screen that q leaves for the one below, the footer names q as Back (not Esc beside a
    ^q Quit that q does not do there)."""
    from cvs_tui.tui.screens.health import HealthScreen

    app = make_app(suite_events())
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        for key, screen in (
            ("v", VerdictsScreen),
            ("e", ErrorsScreen),
            ("H", HealthScreen),
            ("l", NodeLogScreen),
        ):
            await pilot.press(key)
            await pilot.pause()
            assert isinstance(app.screen, screen)
            keys = _footer_keys(app)
            assert keys.get("q") == "Back", (screen.__name__, keys)
            await pilot.press("q")
            await pilot.pause()
            assert app.is_running and app.screen is app.dashboard, screen.__name__
        # the jump from the errors view opens the log around the line: q goes back to the errors view
        await pilot.press("e")
        await pilot.pause()
        await pilot.press("enter")
        await pilot.pause(0.1)
        assert isinstance(app.screen, NodeLogScreen) and _footer_keys(app).get("q") == "Back"
        await pilot.press("q")
        await pilot.pause()
        assert isinstance(app.screen, ErrorsScreen)


async def test_full_screen_log_keeps_the_wrap_setting(settle: Settle) -> None:
    app = make_app(suite_events(fraction=0.6))
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("w")
        await pilot.pause()
        assert app.dashboard.log_pane.wrap
        await pilot.press("l")
        await pilot.pause()
        assert isinstance(app.screen, NodeLogScreen)
        full = pane(app)
        lines = list(full.log_widget.lines)
        # wrapped at the full screen's width (not at a width taken before it was laid out)
        assert full.wrap and any(line.startswith(WRAP_MARK) for line in lines)
        assert max(len(line) for line in lines) > 60
        await pilot.press("w")  # cut here: the dashboard's pane follows when we go back
        await pilot.pause()
        await pilot.press("q")
        await pilot.pause(0.1)
        assert app.screen is app.dashboard and not app.dashboard.log_pane.wrap


async def test_export_goes_into_the_run_folder_and_says_where(
    tmp_path: Path, settle: Settle, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.chdir(tmp_path)
    run_dir = tmp_path / "runs" / "r1"
    run_dir.mkdir(parents=True)
    app = make_app(suite_events(fraction=0.6), run_dir=run_dir)
    notes: list[str] = []
    app.notify = lambda message, **_kw: notes.append(str(message))  # type: ignore[method-assign]
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("x")
        await pilot.pause()
    (saved,) = list((run_dir / "exports").glob("*.log"))
    assert list(tmp_path.glob("*.log")) == []  # nothing in the working directory
    assert any(str(saved.resolve()) in n for n in notes), notes
