"""The layer contracts in pyproject.toml ([tool.importlinter]) hold: pytest runs `lint-imports` on them.

test_core_boundary.py and test_front_boundary.py check what importing a module loads at run time; these
contracts check the import graph, function-level imports included: the core's layers (runner and sources
above watch, above health and judge, above plan and transport, above config, above parse), the sources
never importing the runner, parse and judge never importing the runner, config never importing the plan.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LINT = Path(sys.executable).parent / "lint-imports"


def _lint(*config: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT), "--no-cache", *config], cwd=ROOT, capture_output=True, text=True, timeout=300
    )


def test_import_contracts_are_kept() -> None:
    out = _lint()
    assert out.returncode == 0, out.stdout + out.stderr
    assert "0 broken" in out.stdout


def test_a_broken_contract_fails(tmp_path: Path) -> None:
    """The check sees real imports: the judge does import the plan, so forbidding that must fail."""
    cfg = tmp_path / "contracts.toml"
    cfg.write_text(
        '[tool.importlinter]\nroot_package = "cvs_tui"\n\n'
        '[[tool.importlinter.contracts]]\nname = "judge without plan"\ntype = "forbidden"\n'
        'source_modules = ["cvs_tui.core.judge"]\nforbidden_modules = ["cvs_tui.core.plan"]\n'
    )
    out = _lint(str(cfg))
    assert out.returncode != 0
    assert "cvs_tui.core.judge is not allowed to import cvs_tui.core.plan" in out.stdout


def test_the_sources_load_no_launcher() -> None:
    """Follow mode, replay, attach and analyze run where no launcher does: importing them loads no
    runner module (the graph contract above says the same of the source; this checks what Python loads)."""
    code = (
        "import sys\n"
        "import cvs_tui.core.sources.attach, cvs_tui.core.sources.follow\n"
        "import cvs_tui.core.sources.offline, cvs_tui.core.sources.replay\n"
        "print(sorted(m for m in sys.modules if m.startswith('cvs_tui.core.runner')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
