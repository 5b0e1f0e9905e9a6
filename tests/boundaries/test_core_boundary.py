"""The core must never import a UI library: import every core module in a fresh interpreter and look."""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys

import cvs_tui.core


def _core_modules() -> list[str]:
    return [m.name for m in pkgutil.walk_packages(cvs_tui.core.__path__, "cvs_tui.core.")]


def test_core_imports_no_ui_library() -> None:
    mods = _core_modules()
    assert "cvs_tui.core.events" in mods
    code = (
        "import importlib, json, sys\n"
        f"for m in {mods!r}: importlib.import_module(m)\n"
        "print(json.dumps(sorted(k for k in sys.modules if k.split('.')[0] in ('textual', 'rich'))))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []
