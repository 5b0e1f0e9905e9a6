"""maxtext_config keys against MaxText's real base.yml (F23): a typo is caught before launch, with a
did-you-mean; without a local MaxText the check is skipped and `config validate` says so."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from cvs_tui.cli.main import main
from cvs_tui.core.config import maxtext_keys
from cvs_tui.core.config.loader import load_config
from cvs_tui.core.config.maxtext_keys import base_yml_keys, check_maxtext_keys, find_base_yml
from cvs_tui.core.config.placeholders import MAXTEXT_PYTHON_VAR
from cvs_tui.core.config.problems import Problems
from cvs_tui.core.errors import UserError

ROOT = Path(__file__).resolve().parents[2]
LOCAL = ROOT / "configs" / "local" / "cpu_jaxmaxtext_tiny-llama_single.json"
MAXTEXT_PYTHON = os.environ.get(MAXTEXT_PYTHON_VAR) or str(ROOT / ".venv-maxtext" / "bin" / "python")
BASE_YML = find_base_yml(MAXTEXT_PYTHON)
needs_maxtext = pytest.mark.skipif(
    BASE_YML is None, reason=f"no MaxText base.yml next to {MAXTEXT_PYTHON} or in .venv-maxtext"
)


def _copy_local(tmp_path: Path, **maxtext: object) -> Path:
    doc = json.loads(LOCAL.read_text())
    doc["train_params"]["maxtext_config"].update(maxtext)
    dest = tmp_path / LOCAL.name
    dest.write_text(json.dumps(doc))
    shutil.copy(LOCAL.with_name(LOCAL.stem + "_threshold.json"), tmp_path)
    return dest


@needs_maxtext
def test_typo_in_maxtext_config_is_a_problem_with_did_you_mean(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(MAXTEXT_PYTHON_VAR, MAXTEXT_PYTHON)
    with pytest.raises(UserError) as err:
        load_config(_copy_local(tmp_path, per_device_batch_sise=2))
    lines = [x for x in err.value.problems if "per_device_batch_sise" in x]
    assert len(lines) == 1
    assert lines[0].startswith("train_params.maxtext_config.per_device_batch_sise: not a MaxText setting")
    assert "did you mean 'per_device_batch_size'?" in lines[0]


@needs_maxtext
def test_shipped_local_config_passes_and_validate_names_base_yml(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(MAXTEXT_PYTHON_VAR, MAXTEXT_PYTHON)
    assert load_config(LOCAL).maxtext_keys_note == f"maxtext_config keys checked against {BASE_YML}"
    assert main(["config", "validate", str(LOCAL)]) == 0
    out = capsys.readouterr().out
    assert f"note: maxtext_config keys checked against {BASE_YML}" in out and "OK " in out


@needs_maxtext
def test_every_shipped_config_key_is_known_to_maxtext() -> None:
    assert BASE_YML is not None
    known = base_yml_keys(BASE_YML)
    assert "per_device_batch_size" in known and len(known) > 100
    for path in sorted((ROOT / "configs").rglob("*.json")):
        mc = (json.loads(path.read_text()).get("train_params") or {}).get("maxtext_config")
        if isinstance(mc, dict):
            problems = Problems()
            check_maxtext_keys(mc, known, BASE_YML, problems)  # base_config is MaxText's, not in base.yml
            assert not problems, (path, problems.lines)


def test_without_local_maxtext_the_check_is_skipped_with_a_note(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # the project's .venv-maxtext is looked up next to the package; point it at nothing for this test
    monkeypatch.setattr(maxtext_keys, "project_maxtext_python", lambda: tmp_path / "none" / "python")
    monkeypatch.setenv(MAXTEXT_PYTHON_VAR, "/usr/bin/python3")
    path = _copy_local(tmp_path, per_device_batch_sise=2)
    assert main(["config", "validate", str(path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("OK ") and "\nnote: maxtext_config keys not checked: no local MaxText" in out


def test_a_trainer_not_run_by_python_is_not_checked(tmp_path: Path) -> None:
    """A shell stand-in trainer (`python: sh`) or a local interpreter without MaxText has no base.yml to
    be held to, whatever MaxText sits next to the tool."""
    assert find_base_yml("sh") is None
    venv_python = tmp_path / "venv" / "bin" / "python"
    venv_python.parent.mkdir(parents=True)
    venv_python.write_text("")
    assert find_base_yml(str(venv_python)) is None


@needs_maxtext
def test_a_typo_for_a_trainer_on_the_nodes_is_a_warning_with_did_you_mean(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`python3` runs on the nodes (in their image): the local MaxText may be another version, so an
    unknown key is a loud warning, not an error."""
    monkeypatch.setenv(MAXTEXT_PYTHON_VAR, MAXTEXT_PYTHON)
    path = _copy_local(tmp_path, per_device_batch_sise=2)
    doc = json.loads(path.read_text())
    doc["train_params"]["python"] = "python3"
    path.write_text(json.dumps(doc))
    loaded = load_config(path)
    (line,) = [w for w in loaded.warnings if "per_device_batch_sise" in w]
    assert "did you mean 'per_device_batch_size'?" in line and "MaxText next to cvs-tui" in line
    assert "unknown keys are warnings" in loaded.maxtext_keys_note
