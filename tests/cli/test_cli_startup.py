"""Start-up of the `cvs-tui` command: what `--version` and `--help` import, and the copies kept cheap.

The wall times themselves are measured by benchmarks/cli_startup.py, never asserted here.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

import pytest

from cvs_tui.cli import main as cli

HEAVY = ("asyncssh", "aiodocker", "aiohttp", "textual", "cvs_tui.core.parse", "pydantic", "rich")

_PROBE = """
import json, sys
sys.argv = ["cvs-tui", *json.loads(sys.argv[1])]
from cvs_tui.cli.main import main
try:
    main()
except SystemExit:
    pass
sys.stdout.flush()
print("\\nMODULES=" + json.dumps(sorted(sys.modules)))
"""


def _imports(*argv: str) -> tuple[str, set[str]]:
    p = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps(list(argv))], capture_output=True, text=True, check=True
    )
    out, _, mods = p.stdout.rpartition("MODULES=")
    return out, set(json.loads(mods))


def _loaded(modules: set[str], name: str) -> bool:
    return any(m == name or m.startswith(name + ".") for m in modules)


@pytest.mark.parametrize("argv", [("--version",), ("--help",), ()])
def test_version_and_help_import_no_heavy_module(argv: tuple[str, ...]) -> None:
    out, modules = _imports(*argv)
    assert "cvs-tui" in out
    for name in HEAVY:
        assert not _loaded(modules, name), f"`cvs-tui {' '.join(argv)}` imported {name}"
    assert not any(m.startswith("cvs_tui.cli.commands.") for m in modules)


def test_plan_imports_no_connection_or_screen_stack() -> None:
    _, modules = _imports("plan", "--help")
    for name in ("asyncssh", "aiodocker", "aiohttp", "textual", "rich", "cvs_tui.core.parse"):
        assert not _loaded(modules, name), f"`cvs-tui plan` imported {name}"


def test_version_names_the_scanner_accel_would() -> None:
    """The cheap description agrees with the parser's own (which imports the scanner)."""
    from cvs_tui.core.parse import accel

    out, _ = _imports("--version")
    assert f"(log parser: {accel.describe()})" in out


def test_command_table_help_matches_each_module() -> None:
    """`--help` reads the table; each command module registers its own help: the two stay equal."""
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    registered = {c.dest: c.help for c in sub._choices_actions}
    assert registered == {name: help_text for name, _, help_text in cli.COMMANDS}


def test_top_level_help_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    out = capsys.readouterr().out
    for name, _, help_text in cli.COMMANDS:
        assert name in out and help_text.split()[0] in out


def test_subcommand_help_is_complete(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["plan", "--help"])
    assert "--slurm-args" in capsys.readouterr().out


def test_config_list_copy_of_distributed_vars_matches_loader() -> None:
    from cvs_tui.cli.commands import config as config_cmd
    from cvs_tui.core.config import loader

    assert config_cmd.DISTRIBUTED_ENV_VARS == loader.DISTRIBUTED_ENV_VARS
