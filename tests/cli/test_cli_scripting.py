"""Scripting conventions of `cvs-tui`: --json, -q, completion, did-you-mean, shipped config names,
NO_COLOR, a reader that goes away, and the messages a run ends with (issue 19 items 4, 8, 9)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from _analysis_samples import FIXTURES, write_config

from cvs_tui.cli.main import main
from cvs_tui.core.config import placeholders
from cvs_tui.core.config.problems import Problems

ROOT = Path(__file__).resolve().parents[2]
LOCAL = "local/cpu_jaxmaxtext_tiny-llama_single"
SHIPPED_WITH_CHANGEME = "mi3xx_jaxmaxtext_llama-3.1-8b_distributed"
RUN = "BS=2,PRECISION=BF16,SL=128"


@pytest.fixture
def maxtext_env(monkeypatch: pytest.MonkeyPatch) -> None:
    # the local configs name their interpreter with {env.CVS_TUI_MAXTEXT_PYTHON}; nothing is launched here
    monkeypatch.setenv("CVS_TUI_MAXTEXT_PYTHON", "/opt/maxtext-venv/bin/python")


def _cli(*argv: str, env: dict[str, str] | None = None, **kw: object) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "CVS_TUI_MAXTEXT_PYTHON": "/opt/maxtext-venv/bin/python", **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "cvs_tui.cli.main", *argv],
        capture_output=True,
        text=True,
        env=full,
        check=False,
        **kw,  # type: ignore[arg-type]
    )


@pytest.fixture
def analyzed(tmp_path: Path) -> tuple[Path, Path]:
    """(config, out folder) of a passing analyze of the real 20-step MaxText CPU log."""
    cfg = write_config(tmp_path, steps=20, runs=[RUN])
    out = tmp_path / "out"
    assert main(["analyze", str(cfg), "--logs", str(FIXTURES / "single_20steps.log"), "--out", str(out)]) == 0
    return cfg, out


# -- did-you-mean and shipped names -------------------------------------------------------------------------
def test_unknown_command_suggests_the_close_one(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plna", "x.json"]) == 2
    assert capsys.readouterr().err.strip() == "cvs-tui: error: unknown command 'plna'; did you mean 'plan'?"


@pytest.mark.parametrize(
    ("argv", "unknown"),
    [
        (["scrub", "runs/x", "--public"], "--public"),  # before "--out or --in-place is required"
        (["compare", "a", "b", "--within-runs", "--bogus=1"], "--within-runs --bogus=1"),
        (["plan", "x.json", "-Z"], "-Z"),
    ],
)
def test_an_unknown_option_is_named_first(
    argv: list[str], unknown: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert f"unrecognized arguments: {unknown}" in err and "required" not in err, err


def test_option_prefixes_values_and_negative_numbers_are_not_unknown(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """argparse's own reading stands: an unambiguous prefix, a value that starts with a dash and a negative
    number go through to the command (which then reports its own problem)."""
    assert main(["compare", "/nonexistent/a", "/nonexistent/b", "--within", "--threshold-pct", "-1"]) == 2
    err = capsys.readouterr().err
    assert "unrecognized" not in err and "--threshold-pct: -1.0 must be" in err


def test_a_path_is_still_a_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(tmp_path / "plna.json")]) == 2  # `cvs-tui CONFIG`: the loader names the missing file
    err = capsys.readouterr().err
    assert "did you mean" not in err and "plna.json" in err


def test_shipped_name_without_changeme_is_a_config(
    maxtext_env: None, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["plan", LOCAL]) == 0
    assert "cpu_jaxmaxtext_tiny-llama_single.json" in capsys.readouterr().out


def test_shipped_name_with_changeme_says_copy_first(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", SHIPPED_WITH_CHANGEME]) == 2
    err = capsys.readouterr().err
    assert f"cvs-tui config copy {SHIPPED_WITH_CHANGEME}" in err and "<changeme>" in err


# -- --json ------------------------------------------------------------------------------------------------
def test_config_list_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "list", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    by_name = {c["name"]: c for c in doc["configs"]}
    assert by_name[LOCAL]["changeme"] == [] and by_name[LOCAL]["mode"] == "single"
    assert "container.image" in by_name[SHIPPED_WITH_CHANGEME]["changeme"]
    assert by_name[SHIPPED_WITH_CHANGEME]["mode"] == "distributed"


def test_config_validate_json(maxtext_env: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "validate", LOCAL, "--json"]) == 0
    ok = json.loads(capsys.readouterr().out)
    assert ok["valid"] is True and ok["errors"] == [] and ok["nodes"] == 1
    bad = tmp_path / "bad.json"
    bad.write_text('{"gpu_name": 3}')
    assert main(["config", "validate", str(bad), "--json"]) == 2
    doc = json.loads(capsys.readouterr().out)
    assert doc["valid"] is False and doc["errors"]


def test_analyze_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = write_config(tmp_path, steps=20, runs=[RUN])
    argv = ["analyze", str(cfg), "--logs", str(FIXTURES / "single_20steps.log"), "--out", str(tmp_path / "o")]
    assert main([*argv, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["passed"] is True and [r["key"] for r in doc["runs"]] == [RUN]
    assert Path(doc["files"]["results"]).is_file()


def test_compare_json_on_stdout(analyzed: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    _, out = analyzed
    capsys.readouterr()
    main(["compare", str(out), str(out), "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert isinstance(doc, dict) and doc


def test_check_private_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "notes.txt"
    f.write_text("all good\nran on acmecorp cluster\n")
    assert main(["check-private", str(f), "--deny-term", "acmecorp", "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert len(doc["findings"]) == 1
    hit = doc["findings"][0]
    assert hit["file"] == str(f) and hit["line"] == 2 and hit["category"]
    assert "acmecorp" not in json.dumps(doc["findings"])  # the value itself is never printed


# -- -q, NO_COLOR, broken pipe ----------------------------------------------------------------------------
def test_quiet_prints_only_the_verdict_line(tmp_path: Path) -> None:
    cfg = write_config(tmp_path, steps=20, runs=[RUN])
    log = str(FIXTURES / "single_20steps.log")
    p = _cli("-q", "analyze", str(cfg), "--logs", log, "--out", str(tmp_path / "o"))
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines() == ["PASS  overall"]
    after = _cli("analyze", str(cfg), "--logs", log, "--out", str(tmp_path / "o2"), "-q")
    assert after.stdout.splitlines() == ["PASS  overall"]


def _colours(text: str) -> list[str]:
    """Foreground/background colour parameters in the SGR sequences of ``text``."""
    params = [p for seq in re.findall(r"\x1b\[([0-9;]*)m", text) for p in seq.split(";")]
    return [p for p in params if p.isdigit() and (30 <= int(p) <= 49 or 90 <= int(p) <= 107)]


def test_no_color_is_honoured(analyzed: tuple[Path, Path]) -> None:
    _, out = analyzed
    coloured = _cli("compare", str(out), str(out), env={"FORCE_COLOR": "1"})
    assert _colours(coloured.stdout)  # the check below can fail
    plain = _cli("compare", str(out), str(out), env={"FORCE_COLOR": "1", "NO_COLOR": "1"})
    assert plain.returncode == coloured.returncode
    assert not _colours(plain.stdout)  # bold may stay: NO_COLOR is about colour (no-color.org)


def test_broken_pipe_is_never_a_regression(analyzed: tuple[Path, Path]) -> None:
    """The reader closes before cvs-tui writes: the exit is quiet, 0 or 141, never 1 ("regressed")."""
    _, out = analyzed
    env = {**os.environ, "CVS_TUI_MAXTEXT_PYTHON": "/opt/maxtext-venv/bin/python"}
    r, w = os.pipe()
    proc = subprocess.Popen(
        [sys.executable, "-m", "cvs_tui.cli.main", "compare", str(out), str(out)],
        stdout=w,
        stderr=subprocess.PIPE,
        env=env,
    )
    os.close(w)
    os.close(r)  # the reader is gone before the first byte
    _, err = proc.communicate(timeout=120)
    assert proc.returncode in (0, 141, -13), err  # -13: killed by SIGPIPE, 141 in a shell
    assert b"Traceback" not in err and b"BrokenPipe" not in err


# -- completion --------------------------------------------------------------------------------------------
def _bash_complete(script: str, *words: str) -> list[str]:
    line = " ".join(words)
    prog = (
        f"{script}\nCOMP_WORDS=({line}); COMP_CWORD={len(words) - 1}; _cvs_tui; "
        'printf "%s\\n" "${COMPREPLY[@]}"'
    )
    p = subprocess.run(["bash", "-c", prog], capture_output=True, text=True, check=True)
    return p.stdout.split()


def test_bash_completion_completes_subcommands_actions_and_options(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["completion", "bash"]) == 0
    script = capsys.readouterr().out
    assert _bash_complete(script, "cvs-tui", "pl") == ["plan"]
    assert set(_bash_complete(script, "cvs-tui", "c")) == {
        "config",
        "compare",
        "card",
        "check-private",
        "completion",
    }
    assert _bash_complete(script, "cvs-tui", "config", "l") == ["list"]
    assert "--slurm-args" in _bash_complete(script, "cvs-tui", "plan", "--sl")


@pytest.mark.parametrize("shell", ["zsh", "fish"])
def test_other_shells_name_every_command(shell: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["completion", shell]) == 0
    script = capsys.readouterr().out
    for name in ("plan", "analyze", "check-private", "completion"):
        assert name in script
    if shell == "fish":
        assert "complete -c cvs-tui -n '__fish_use_subcommand' -a plan" in script


# -- messages ----------------------------------------------------------------------------------------------
def test_suite_line_counts_and_links_the_report(analyzed: tuple[Path, Path]) -> None:
    from cvs_tui.cli.verdict_line import suite_line_from_files

    _, out = analyzed
    line = suite_line_from_files(out / "results.json", out / "report.html")
    assert line is not None
    m = re.fullmatch(r"suite PASSED — 1 run, (\d+) checks passed, 0 failed(, \S+)? — (file://\S+)", line)
    assert m, line
    assert int(m[1]) > 0 and m[3] == (out / "report.html").resolve().as_uri()


def test_copy_hint_lists_only_real_changeme_keys(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "copy", LOCAL, str(tmp_path / "a")]) == 0
    out = capsys.readouterr().out
    assert "Next: replace" not in out and "ready" in out and "cvs-tui plan" in out
    assert main(["config", "copy", "mi35x_jaxmaxtext_llama-3.1-70b_single", str(tmp_path / "b")]) == 0
    hint = capsys.readouterr().out.splitlines()[-1]
    assert "(container.image)" in hint and "NCCL" not in hint


def test_plan_warns_when_thresholds_are_not_enforced(
    maxtext_env: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["config", "copy", LOCAL, str(tmp_path)]) == 0
    cfg = tmp_path / "cpu_jaxmaxtext_tiny-llama_single.json"
    capsys.readouterr()
    assert main(["plan", str(cfg)]) == 0
    assert "NOT enforced" not in capsys.readouterr().err
    doc = json.loads(cfg.read_text())
    doc["enforce_thresholds"] = False
    cfg.write_text(json.dumps(doc))
    assert main(["plan", str(cfg)]) == 0
    out = capsys.readouterr()
    assert "NOT enforced" in out.err.splitlines()[-1]
    # said among the warnings at the top of the plan, not only after hundreds of lines
    top = out.out.splitlines()[:15]
    assert any("warning: thresholds NOT enforced: metrics recorded, none gated" in line for line in top), top


def test_maxtext_python_falls_back_to_the_project_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    python = tmp_path / ".venv-maxtext" / "bin" / "python"
    monkeypatch.setattr(placeholders, "project_maxtext_python", lambda: python)
    doc = {"paths": {}, "x": "{env.CVS_TUI_MAXTEXT_PYTHON}"}
    problems = Problems()
    placeholders.resolve_placeholders(doc, user="u", problems=problems, env={})
    assert problems  # no environment there yet: still the unset-variable error
    python.parent.mkdir(parents=True)
    python.write_text("")
    problems = Problems()
    out = placeholders.resolve_placeholders(doc, user="u", problems=problems, env={})
    assert not problems and out["x"] == str(python)
    given = placeholders.resolve_placeholders(
        doc, user="u", problems=Problems(), env={"CVS_TUI_MAXTEXT_PYTHON": "/x"}
    )
    assert given["x"] == "/x"  # an exported value still wins


def test_headless_console_does_not_wrap_in_a_pipe() -> None:
    """A long progress line printed into a pipe stays one line (attach --no-ui | grep)."""
    prog = "from cvs_tui.cli.console import headless_console\nc = headless_console()\nc.print('word ' * 60)\n"
    p = subprocess.run([sys.executable, "-c", prog], capture_output=True, text=True, check=True)
    assert p.stdout.count("\n") == 1 and p.stdout.count("word") == 60
