"""The base of every screen that shows the run: typed access to the app and one version-guarded refresh.

The app's refresh tick calls :meth:`RunViewScreen.refresh_view` on the visible screen; it does nothing
unless the view model moved since this screen last drew it, and otherwise hands the view to ``update``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from textual.screen import Screen

from cvs_tui.core.state import RunState

if TYPE_CHECKING:
    from textual import getters

    from cvs_tui.tui.app import CvsApp


class RunViewScreen(Screen[None]):
    """A screen drawn from the view model (``self.app.view``)."""

    if TYPE_CHECKING:
        # Textual's own pattern (MessagePump.app): the checker sees CvsApp, the runtime keeps Textual's
        # property. A runtime getters.app(CvsApp) would need CvsApp here, and app.py imports the screens.
        app = getters.app(CvsApp)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._shown_version = -1

    @property
    def view(self) -> RunState:
        return self.app.view

    def refresh_view(self, *, force: bool = False) -> None:
        """Bring the screen up to date with the view model, if it moved (or when forced)."""
        view = self.view
        if view.version == self._shown_version and not force:
            return
        self._shown_version = view.version
        self.update(view)

    def update(self, view: RunState) -> None:
        """Draw ``view``; every subclass says how."""
        raise NotImplementedError(f"{type(self).__name__} must implement update(view)")
