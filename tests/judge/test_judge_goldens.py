"""The judge against its goldens (``tests/fixtures/judge``, written by ``regen.py`` there): every edge-case
node log of ``judge_cases`` at each convergence target, judged as a live run judges it, and every MaxText
fixture log judged by ``analyze``, give the RunRecord the goldens hold, field for field (times aside).
A change meant to change a result rewrites the goldens and says why."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

REGEN = Path(__file__).resolve().parents[1] / "fixtures" / "judge" / "regen.py"
GOLDENS = sorted(REGEN.parent.glob("*.json"))


@pytest.fixture(scope="module")
def judged(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    import importlib.util

    spec = importlib.util.spec_from_file_location("judge_goldens_regen", REGEN)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out: dict[str, str] = mod.cases(tmp_path_factory.mktemp("judge"))
    return out


def test_every_case_has_a_golden(judged: dict[str, str]) -> None:
    assert sorted(judged) == [p.name for p in GOLDENS]


@pytest.mark.parametrize("golden", GOLDENS, ids=[p.stem for p in GOLDENS])
def test_the_judge_gives_the_golden_record(judged: dict[str, str], golden: Path) -> None:
    assert json.loads(judged[golden.name]) == json.loads(golden.read_text())
