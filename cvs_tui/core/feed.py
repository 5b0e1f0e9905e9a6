"""An event source that can change hands: the TUI reads it, then a detach hands the rest to the console.

Cancelling a reader in the middle of ``anext()`` would close an async generator; here the pending read
lives in its own task, so a cancelled reader leaves it for the next one and no event is lost.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from cvs_tui.core.events import RunEvent


async def _next(source: AsyncIterator[RunEvent]) -> RunEvent:
    return await anext(source)


class EventFeed:
    """Async iterator over ``source`` whose pending read survives the cancellation of its reader."""

    def __init__(self, source: AsyncIterator[RunEvent]) -> None:
        self._source = source
        self._pending: asyncio.Task[RunEvent] | None = None
        self.exhausted = False

    def __aiter__(self) -> EventFeed:
        return self

    async def __anext__(self) -> RunEvent:
        if self.exhausted:
            raise StopAsyncIteration
        if self._pending is None:
            self._pending = asyncio.ensure_future(_next(self._source))
        pending = self._pending
        try:
            ev = await asyncio.shield(pending)
        except StopAsyncIteration:
            self._pending = None
            self.exhausted = True
            raise
        except asyncio.CancelledError:
            if pending.done() and not pending.cancelled():
                # The read finished as the reader was cancelled: keep its result for the next reader.
                raise
            if pending.cancelled():
                self._pending = None
            raise
        self._pending = None
        return ev

    async def aclose(self) -> None:
        if self._pending is not None and not self._pending.done():
            self._pending.cancel()
        close = getattr(self._source, "aclose", None)
        if close is not None:
            await close()


def as_feed(source: AsyncIterator[RunEvent]) -> EventFeed:
    return source if isinstance(source, EventFeed) else EventFeed(source)
