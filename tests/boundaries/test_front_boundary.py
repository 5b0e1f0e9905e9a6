"""The headless front-end (cvs_tui.cli, cvs_tui.render) never loads Textual: only the TUI package does."""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys

import cvs_tui.cli
import cvs_tui.render


def _modules() -> list[str]:
    mods = ["cvs_tui.cli", "cvs_tui.render"]
    for pkg in (cvs_tui.cli, cvs_tui.render):
        mods += [m.name for m in pkgutil.walk_packages(pkg.__path__, f"{pkg.__name__}.")]
    return mods


def test_cli_and_console_import_no_textual() -> None:
    mods = _modules()
    assert "cvs_tui.cli.console" in mods and "cvs_tui.cli.commands.run" in mods
    code = (
        "import importlib, json, sys\n"
        f"for m in {mods!r}: importlib.import_module(m)\n"
        "print(json.dumps(sorted(k for k in sys.modules if k.split('.')[0] == 'textual' "
        "or k.startswith('cvs_tui.tui'))))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []
