"""`cvs-tui card validate`: a card built from the real MaxText results validates, and a copy edited to break
each rule fails with that rule's message (one line per problem, exit 1)."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from _analysis_samples import write_config
from test_card import _resume_folder, _single, _twoproc

from cvs_tui.cli.main import main
from cvs_tui.core.card import CardSource, build_card, card_to_yaml, load_card_source, validate_card_text
from cvs_tui.core.card.schema import PERFORMANCE_DISCLAIMER, load_card_yaml
from cvs_tui.core.config.loader import load_config
from cvs_tui.core.privacy import build_context


@pytest.fixture(scope="module")
def card_text(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A card with every item verified: perf (1 and 2 GPUs), checkpoint resume and weak scaling."""
    mp = pytest.MonkeyPatch()
    mp.setenv("CVS_TUI_MAXTEXT_PYTHON", "/opt/maxtext-venv/bin/python")
    try:
        tmp = tmp_path_factory.mktemp("card")
        resume = _resume_folder(tmp)
        loaded = load_config(write_config(tmp, steps=20, runs=["BS=2,PRECISION=BF16,SL=128"]))
        r = load_card_source(resume)
        sources = [
            load_card_source(_single(tmp)),
            CardSource(r.results, r.label, loaded),
            load_card_source(_twoproc(tmp)),
        ]
        text = card_to_yaml(build_card(sources))
    finally:
        mp.undo()
    return text


def _dump(data: Any) -> str:
    return yaml.safe_dump(data, sort_keys=False)


def test_full_card_is_valid(card_text: str, tmp_path: Path) -> None:
    data = load_card_yaml(card_text)
    assert {k: v for k, v in data["verification_index"].items()} == {
        "training": {"CPU": {"verified": ["checkpoint_resume"]}},
        "performance": {"CPU": "verified"},
        "weak_scaling": {"CPU": "verified"},
    }
    assert validate_card_text(card_text) == []
    f = tmp_path / "card.yaml"
    f.write_text(card_text)
    assert main(["card", "validate", str(f)]) == 0


def _perf(d: dict) -> dict:
    return d["items"]["pretrain_performance"]["CPU"]


def _v1(d: dict) -> dict:
    return _perf(d)["variants"]["bf16_bs2_sl128_n1"]


def _set(fn: Callable[[dict], None]) -> Callable[[dict], dict]:
    def edit(d: dict) -> dict:
        d = copy.deepcopy(d)
        fn(d)
        return d

    return edit


DATA_EDITS: list[tuple[str, Callable[[dict], dict], str]] = [
    ("unknown key", _set(lambda d: d.update(notes="x")), "notes: key not allowed in a card"),
    (
        "unknown leaf key",
        _set(lambda d: _v1(d).update(command="./train.sh")),
        "variants.bf16_bs2_sl128_n1.command: key not allowed in a card",
    ),
    (
        "forbidden key fragment",
        _set(lambda d: d["verification_environment"].update(host_image="x")),
        "verification_environment.host_image: key contains the private fragment 'host'",
    ),
    (
        "hardware not allowlisted",
        _set(
            lambda d: (
                d["items"]["pretrain_performance"].update(
                    {"ACME9000": d["items"]["pretrain_performance"].pop("CPU")}
                ),
                d["verification_index"]["performance"].update(
                    {"ACME9000": d["verification_index"]["performance"].pop("CPU")}
                ),
            )
        ),
        "items.pretrain_performance.ACME9000: hardware 'ACME9000' is not an allowlisted public accelerator",
    ),
    (
        "index drifts from items",
        _set(lambda d: d["verification_index"]["performance"].update(CPU="unverified")),
        "verification_index.performance.CPU: 'unverified' does not match the items ('verified')",
    ),
    (
        "index misses a hardware",
        _set(lambda d: d["verification_index"].pop("weak_scaling")),
        "verification_index.weak_scaling.CPU: 'missing' does not match the items ('verified')",
    ),
    (
        "verified without a date",
        _set(lambda d: _v1(d).pop("last_verified")),
        "variants.bf16_bs2_sl128_n1: status verified needs last_verified (a date)",
    ),
    (
        "verified with a non-finite metric",
        _set(lambda d: _v1(d)["metrics"].update(final_loss=float("nan"))),
        "status verified needs finite metrics; not finite or missing: final_loss",
    ),
    (
        "verified with a missing metric",
        _set(lambda d: _v1(d)["metrics"].pop("tokens_per_sec_total")),
        "not finite or missing: tokens_per_sec_total",
    ),
    (
        "container status disagrees with variants",
        _set(lambda d: _v1(d).update(status="unverified")),
        "items.pretrain_performance.CPU: status 'verified' but its variants make it 'unverified'",
    ),
    (
        "bad status word",
        _set(lambda d: _v1(d).update(status="smoke")),
        "variants.bf16_bs2_sl128_n1.status: Input should be 'verified', 'unverified'",
    ),
    (
        "variant key is not its precision",
        _set(lambda d: _perf(d)["variants"].update({"fp8": _perf(d)["variants"].pop("bf16_bs2_sl128_n1")})),
        "variants.fp8: variant key must be its precision",
    ),
    (
        "summary without disclaimer or scope",
        _set(lambda d: d.update(summary="All good.")),
        "summary: must name the performance scope pretrain_performance.CPU",
    ),
    (
        "gbs not per-device x gpus",
        _set(lambda d: _v1(d)["workload"].update(global_batch_size=3)),
        "global_batch_size 3 is not per_device_batch_size x num_gpus (2)",
    ),
    (
        "weak scaling with one point",
        _set(lambda d: d["items"]["pretrain_weak_scaling"]["CPU"]["points"].pop()),
        "items.pretrain_weak_scaling.CPU: weak scaling needs at least 2 points, got 1",
    ),
    (
        "weak scaling batch not proportional",
        _set(
            lambda d: [
                p.update(global_batch_size=8)
                or p["workload"].update(global_batch_size=8, per_device_batch_size=4)
                for p in d["items"]["pretrain_weak_scaling"]["CPU"]["points"][1:]
            ]
        ),
        "global_batch_size must grow in proportion to num_gpus",
    ),
    (
        "resume sentinels do not match",
        _set(
            lambda d: d["items"]["checkpoint_resume"]["CPU"]["resume_comparison"].update(
                sentinels_match=False
            )
        ),
        "items.checkpoint_resume.CPU: status verified but sentinels_match is false",
    ),
    (
        "terminal leaf carries run data",
        _set(lambda d: d["items"]["checkpoint_resume"]["CPU"].update(status="unsupported")),
        "status unsupported must leave precision empty",
    ),
    (
        "private host in the summary",
        _set(lambda d: d.update(summary=d["summary"] + " Ran on 10.20.30.41.")),
        " ip",
    ),
    (
        "path in the title",
        _set(lambda d: d.update(title="runs from /home/alice/cvs")),
        " home",
    ),
]


