"""Placeholders: {user-id}, {shared_fs}/{paths.X} to a fixed point, {env.NAME}; cycles/unknowns are errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from _config_samples import write_config

from cvs_tui.core.config.loader import load_config
from cvs_tui.core.config.placeholders import resolve_placeholders
from cvs_tui.core.config.problems import Problems
from cvs_tui.core.errors import UserError


def resolve(doc: dict[str, Any], env: dict[str, str] | None = None) -> tuple[dict[str, Any], list[str]]:
    problems = Problems()
    out = resolve_placeholders(doc, user="alice", problems=problems, env=env or {})
    return out, problems.lines


def test_user_id_comes_from_the_given_user(tmp_path: Path) -> None:
    cfg = load_config(write_config(tmp_path), user="carol").config
    assert cfg.paths.shared_fs == "/home/carol"
    assert cfg.container.runtime.args["volumes"] == ["/home/carol:/home/carol"]


def test_user_id_defaults_to_the_os_user(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import getpass

    cfg = load_config(write_config(tmp_path)).config
    assert cfg.paths.temp_dir == f"/tmp/{getpass.getuser()}/jaxmaxtext"


def test_paths_resolve_to_a_fixed_point_and_reach_maxtext_config(tmp_path: Path) -> None:
    def chain(cfg: dict[str, Any]) -> None:
        cfg["paths"].update(
            log_dir="{models_dir}/logs",  # -> models_dir -> shared_fs -> user-id: three levels
            models_dir="{paths.shared_fs}/cache",
        )

    loaded = load_config(write_config(tmp_path, chain), user="dan")
    assert loaded.config.paths.log_dir == "/home/dan/cache/logs"
    assert loaded.runs[0].maxtext_config["tokenizer_path"] == "/home/dan/cache/llama"


def test_env_placeholder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CVS_TEST_SCRATCH", "/scratch/x")
    path = write_config(tmp_path, lambda c: c["paths"].update(temp_dir="{env.CVS_TEST_SCRATCH}/t"))
    assert load_config(path).config.paths.temp_dir == "/scratch/x/t"


def test_unset_env_placeholder_is_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CVS_TEST_UNSET", raising=False)
    path = write_config(tmp_path, lambda c: c["train_params"].update(hf_model_id="{env.CVS_TEST_UNSET}"))
    with pytest.raises(UserError) as exc:
        load_config(path)
    (line,) = exc.value.problems
    assert line.startswith("train_params.hf_model_id: ") and "{env.CVS_TEST_UNSET}" in line


def test_cycle_is_an_error_naming_the_placeholders() -> None:
    _, lines = resolve({"paths": {"a": "{b}/x", "b": "{paths.a}/y", "shared_fs": "/s"}})
    assert len(lines) == 1
    assert "cycle" in lines[0] and "{paths.a}" in lines[0] and "{paths.b}" in lines[0]


def test_self_reference_is_a_cycle() -> None:
    _, lines = resolve({"paths": {"log_dir": "{log_dir}/x"}})
    assert len(lines) == 1 and lines[0].startswith("paths.log_dir: placeholder cycle")


def test_unknown_placeholder_is_an_error_with_a_hint() -> None:
    doc = {
        "paths": {"models_dir": "/m"},
        "train_params": {"maxtext_config": {"tokenizer_path": "{paths.model_dir}"}},
    }
    _, lines = resolve(doc)
    (line,) = lines
    assert line.startswith(
        "train_params.maxtext_config.tokenizer_path: unknown placeholder {paths.model_dir}"
    )
    assert "did you mean {paths.models_dir}?" in line


def test_error_patterns_are_not_substituted() -> None:
    out, lines = resolve({"paths": {}, "error_patterns": {"x": r"\d{3}|{user-id}"}})
    assert lines == [] and out["error_patterns"]["x"] == r"\d{3}|{user-id}"


def test_env_values_are_not_rescanned() -> None:
    out, lines = resolve({"paths": {}, "v": "{env.X}"}, env={"X": "{user-id}"})
    assert lines == [] and out["v"] == "{user-id}"


def test_braces_that_are_not_placeholders_are_left_alone() -> None:
    out, lines = resolve({"paths": {}, "v": "files-{a,b}.json", "w": "{}"})
    assert lines == [] and out["v"] == "files-{a,b}.json" and out["w"] == "{}"


def test_placeholders_in_lists_resolve() -> None:
    out, lines = resolve({"paths": {"shared_fs": "/h/{user-id}"}, "vols": ["{shared_fs}:/w", 3]})
    assert lines == [] and out["vols"] == ["/h/alice:/w", 3]
