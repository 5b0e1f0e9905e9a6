"""A run's loss curve drawn by plotext into a Static (finite values only)."""

from __future__ import annotations

import math
from collections.abc import Collection
from typing import Any

from rich.style import Style
from rich.text import Span, Text
from textual.widgets import Static


def loss_plot_text(
    curve: dict[int, float], width: int, height: int, *, ascii_only: bool, marks: Collection[int] = ()
) -> str:
    """plotext's rendering of step -> loss, or an empty string when there is nothing finite to draw.
    ``marks``: steps drawn as an ``X`` on the curve (the run's stalls)."""
    points = sorted((s, v) for s, v in curve.items() if math.isfinite(v))
    if len(points) < 2 or width < 20 or height < 5:
        return ""
    xs, ys = [s for s, _ in points], [v for _, v in points]
    marked = [(s, v) for s, v in points if s in marks]
    # Block markers survive the Linux console and PuTTY; braille does not.
    marker = "*" if ascii_only else "hd"
    import plotext  # here, not at the top: ~0.25 s of import the first frame need not wait for

    fig: Any = getattr(plotext, "figure", None)
    if fig is not None and hasattr(fig, "signal"):  # plotext >= 6: one master figure object
        fig.clear()
        fig.plot_size(width, height)
        fig.theme("colorless" if ascii_only else "dark")
        fig.draw(fig.signal(xs, ys, marker=marker).lines())
        if marked:
            fig.draw(fig.signal([s for s, _ in marked], [v for _, v in marked], marker="X"))
        fig.label("step", "x")
        text: str = str(fig.build())
        fig.clear()
        return text
    plt: Any = plotext  # plotext 5: module-level state
    plt.clear_figure()
    plt.plotsize(width, height)
    plt.theme("clear")
    plt.plot(xs, ys, marker=marker)
    if marked:
        plt.scatter([s for s, _ in marked], [v for _, v in marked], marker="X")
    plt.xlabel("step")
    text = str(plt.build())
    plt.clear_figure()
    return text


def plot_renderable(ansi: str) -> Text:
    """plotext's ANSI output as Rich text, foreground colours only so it sits on the app's theme."""
    text = Text.from_ansi(ansi)
    spans = []
    for span in text.spans:
        style = span.style if isinstance(span.style, Style) else Style.parse(span.style)
        spans.append(Span(span.start, span.end, Style(color=style.color, bold=style.bold)))
    text.spans = spans
    return text


class LossPlot(Static):
    DEFAULT_CSS = """
    LossPlot { height: 14; }
    """

    def __init__(self, *, ascii_only: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.ascii_only = ascii_only
        self.curve: dict[int, float] = {}
        self.marks: frozenset[int] = frozenset()

    def show(self, curve: dict[int, float], marks: Collection[int] = ()) -> None:
        if curve != self.curve or frozenset(marks) != self.marks:
            self.curve, self.marks = dict(curve), frozenset(marks)
            self._draw()

    def on_resize(self) -> None:
        self._draw()

    def _draw(self) -> None:
        width = max(self.size.width, 40)
        text = loss_plot_text(
            self.curve, width, max(self.size.height, 10), ascii_only=self.ascii_only, marks=self.marks
        )
        self.update(plot_renderable(text) if text else Text("no finite loss values yet", style="dim"))
