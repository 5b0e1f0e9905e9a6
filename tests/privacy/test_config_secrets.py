"""Audit 2 #11: a secret value written into the config file is refused (it comes from the environment,
`{env.X}`, or for the HF token from its file), the launcher and YAML a run writes on a node are readable by
the user only, and known secret values are masked on screen and in every artefact."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from _analysis_samples import FIXTURES, write_config
from _fault_infra import fault_setup
from _runner_infra import infra_only
from suite_fixtures.helpers import cli, remove_scratch_tree

from cvs_tui.cli.main import main
from cvs_tui.core import textsafe
from cvs_tui.core.bus import EventBus
from cvs_tui.core.events import ErrorHit, NodeLogEvent, Severity

KEY = "BS=2,PRECISION=BF16,SL=128"


@pytest.mark.parametrize(
    "name", ["HUGGING_FACE_HUB_TOKEN", "WANDB_API_KEY", "AWS_SECRET_ACCESS_KEY", "DB_PASSWORD"]
)
def test_secret_named_env_is_refused(tmp_path: Path, name: str, capsys: pytest.CaptureFixture[str]) -> None:
    value = "hf_SeCrEtToKeNvAlUe0123456789abcdefgh"
    cfg = write_config(tmp_path, runs=[KEY], mutate=lambda d: d["container"]["env"].update({name: value}))
    assert main(["config", "validate", str(cfg)]) == 2
    err = capsys.readouterr().err
    assert f"container.env.{name}" in err and "secret value does not belong" in err
    assert value not in err


def test_a_secret_from_the_environment_is_allowed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CVS_T_SECRET", "hf_SeCrEtToKeNvAlUe0123456789abcdefgh")
    cfg = write_config(
        tmp_path,
        runs=[KEY],
        mutate=lambda d: d["container"]["env"].update(WANDB_API_KEY="{env.CVS_T_SECRET}"),
    )
    assert main(["config", "validate", str(cfg)]) == 0


def test_tokenizer_and_ordinary_env_names_stay_allowed(tmp_path: Path) -> None:
    env = {"TOKENIZERS_PARALLELISM": "false", "NCCL_DEBUG": "INFO"}
    cfg = write_config(tmp_path, runs=[KEY], mutate=lambda d: d["container"]["env"].update(env))
    assert main(["config", "validate", str(cfg)]) == 0


@infra_only
def test_launcher_and_yaml_are_owner_only(tmp_path: Path) -> None:
    body = (
        'D=$(dirname "$CONFIG")\n'
        'M="$(stat -c %a "$D") $(stat -c %a "$CONFIG") $(stat -c %a "$D/launch.node$RANK.sh")"\n'
        'info x.py:1 "MODES $M"\n'
        "header\nsteps 0 8\nexit 0\n"
    )
    s = fault_setup(tmp_path, body, steps=8)
    try:
        p = cli(s)
        assert p.returncode == 0, p.stdout + p.stderr
        for rank in (0, 1):
            assert "MODES 700 600 700" in s.copied_log(rank).read_text()
    finally:
        remove_scratch_tree(s)


SECRET = "hf_SeCrEtToKeNvAlUe0123456789abcdefgh"


@pytest.fixture
def clean_registry() -> Iterator[None]:
    yield
    textsafe._SECRETS.clear()  # the registry is per process; tests must not leak it


def test_a_secret_a_node_prints_is_masked_everywhere(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], clean_registry: None
) -> None:
    cfg = write_config(
        tmp_path,
        runs=[KEY],
        mutate=lambda d: d["train_params"]["maxtext_config"].update(hf_access_token=SECRET),
    )
    log = tmp_path / "node0.log"
    log.write_bytes(
        (FIXTURES / "single_20steps.log").read_bytes()
        + f"Traceback (most recent call last):\nRuntimeError: hub token {SECRET}\n".encode()
    )
    out = tmp_path / "out"
    assert main(["analyze", str(cfg), "--logs", str(log), "--out", str(out), "--no-ui"]) == 1
    assert SECRET not in capsys.readouterr().out
    for name in ("results.json", "report.html", "junit.xml", "summary.md"):
        text = (out / name).read_text()
        assert SECRET not in text, name
    assert "hub token ***" in (out / "results.json").read_text()
    bus = EventBus(tmp_path / "events.jsonl")
    bus.publish(NodeLogEvent(KEY, 0, ErrorHit("traceback", Severity.FATAL, f"token {SECRET}", 3, "builtin")))
    bus.close()
    assert SECRET not in (tmp_path / "events.jsonl").read_text()
