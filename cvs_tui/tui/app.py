"""The Textual monitor over the core's event stream (a live run, a finished one, or an attached one).

One task reads the source and folds every event into the view model; a refresh tick (10 per second, and
only when something changed) brings the visible screen up to date, so log lines are written in batches
and a 64-node run stays responsive. Nothing here parses logs or computes verdicts.
"""

from __future__ import annotations

import asyncio
import inspect
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from functools import partial
from pathlib import Path
from typing import Any, ClassVar

from textual.app import App, SystemCommand
from textual.binding import Binding, BindingType
from textual.command import DiscoveryHit, Hit, Hits, Provider
from textual.screen import Screen
from textual.scrollbar import ScrollBarRender

from cvs_tui.core.errors import UserError
from cvs_tui.core.events import RunEvent
from cvs_tui.core.feed import EventFeed, as_feed
from cvs_tui.core.run_folder import RunFolder
from cvs_tui.core.state import RunState
from cvs_tui.core.textsafe import safe_event
from cvs_tui.tui.screens.base import RunViewScreen
from cvs_tui.tui.screens.dashboard import DashboardScreen
from cvs_tui.tui.screens.errors import ErrorsScreen
from cvs_tui.tui.screens.health import HealthScreen
from cvs_tui.tui.screens.help import HelpScreen
from cvs_tui.tui.screens.node_log import NodeLogScreen
from cvs_tui.tui.screens.quit_dialog import QuitChoice, QuitDialog
from cvs_tui.tui.screens.verdicts import VerdictsScreen
from cvs_tui.tui.widgets.log_pane import LogPane
from cvs_tui.tui.widgets.node_table import NodeTable

REFRESH_SECONDS = 0.1
QuitCallback = Callable[[QuitChoice], Awaitable[None] | None]


def _toggle_follow(dashboard: DashboardScreen) -> None:
    dashboard.log_pane.action_toggle_follow()


def _filter(dashboard: DashboardScreen) -> None:
    dashboard.log_pane.action_filter()


def _export(dashboard: DashboardScreen) -> None:
    dashboard.log_pane.action_export()


@contextmanager
def ascii_scrollbars() -> Iterator[None]:
    """Scrollbars drawn with spaces instead of eighth-blocks, for terminals that only show ASCII.

    Textual has no per-app setting for these glyphs: they are class attributes of ScrollBarRender, shared
    by every app in the process. So they are swapped only while an ASCII app runs and always put back,
    which matters where several apps run in one process (the tests).
    """
    saved = (ScrollBarRender.VERTICAL_BARS, ScrollBarRender.HORIZONTAL_BARS)
    ScrollBarRender.VERTICAL_BARS = [" "] * 8
    ScrollBarRender.HORIZONTAL_BARS = [" "] * 8
    try:
        yield
    finally:
        ScrollBarRender.VERTICAL_BARS, ScrollBarRender.HORIZONTAL_BARS = saved


class CvsCommands(Provider):
    """Palette entries: screens, log actions, and one "go to node" per node of the viewed run."""

    def _commands(self) -> list[tuple[str, Callable[[], Any], str]]:
        app = self.app
        assert isinstance(app, CvsApp)
        cmds: list[tuple[str, Callable[[], Any], str]] = [
            ("Dashboard", app.action_dashboard, "Per-node table and log"),
            ("Errors", app.action_errors, "Every error hit, fatal first"),
            ("Verdicts", app.action_verdicts, "Metric tables, loss curve, PASS/FAIL"),
            ("Health", app.action_health, "Node health: kernel-log findings, GPU telemetry"),
            ("Toggle follow", app.on_dashboard(_toggle_follow), "Follow the log's end"),
            ("Toggle all nodes", app.on_dashboard(DashboardScreen.action_toggle_merged), "Merged view"),
            ("Filter log", app.on_dashboard(_filter), "Show only matching lines"),
            ("Export log view", app.on_dashboard(_export), "Write the log pane to a file"),
            ("Help", app.action_help, "Keys"),
        ]
        rv = app.view.current_run
        key = app.dashboard.run_key() if app.dashboard.is_mounted else (rv.key if rv else None)
        if key is not None and key in app.view.runs:
            for rank in sorted(app.view.runs[key].nodes):
                cmds.append((f"Go to node {rank}", partial(app.select_node, rank), f"Run {key}"))
        return cmds

    async def discover(self) -> Hits:
        for name, callback, help_text in self._commands():
            if not name.startswith("Go to node"):  # the screens and actions; nodes are found by typing
                yield DiscoveryHit(name, callback, help=help_text)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for name, callback, help_text in self._commands():
            score = matcher.match(name)
            if score > 0:
                yield Hit(score, matcher.highlight(name), callback, help=help_text)


