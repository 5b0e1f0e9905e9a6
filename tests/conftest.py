"""Fixtures shared by the Textual tests (waiting for the event source to drain, a still cursor), and the
Hypothesis profile of every test: no deadline and no too-slow health check, so a busy 2-core machine
slows the property tests down without failing them (how many examples run is each test's own setting)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest
from hypothesis import HealthCheck, settings
from textual.pilot import Pilot
from textual.widgets import Input

from cvs_tui.tui.app import CvsApp

settings.register_profile("cvs-tui", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("cvs-tui")

Settle = Callable[[Pilot[object]], Awaitable[None]]


async def _settle(pilot: Pilot[object]) -> None:
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


@pytest.fixture
def settle() -> Settle:
    return _settle


@pytest.fixture
def no_cursor_blink(monkeypatch: pytest.MonkeyPatch) -> None:
    """A blinking cursor would make screenshots depend on timing; put back after the test."""
    monkeypatch.setattr(Input, "cursor_blink", False)
