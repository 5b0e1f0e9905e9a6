"""The keys, and what each node-table column means, on one screen."""

from __future__ import annotations

from typing import ClassVar

from rich.table import Table
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

KEYS: tuple[tuple[str, str], ...] = (
    ("up/down, j/k", "select a node (dashboard) / scroll (logs)"),
    ("enter, l", "open the selected node's log full screen"),
    ("f", "toggle follow; scrolling up pauses it, a counter shows new lines"),
    ("End, G", "resume follow"),
    ("a", "all nodes merged, each line prefixed with its node"),
    ("/", "filter the log (text, or !text to hide); Esc clears"),
    ("w", "wrap long log lines (continuations start with ↪); again to cut them"),
    ("s", "sort the node table: by node, lag (most behind first), errors, status (failed first)"),
    ("n", "find nodes by rank, host or status (e.g. gpu-node-12, hung); Esc clears"),
    ("click a stage", "show its reason (why it was skipped or failed) on the detail line"),
    ("[ / ]", "previous / next run"),
    ("e", "errors: hits a few lines apart grouped into one incident, fatal first; Enter jumps to it"),
    ("v", "verdicts: metric tables, loss curve, PASS/FAIL"),
    ("H", "node health: ok / warn / FAIL / not checked, kernel-log findings with their lines"),
    ("d", "back to the dashboard"),
    ("ctrl+s, x", "save the current log view into the run folder's exports/ (the note gives the path)"),
    ("ctrl+p", "command palette"),
    ("?, F1", "this help"),
    (
        "q, ctrl+q",
        "quit (during a live run: stop the run, or detach and let it go on); on the other "
        "screens q goes back and ctrl+q quits",
    ),
)

# What each node-table column shows (F11), keyed by its header in node_table.COLUMNS.
COLUMNS_HELP: tuple[tuple[str, str], ...] = (
    ("node", "rank and host; ◆ (* in ASCII) marks the root-cause node of a failed run"),
    ("status", "waiting, connecting, starting, training, done; failed, hung, stalled, unreachable, stopped"),
    ("health", "kernel log and GPU checks over the whole suite: ok / warn / FAIL / not checked"),
    ("steps", "steps completed / steps the run asks for (-/30 before the first step)"),
    ("loss", "loss of the node's latest step; NaN or inf in red"),
    ("loss trend", "sparkline of the node's recent finite losses (oldest left)"),
    ("tok/s/dev", "tokens per second per device of the latest step, as MaxText logs it"),
    ("s/step", "seconds of the latest training step, as MaxText logs it (one step, no window)"),
    ("lag", "steps behind (-) or ahead (+) of the median node of the run"),
    ("gpu %/W/°C", "mean utilisation, power and temperature over the node's GPUs, latest sample"),
    ("errors", "error-signature hits in the node's log (warnings and fatal; red when any is fatal)"),
    ("stalls", "steps far slower than the node's median step, found when the run is judged: count, longest"),
    ("last line", "the node's newest log line; before its first step, led by the start-up phase"),
)


class HelpScreen(ModalScreen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape,q,question_mark,f1", "dismiss", "Close")]

    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll { width: 90; max-width: 100%; height: auto; max-height: 90%;
                                  border: round $accent; background: $surface; padding: 0 1; }
    """

    def compose(self) -> ComposeResult:
        table = Table(show_header=False, box=None, expand=True)
        table.add_column(style="bold cyan", no_wrap=True)
        table.add_column()
        for key, what in KEYS:
            table.add_row(key, what)
        columns = Table(show_header=False, box=None, expand=True, title="Columns", title_justify="left")
        columns.add_column(style="bold cyan", no_wrap=True)
        columns.add_column()
        for name, what in COLUMNS_HELP:
            columns.add_row(name, what)
        with VerticalScroll() as scroll:
            scroll.border_title = "Keys"
            yield Static(table)
            yield Static("Keys avoid ctrl+enter and alt combinations so they work in tmux and over SSH.")
            yield Static(columns, id="help-columns")

    async def action_dismiss(self, result: None = None) -> None:
        self.dismiss(result)
