"""Fixtures of the Textual tests: waiting for the event source to drain, and a still cursor."""

from __future__ import annotations

import pytest
from _pilot import Settle, settle_app
from textual.widgets import Input


@pytest.fixture
def settle() -> Settle:
    return settle_app


@pytest.fixture
def no_cursor_blink(monkeypatch: pytest.MonkeyPatch) -> None:
    """A blinking cursor would make screenshots depend on timing; put back after the test."""
    monkeypatch.setattr(Input, "cursor_blink", False)
