"""Every labelled Slurm ending of the world corpus, as a test (see tests/world/slurm.py)."""

from __future__ import annotations

import pytest

from world.check import Check
from world.slurm import checks, endings

CHECKS = checks()


def test_corpus_size() -> None:
    assert len(endings()) >= 25


@pytest.mark.parametrize("check", CHECKS, ids=[f"{c.item}" for c in CHECKS])
def test_world_slurm(check: Check) -> None:
    assert check.ok, f"expected {check.expected}; got {check.got}"
