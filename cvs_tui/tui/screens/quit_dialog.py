"""Leaving while a run is live: stop it (teardown) or detach and let it finish headless.

Following logs that cvs-tui did not launch, nothing on the nodes is ever stopped: "stop" ends the
following and judges the logs as they are, and the dialog says so."""

from __future__ import annotations

from typing import ClassVar, Literal

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Static

QuitChoice = Literal["stop", "detach", "done"]


class QuitDialog(ModalScreen[QuitChoice | None]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("s", "choose('stop')", "Stop run"),
        Binding("d", "choose('detach')", "Detach"),
        Binding("escape,c", "choose('cancel')", "Cancel"),
    ]

    DEFAULT_CSS = """
    QuitDialog { align: center middle; }
    QuitDialog > Vertical { width: 70; height: auto; border: thick $warning; background: $surface;
                            padding: 1 2; }
    QuitDialog Horizontal { height: auto; margin-top: 1; }
    QuitDialog Button { margin: 0 1; }
    """

    def __init__(self, *, following: bool = False) -> None:
        super().__init__()
        self.following = following

    def compose(self) -> ComposeResult:
        with Vertical():
            if self.following:
                yield Static("Still following the logs. What now?")
                yield Static(
                    "[b]s[/b] stop following: judge the logs as they are now and write the report "
                    "(nothing on the nodes is stopped)\n"
                    "[b]d[/b] detach: close this view; following goes on (progress in console.log)\n"
                    "[b]Esc[/b] stay here"
                )
            else:
                yield Static("The run is still going. What should happen to it?")
                yield Static(
                    "[b]s[/b] stop it: stop the trainers, remove containers, write the report\n"
                    "[b]d[/b] detach: close this view; the run goes on (progress in console.log)\n"
                    "[b]Esc[/b] stay here"
                )
            with Horizontal():
                yield Button("Stop following" if self.following else "Stop run", variant="error", id="stop")
                yield Button("Detach", variant="primary", id="detach")
                yield Button("Cancel", id="cancel")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.action_choose(event.button.id or "cancel")

    def action_choose(self, choice: str) -> None:
        if choice == "stop":
            self.dismiss("stop")
        elif choice == "detach":
            self.dismiss("detach")
        else:
            self.dismiss(None)
