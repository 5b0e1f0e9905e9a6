"""The command palette is one curated list (F10) and the help screen explains every column (F11)."""

from __future__ import annotations

import re

from _pilot import Settle
from rich.console import Console
from textual.command import CommandList, CommandPalette
from textual.pilot import Pilot
from textual.widgets import Static
from tui_streams import CLOCK, paced, suite_events

from cvs_tui.tui.app import CvsApp
from cvs_tui.tui.screens.help import COLUMNS_HELP, HelpScreen
from cvs_tui.tui.screens.quit_dialog import QuitChoice
from cvs_tui.tui.widgets.node_table import COLUMNS

SIZE = (160, 48)


def _app() -> CvsApp:
    return CvsApp(paced(suite_events(fraction=0.6)), title="t", info={"model": "tiny"}, clock=lambda: CLOCK)


async def _palette_names(app: CvsApp, pilot: Pilot[QuitChoice], query: str = "") -> list[str]:
    await pilot.press("ctrl+p", *query)
    for _ in range(20):
        await pilot.pause(0.1)
        if isinstance(app.screen, CommandPalette) and app.screen.query_one(CommandList).option_count:
            break
    commands = app.screen.query_one(CommandList)
    names = []
    for i in range(commands.option_count):
        prompt = commands.get_option_at_index(i).prompt
        text = Console(width=200).render_str(str(prompt)) if isinstance(prompt, str) else prompt
        names.append(str(getattr(text, "plain", text)).splitlines()[0].strip())
    await pilot.press("escape")
    return names


async def test_palette_lists_each_command_once_without_textual_system_entries(settle: Settle) -> None:
    app = _app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        shown = await _palette_names(app, pilot)
        assert shown and len(shown) == len(set(shown)), shown
        assert {"Errors", "Verdicts", "Help", "Quit"} <= set(shown)
        for query in ("e", "s", "t", "k"):
            names = await _palette_names(app, pilot, query)
            assert len(names) == len(set(names)), (query, names)
            assert not {"Maximize", "Screenshot", "Theme", "Keys"} & set(names), (query, names)


async def test_help_explains_every_node_table_column(settle: Settle) -> None:
    explained = [name for name, _ in COLUMNS_HELP]
    assert explained == [label for label, _, _ in COLUMNS]  # every column, in table order
    app = _app()
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("question_mark")
        await pilot.pause(0.2)
        assert isinstance(app.screen, HelpScreen)
        assert app.screen.query_one("#help-columns", Static).display
        shot = app.export_screenshot()
        out = re.sub(r"<[^>]+>", "", shot.split("</style>", 1)[1]).replace("&#160;", " ")
        assert "Columns" in out and "steps completed / steps the run asks for" in out
        assert "median node" in out
