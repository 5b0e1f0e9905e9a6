"""Shared fixtures: a private history database for every test; for the Textual tests, waiting for the
event source to drain, and a still cursor. And the Hypothesis profile of every test: no deadline and no
too-slow health check, so a busy 2-core machine slows the property tests down without failing them."""

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


@pytest.fixture(autouse=True)
def _private_history(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test gets its own history database: runs and analyses in tests never reach the user's."""
    monkeypatch.setenv("CVS_TUI_HISTORY_DB", str(tmp_path_factory.mktemp("history") / "history.db"))


@pytest.fixture
def settle() -> Settle:
    return _settle


@pytest.fixture
def no_cursor_blink(monkeypatch: pytest.MonkeyPatch) -> None:
    """A blinking cursor would make screenshots depend on timing; put back after the test."""
    monkeypatch.setattr(Input, "cursor_blink", False)
