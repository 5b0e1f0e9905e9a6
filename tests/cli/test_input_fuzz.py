"""Fuzzing every input boundary but the scrubber (tests/privacy/test_privacy_fuzz.py): the config loader, the
cluster loader, the threshold file, the results.json reader, the events.jsonl reader of `attach`, the card
validator and the log parser. Inputs are valid files with one random change (a value replaced by random
JSON, a huge integer, NaN, a duplicate key, deep nesting, a cut, random bytes spliced in) or random text.

The only allowed outcomes are a result or a one-line UserError (what the CLI prints with exit 2). Anything
else (a traceback of any kind) fails the test.

The fast subset (a few hundred examples in all) runs in every run. The nightly run is marked `fuzz`:
`pytest -m fuzz tests/cli/test_input_fuzz.py`, CVS_FUZZ_EXAMPLES examples per target (default 15 000, seven
targets: >= 10^5 in all)."""

from __future__ import annotations

import copy
import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from _analysis_samples import FIXTURES, load_local, sample_results, write_config
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cvs_tui.core.card.build import validate_card_text
from cvs_tui.core.cluster import load_cluster
from cvs_tui.core.config.loader import load_config
from cvs_tui.core.errors import UserError
from cvs_tui.core.event_codec import event_to_dict
from cvs_tui.core.events import RunStartEvent, StageEvent, StageState, SuiteEndEvent
from cvs_tui.core.parse.parser import parse_log_bytes
from cvs_tui.core.results import load_results
from cvs_tui.core.sources.attach import _FolderState, _read_events

FAST = 40  # per target: 7 targets, 280 examples in every run
NIGHTLY = int(os.environ.get("CVS_FUZZ_EXAMPLES", "15000"))
KEY = "BS=2,PRECISION=BF16,SL=128"

_WORK = Path(tempfile.mkdtemp(prefix="cvs-fuzz-"))
_CFG_PATH = write_config(_WORK, runs=[KEY])
BASE_CONFIG = json.loads(_CFG_PATH.read_text())
THRESHOLD_NAME = BASE_CONFIG["threshold_json"]
BASE_THRESHOLD = json.loads((_WORK / THRESHOLD_NAME).read_text())
BASE_CLUSTER = {
    "username": "cvs",
    "priv_key_file": "/nonexistent/id_ed25519",
    "head_node_dict": {"mgmt_ip": "10.0.0.1"},
    "node_dict": {"10.0.0.1": {"port": 22}, "10.0.0.2": {"port": 2222}},
    "env_vars": {"NCCL_DEBUG": "INFO"},
}
BASE_RESULTS = json.loads(sample_results(load_local(_WORK / "", steps=20)).model_dump_json())
BASE_EVENTS = [
    event_to_dict(StageEvent("preflight", StageState.PASSED, "ok", at=1.0)),
    event_to_dict(RunStartEvent(KEY, ("localhost",), 20)),
    event_to_dict(SuiteEndEvent(passed=True, at=2.0)),
]
LOG = (FIXTURES / "single_20steps.log").read_bytes()
CARD = "card_version: 1\nmodel:\n  label: tiny-llama\nitems:\n  - id: perf\n    verified: true\n"

# -- random JSON values and single changes --------------------------------------------------------------
_scalar = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.sampled_from(["<changeme>", "{env.HOME}", "{env.NOPE_X}", "{user-id}", "-1", "", "a" * 300]),
)
_json = st.recursive(
    _scalar,
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=8), c, max_size=3),
    max_leaves=8,
)


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(node, dict):
        for k, v in node.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _paths(v, (*prefix, i))
    return out


