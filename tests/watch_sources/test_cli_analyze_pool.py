"""`cvs-tui analyze` parses big node logs in a process pool: the same events, ranks and errors as parsing
them one after another (real MaxText CPU logs from tests/fixtures/maxtext)."""

from __future__ import annotations

from pathlib import Path

import pytest
from _analysis_samples import FIXTURES

from cvs_tui.core.errors import UserError
from cvs_tui.core.sources import offline

LOGS = [FIXTURES / "twoproc_node0.log", FIXTURES / "twoproc_node1.log", FIXTURES / "single_20steps.log"]


@pytest.fixture
def always_pool(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(offline, "POOL_MIN_BYTES", 0)  # the fixtures are small; the pool is what is tested


def test_pool_gives_the_same_events_in_rank_order(always_pool: None) -> None:
    pooled = offline.parse_node_logs(LOGS, {"custom": r"Skipping jax distributed"}, workers=2)
    serial = [offline.parse_log_file(p, {"custom": r"Skipping jax distributed"}) for p in LOGS]
    assert pooled == serial
    assert [n for _, n in pooled] == [len(p.read_bytes().splitlines()) for p in LOGS]


def test_a_worker_error_is_the_same_user_error(always_pool: None, tmp_path: Path) -> None:
    unreadable = tmp_path / "node1.log"
    unreadable.mkdir()  # a folder where a log should be: reading it fails in the worker
    with pytest.raises(UserError) as err:
        offline.parse_node_logs([LOGS[0], unreadable], None, workers=2)
    assert str(unreadable) in str(err.value) and "cannot read the log" in str(err.value)


def test_small_logs_are_parsed_here(monkeypatch: pytest.MonkeyPatch) -> None:
    """Below POOL_MIN_BYTES no worker starts (they would cost more than the parse)."""
    import concurrent.futures

    def no_pool(*_a: object, **_k: object) -> None:
        raise AssertionError("a process pool was started for small logs")

    monkeypatch.setattr(concurrent.futures, "ProcessPoolExecutor", no_pool)
    assert len(offline.parse_node_logs(LOGS, None)) == len(LOGS)
