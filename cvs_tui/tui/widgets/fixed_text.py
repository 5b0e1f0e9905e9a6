"""A text widget whose size never depends on its text, redrawn without a layout pass.

``Static.update`` re-lays out the whole screen by default. The dashboard's header, stage list, detail line
and the log pane's status line change on every refresh tick while their size is fixed (by CSS, or set by
their owner), so a layout pass per tick repainted every widget on the screen for nothing.
"""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static


class FixedText(Static):
    """A Static of a fixed size: :meth:`show_text` repaints it alone, and not at all for the same text."""

    _shown_text: Text | None = None  # set per instance by show_text

    def show_text(self, text: Text) -> None:
        if self._shown_text is not None and text == self._shown_text:
            return
        self._shown_text = text
        self.update(text, layout=False)
