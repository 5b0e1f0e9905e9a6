"""What the exported series read: the event stream folded as the front-ends fold it, plus step arrival.

:class:`LiveRun` keeps its own :class:`RunState` (the reducer the console and the TUI use), fed every
event except raw log lines (no series needs them, and they are the reducer's costliest fold), and the
clock time each node's latest step arrived (the events carry no time for it). A parsed step, nearly
every event, is folded without its loss (``RunState.apply_progress``): no series shows one.
:func:`tap` passes a source's events on unchanged and folds each one on the way, so a front-end's
stream feeds the exporter without a second subscription.

The collector reads this state from the HTTP server's thread while the event loop writes it: it copies
each container it walks (a C-level copy of a dict or deque holds the GIL throughout), so a scrape sees a
possibly older but never a torn node list.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable

from cvs_tui.core.events import LogLinesEvent, NodeLogEvent, RunEvent, StepEvent
from cvs_tui.core.state import RunState


class LiveRun:
    """The run state the series are read from; :meth:`apply` takes every event of the stream."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.state = RunState()
        self.last_step_at: dict[tuple[str, int], float] = {}  # (run, rank) -> clock() at its latest step

    def apply(self, ev: RunEvent) -> None:
        if type(ev) is NodeLogEvent and type(ev.event) is StepEvent:  # nearly every event
            self.last_step_at[(ev.run, ev.node)] = self.clock()
            self.state.apply_progress(ev)  # no series shows a loss: its curve is not kept
        elif type(ev) is not LogLinesEvent:
            self.state.apply(ev)


async def tap(source: AsyncIterator[RunEvent], live: LiveRun) -> AsyncIterator[RunEvent]:
    """``source``'s events, each folded into ``live`` before it is passed on."""
    apply = live.apply
    async for ev in source:
        apply(ev)
        yield ev