@pytest.mark.parametrize(("name", "edit", "needle"), DATA_EDITS, ids=[e[0] for e in DATA_EDITS])
def test_edited_card_fails_with_the_rule(card_text: str, name: str, edit: Callable, needle: str) -> None:
    text = _dump(edit(load_card_yaml(card_text)))
    problems = validate_card_text(text, source="card.yaml")
    assert any(needle in p for p in problems), (name, problems)
    assert all(p.startswith("card.yaml") for p in problems)


TEXT_EDITS: list[tuple[str, Callable[[str], str], str]] = [
    ("duplicate key", lambda t: t.replace("title:", "title: a\ntitle:", 1), "duplicate key 'title'"),
    (
        "anchor and alias",
        lambda t: t.replace("model:\n  label:", "model: &m\n  label:", 1) + "extra: *m\n",
        "anchor &m (anchors are not allowed)",
    ),
    ("alias", lambda t: t.replace("model:\n  label:", "model: &m\n  label:", 1) + "extra: *m\n", "alias *m"),
    ("tag", lambda t: t.replace("title: ", "title: !!str ", 1), "tag tag:yaml.org,2002:str"),
    ("not yaml", lambda t: t + "\n  - : [\n", "not valid YAML"),
    ("not a mapping", lambda t: "- a\n- b\n", "the document must be a mapping"),
    ("url", lambda t: t.replace("label: tiny-llama", "label: https://example.org/x", 1), "url"),
    ("cloud bucket", lambda t: t.replace("label: tiny-llama", "label: gs://team-bucket/x", 1), "bucket"),
    ("cluster word", lambda t: t.replace("label: tiny-llama", "label: cluster seven", 1), "cluster word"),
    ("token", lambda t: t.replace("label: tiny-llama", "label: hf_" + "a" * 34, 1), "token"),
    ("loopback in a card", lambda t: t.replace("label: tiny-llama", "label: '[::1]'", 1), "ip"),
]


@pytest.mark.parametrize(("name", "edit", "needle"), TEXT_EDITS, ids=[e[0] for e in TEXT_EDITS])
def test_edited_card_text_fails(card_text: str, name: str, edit: Callable, needle: str) -> None:
    problems = validate_card_text(edit(card_text), source="card.yaml")
    assert any(needle in p for p in problems), (name, problems)


def test_privacy_findings_never_print_the_term(card_text: str, tmp_path: Path, capsys) -> None:
    secret = "zebra-site-42"
    f = tmp_path / "card.yaml"
    f.write_text(card_text.replace("label: tiny-llama", f"label: tiny-llama {secret}", 1))
    code = main(["card", "validate", str(f), "--deny-term", secret.upper()])
    out = capsys.readouterr().out
    assert code == 1
    assert "matched private term #1" in out and secret not in out.lower()
    ctx = build_context(deny_terms=[secret], environ={})
    assert any("term" in p for p in validate_card_text(f.read_text(), context=ctx))


def test_every_problem_is_reported_at_once(card_text: str, tmp_path: Path, capsys) -> None:
    d = load_card_yaml(card_text)
    d["summary"] = "x"
    d["verification_index"]["performance"]["CPU"] = "unverified"
    f = tmp_path / "c.yaml"
    f.write_text(_dump(d))
    assert main(["card", "validate", str(f)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) >= 2 and all(line.startswith(str(f)) for line in lines)


def test_disclaimer_card_without_perf(card_text: str) -> None:
    d = load_card_yaml(card_text)
    d["items"].pop("pretrain_performance")
    d["items"].pop("pretrain_weak_scaling")
    d["verification_index"].pop("performance")
    d["verification_index"].pop("weak_scaling")
    d["summary"] = "Functional only."
    assert any("performance disclaimer" in p for p in validate_card_text(_dump(d)))
    d["summary"] = PERFORMANCE_DISCLAIMER + " Functional only."
    assert validate_card_text(_dump(d)) == []
    assert json.dumps(d, default=str)  # plain data, nothing else inside