class CvsApp(App[QuitChoice]):
    CSS_PATH = "app.tcss"
    COMMANDS = App.COMMANDS | {CvsCommands}
    ENABLE_COMMAND_PALETTE = True
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("q,ctrl+q", "request_quit", "Quit", priority=False),
        Binding("ctrl+c", "request_quit", "Quit", show=False, priority=True),
        Binding("question_mark,f1", "help", "Help"),
        Binding("e", "errors", "Errors"),
        Binding("v", "verdicts", "Verdicts"),
        Binding("H", "health", "Health"),
        Binding("d", "dashboard", "Dashboard", show=False),
    ]

    def __init__(
        self,
        source: AsyncIterator[RunEvent],
        *,
        title: str = "cvs-tui",
        info: Mapping[str, str] | None = None,
        ascii_only: bool = False,
        live: bool = False,
        following: bool = False,
        run_dir: Path | None = None,
        export_dir: Path | None = None,
        clock: Callable[[], float] = time.time,
        refresh_seconds: float = REFRESH_SECONDS,
        history: bool = True,
    ) -> None:
        super().__init__()
        self.history = history  # show each finished run against its history (`--no-history`: not)
        self.feed: EventFeed = as_feed(source)
        self.run_title = title
        self.info: dict[str, str] = dict(info or {})
        self.ascii_only = ascii_only
        self.live = live  # leaving asks whether to stop the run or detach
        self.following = following  # logs cvs-tui did not launch: "stop" stops only the following
        self.run_dir = run_dir
        self.folder = RunFolder(run_dir) if run_dir is not None else None
        self.export_dir = export_dir or (self.folder.exports_dir if self.folder is not None else Path.cwd())
        self.clock = clock
        self.refresh_seconds = refresh_seconds
        self.view = RunState()
        self.source_done = False
        self.source_error: str | None = None
        self.dashboard = DashboardScreen()
        self._shown_version = -1
        self._shown_second = -1
        self.title = title
        self._glyphs = ExitStack()  # closed when this app unmounts
        if ascii_only:
            self._glyphs.enter_context(ascii_scrollbars())

    # -- life cycle ----------------------------------------------------------------------------------
    def on_mount(self) -> None:
        if self.ascii_only:
            self.add_class("-ascii")
        self.push_screen(self.dashboard)
        self.run_worker(self._consume(), name="events", group="source", exit_on_error=False)
        self.set_interval(self.refresh_seconds, self._tick)

    def on_unmount(self) -> None:
        self._glyphs.close()

    async def _consume(self) -> None:
        """Fold every event into the view model; widgets are updated on the tick, not here."""
        n = 0
        try:
            async for ev in self.feed:
                # node text holds escape sequences the terminal would run (audit #5)
                self.view.apply(safe_event(ev))
                n += 1
                if n % 256 == 0:
                    await asyncio.sleep(0)  # a burst (e.g. a finished run) must not starve the UI
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a broken source is shown, not a crash
            self.source_error = f"{type(exc).__name__}: {exc}"
            self.notify(f"event source failed: {self.source_error}", severity="error", timeout=30)
        self.source_done = True
        self._tick()

    def _tick(self) -> None:
        """Redraw the visible screen when the view model moved (or once a second for the clock)."""
        second = int(self.clock()) if not self.view.finished else -2
        if self.view.version == self._shown_version and second == self._shown_second:
            return
        self._shown_version = self.view.version
        self._shown_second = second
        screen = self.screen
        if isinstance(screen, RunViewScreen):  # help and the quit dialog draw nothing from the view
            screen.refresh_view()
        if screen is not self.dashboard and self.dashboard.is_mounted:
            # Keep the dashboard's log pane drained so returning to it does not write a huge batch.
            self.dashboard.refresh_view()

    def refresh_now(self) -> None:
        """Apply pending view-model changes to the screen immediately (tests and screenshots)."""
        self._shown_version = -1
        if self.dashboard.is_mounted:
            self.dashboard.query_one(NodeTable).hurry()
        self._tick()

    # -- navigation ----------------------------------------------------------------------------------
    def _show(self, screen_type: type[Screen[Any]]) -> None:
        if isinstance(self.screen, screen_type):
            return
        while len(self.screen_stack) > 2:
            self.pop_screen()
        if screen_type is DashboardScreen:
            if self.screen is not self.dashboard:
                self.pop_screen()
            return
        if self.screen is not self.dashboard:
            self.pop_screen()
        self.push_screen(screen_type())

    def action_dashboard(self) -> None:
        self._show(DashboardScreen)

    def action_errors(self) -> None:
        self._show(ErrorsScreen)

    def action_verdicts(self) -> None:
        self._show(VerdictsScreen)

    def action_health(self) -> None:
        self._show(HealthScreen)

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen())

    def on_dashboard(self, action: Callable[[DashboardScreen], None]) -> Callable[[], None]:
        """A palette callback: show the dashboard, then run ``action`` on it."""

        def run() -> None:
            self._show(DashboardScreen)
            self.call_later(action, self.dashboard)

        return run

    def select_node(self, rank: int) -> None:
        self._show(DashboardScreen)
        table = self.dashboard.query_one(NodeTable)
        table.select_rank(rank)

    def open_node_log(self, run: str, node: int | None, *, goto_line: int | None = None) -> None:
        self.push_screen(NodeLogScreen(run, node, goto_line=goto_line))

    def node_log_path(self, run: str, node: int) -> Path | None:
        """Where the run folder keeps this node's full log (None without a folder or a usable name)."""
        if self.folder is None:
            return None
        try:
            return self.folder.run_log(run, node)
        except UserError as exc:  # a malformed plan.json: say so rather than guess a path
            self.notify(exc.problems[0], severity="error", timeout=15)
        except ValueError:
            pass
        return None

    def export_pane(self, pane: LogPane) -> None:
        try:
            path = pane.export(self.export_dir)
        except OSError as exc:
            self.notify(f"export failed: {exc}", severity="error")
            return
        self.notify(f"saved {len(pane.log_widget.lines)} lines to {path.resolve()}", timeout=8)

    def get_system_commands(self, screen: Screen[Any]) -> Iterable[SystemCommand]:
        # One curated list (F10): the screens live in CvsCommands; Textual's own entries (Keys, Maximize,
        # Screenshot, Theme) duplicate the help or do nothing useful here, and its Quit skips the
        # stop-or-detach question, so only a Quit through that question is added.
        del screen
        yield SystemCommand("Quit", "Stop or detach a live run (asks first)", self.action_request_quit)

    # -- leaving -------------------------------------------------------------------------------------
    def action_request_quit(self) -> None:
        if isinstance(self.screen, QuitDialog):
            return
        if not self.live or self.view.finished or self.source_done:
            self.exit("done")
            return

        def chosen(choice: QuitChoice | None) -> None:
            if choice is not None:
                self.exit(choice)

        self.push_screen(QuitDialog(following=self.following), chosen)


