"""Every labelled MaxText log of the world corpus (tests/fixtures/world/maxtext/) read as the engineer
read it: each log is one test; benchmarks/world_corpus.py prints the table.

A log cvs-tui still reads differently from the label is a strict xfail naming why, so the table and the
tests agree and a fix shows up as an unexpected pass."""

from __future__ import annotations

from pathlib import Path

import pytest

from world import maxtext

# label file stem -> what cvs-tui does not read yet (empty: every log reads as labelled)
KNOWN_MISSES: dict[str, str] = {}


def _param(meta: Path) -> object:
    why = KNOWN_MISSES.get(meta.stem)
    marks = [pytest.mark.xfail(strict=True, reason=why)] if why else []
    return pytest.param(meta, id=meta.stem, marks=marks)


@pytest.mark.parametrize("meta", [_param(m) for m in maxtext.items()])
def test_world_maxtext_log(meta: Path) -> None:
    c = maxtext.check(meta)
    assert c.ok, f"{c.item}\n  expected: {c.expected}\n  got:      {c.got}"


def test_known_misses_name_corpus_logs() -> None:
    assert set(KNOWN_MISSES) <= {m.stem for m in maxtext.items()}
