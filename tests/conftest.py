"""Fixtures every tier shares: a private history database for every test, and the Hypothesis profile of
every test: no deadline and no too-slow health check, so a busy 2-core machine slows the property tests
down without failing them. A folder's own fixtures live in its conftest.py (tests/tui/conftest.py).

Helpers are imported as top-level modules (`from _analysis_samples import ...`): tests/ is on sys.path
(pyproject's `pythonpath`), and so is each test's own folder (pytest's default import mode; the folders
are not packages, so a test file's name is unique across tests/)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile("cvs-tui", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("cvs-tui")


@pytest.fixture(autouse=True)
def _private_history(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test gets its own history database: runs and analyses in tests never reach the user's."""
    monkeypatch.setenv("CVS_TUI_HISTORY_DB", str(tmp_path_factory.mktemp("history") / "history.db"))
