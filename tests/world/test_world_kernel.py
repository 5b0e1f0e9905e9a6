"""Every labelled kernel line and incident of the world corpus, as a test (see tests/world/kernel.py)."""

from __future__ import annotations

import pytest

from world.check import Check
from world.kernel import checks, incidents

CHECKS = checks()


def test_corpus_size() -> None:
    # the corpus the fidelity figures are measured on: at least 150 scored lines over 60 incidents
    assert len(incidents()) >= 60
    assert sum(c.kind == "kernel line" for c in CHECKS) >= 150


@pytest.mark.parametrize("check", CHECKS, ids=[f"{c.kind}:{c.item}" for c in CHECKS])
def test_world_kernel(check: Check) -> None:
    assert check.ok, f"expected {check.expected}; got {check.got}"