def _set(doc: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    parent = doc
    for k in path[:-1]:
        parent = parent[k]
    parent[path[-1]] = value
    return doc


@st.composite
def mutated_json(draw: st.DrawFn, base: Any) -> str:
    """``base`` with one random change, as JSON text (NaN/Infinity may appear, as Python writes them)."""
    doc = copy.deepcopy(base)
    paths = _paths(doc)
    for _ in range(draw(st.integers(0, 2))):
        paths = _paths(doc)
        doc = _set(doc, draw(st.sampled_from(paths)), draw(_json))
    text = json.dumps(doc)
    op = draw(st.sampled_from(["none", "cut", "splice", "bigint", "dupkey", "deep", "bytes"]))
    pos = draw(st.integers(0, len(text)))
    if op == "cut":
        text = text[:pos]
    elif op == "splice":
        text = text[:pos] + draw(st.text(max_size=8)) + text[pos:]
    elif op == "bigint":
        text = text[:pos] + "9" * draw(st.integers(4000, 6000)) + text[pos:]
    elif op == "dupkey" and text.endswith("}") and isinstance(doc, dict) and doc:
        text = text[:-1] + f", {json.dumps(next(iter(doc)))}: 1}}"
    elif op == "deep":
        n = draw(st.integers(60, 3000))
        text = text[:pos] + "[" * n + "]" * n + text[pos:]
    elif op == "bytes":
        text = text[:pos] + draw(st.binary(max_size=6)).decode("latin-1") + text[pos:]
    return text


def _allowed(call: Callable[[], object]) -> None:
    """A result, or one UserError whose lines are single lines; nothing else."""
    try:
        call()
    except UserError as exc:
        assert exc.problems and all("\n" not in p for p in exc.problems), exc.problems


def _write(name: str, text: str) -> Path:
    p = _WORK / name
    p.write_bytes(text.encode("utf-8", "surrogateescape"))
    return p


# -- the targets ----------------------------------------------------------------------------------------
def check_config(text: str) -> None:
    (_WORK / THRESHOLD_NAME).write_text(json.dumps(BASE_THRESHOLD))
    p = _write("cfg.json", text)
    _allowed(lambda: load_config(p))


def check_threshold(text: str) -> None:
    _CFG_PATH.write_text(json.dumps(BASE_CONFIG))
    _write(THRESHOLD_NAME, text)
    _allowed(lambda: load_config(_CFG_PATH))


def check_cluster(text: str) -> None:
    p = _write("cluster.json", text)
    _allowed(lambda: load_cluster(p))


def check_results(text: str) -> None:
    p = _write("results.json", text)
    _allowed(lambda: load_results(p))


def check_events(lines: list[str]) -> None:
    p = _WORK / "events.jsonl"
    p.write_bytes("\n".join(lines).encode("utf-8", "surrogateescape") + b"\n")
    state = _FolderState()
    _read_events(p, state)  # skips and counts what it cannot read; never raises


def check_card(text: str) -> None:
    assert isinstance(validate_card_text(text, source="card.yaml"), list)


def check_parser(data: bytes) -> None:
    assert isinstance(parse_log_bytes(data), list)


_events = st.lists(
    st.one_of(st.sampled_from(BASE_EVENTS).flatmap(mutated_json), st.text(max_size=40)),
    min_size=1,
    max_size=5,
)
_card = st.one_of(
    st.text(max_size=200),
    st.builds(
        lambda t, i, s: t[:i] + s + t[i:], st.just(CARD), st.integers(0, len(CARD)), st.text(max_size=20)
    ),
    st.sampled_from(
        ["a: 9999-99-99\n", "a: &x 1\nb: *x\n", "a: " + "9" * 5000 + "\n", "[" * 500 + "]" * 500]
    ),
)


@st.composite
def _log(draw: st.DrawFn) -> bytes:
    a = draw(st.integers(0, len(LOG)))
    b = draw(st.integers(a, min(len(LOG), a + 4000)))
    noise = draw(st.binary(max_size=64))
    return LOG[a:b][: draw(st.integers(0, 4000))] + noise + LOG[a:b][:200]


TARGETS: dict[str, tuple[Any, Callable[[Any], None]]] = {
    "config": (mutated_json(BASE_CONFIG), check_config),
    "threshold": (mutated_json(BASE_THRESHOLD), check_threshold),
    "cluster": (mutated_json(BASE_CLUSTER), check_cluster),
    "results": (mutated_json(BASE_RESULTS), check_results),
    "events": (_events, check_events),
    "card": (_card, check_card),
    "parser": (_log(), check_parser),
}


def _run(name: str, examples: int) -> None:
    strategy, check = TARGETS[name]
    settings(max_examples=examples, deadline=None, suppress_health_check=list(HealthCheck), database=None)(
        given(strategy)(check)
    )()


@pytest.mark.parametrize("name", list(TARGETS))
def test_fast_fuzz(name: str) -> None:
    _run(name, FAST)


@pytest.mark.fuzz
@pytest.mark.parametrize("name", list(TARGETS))
def test_nightly_fuzz(name: str, request: pytest.FixtureRequest) -> None:
    if "fuzz" not in (request.config.option.markexpr or ""):
        pytest.skip("nightly: select it with -m fuzz")
    _run(name, NIGHTLY)
