"""Every labelled error line and traceback of the world corpus (tests/fixtures/world/errors/): fatal or
benign as the engineer labelled it, and the run's reason naming the root cause. One test per item; an
item cvs-tui still reads differently is a strict xfail naming why."""

from __future__ import annotations

from pathlib import Path

import pytest

from world import errors

# "file.json#index" -> what cvs-tui does not read yet
KNOWN_MISSES: dict[str, str] = {}


def _param(path: Path, i: int) -> object:
    key = f"{path.name}#{i}"
    why = KNOWN_MISSES.get(key)
    marks = [pytest.mark.xfail(strict=True, reason=why)] if why else []
    return pytest.param(path, i, id=f"{path.stem}-{i}", marks=marks)


@pytest.mark.parametrize(("path", "i"), [_param(p, i) for p, i in errors.items()])
def test_world_error_item(path: Path, i: int, tmp_path: Path) -> None:
    c = errors.check(path, i, tmp_path)
    assert c.ok, f"{c.item} ({c.kind})\n  expected: {c.expected}\n  got:      {c.got}"


def test_known_misses_name_corpus_items() -> None:
    assert set(KNOWN_MISSES) <= {f"{p.name}#{i}" for p, i in errors.items()}