async def run_tui(
    source: AsyncIterator[RunEvent],
    *,
    title: str,
    mouse: bool = True,
    ascii: bool = False,
    on_quit: QuitCallback | None = None,
    info: Mapping[str, str] | None = None,
    run_dir: Path | None = None,
    export_dir: Path | None = None,
    following: bool = False,
    history: bool = True,
) -> QuitChoice:
    """Show ``source`` until the user leaves. Returns "done", "stop" or "detach".

    With ``on_quit`` the run is live: leaving before the suite ends asks whether to stop it or detach, and
    ``on_quit(choice)`` is awaited once the terminal is restored. After "detach" the caller keeps reading
    the same source (pass an :class:`EventFeed` to hand the rest to :func:`run_console`).
    """
    header = {**RunFolder(run_dir).plan_info(), **(info or {})} if run_dir is not None else dict(info or {})
    app = CvsApp(
        source,
        title=title,
        info=header,
        ascii_only=ascii,
        live=on_quit is not None,
        following=following,
        run_dir=run_dir,
        export_dir=export_dir,
        history=history,
    )
    choice = await app.run_async(mouse=mouse)
    if app.return_code not in (0, None) and choice is None:
        print("cvs-tui: the terminal UI stopped unexpectedly", file=sys.stderr)
    result: QuitChoice = choice or "done"
    if on_quit is not None and result in ("stop", "detach"):
        maybe = on_quit(result)
        if inspect.isawaitable(maybe):
            await maybe
    return result
