"""Driving the Textual app under Pilot: wait until its event source is drained (the `settle` fixture of
tests/tui/conftest.py)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from textual.pilot import Pilot

from cvs_tui.tui.app import CvsApp

Settle = Callable[[Pilot[object]], Awaitable[None]]


async def settle_app(pilot: Pilot[object]) -> None:
    """Wait until the app's source is drained, then bring the screen up to date with it."""
    app = pilot.app
    assert isinstance(app, CvsApp)
    for _ in range(400):
        if app.source_done:
            break
        await pilot.pause(0.01)
    assert app.source_done
    app.refresh_now()
    await pilot.pause()
