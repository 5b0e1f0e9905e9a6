"""A config's own error_patterns never catch less than the built-in set: they run beside it unless the
config sets error_patterns_builtin false (upstream CVS's replace semantics)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _analysis_samples import write_config

from cvs_tui.core.config.loader import load_config
from cvs_tui.core.errors import UserError
from cvs_tui.core.events import ErrorHit, Severity
from cvs_tui.core.parse import DEFAULT_ERROR_PATTERNS, parse_log_bytes

SHIPPED = Path(__file__).resolve().parents[2] / "configs" / "mi3xx_jaxmaxtext_llama-3.1-70b_single.json"
# AMD-AGI/maxtext-slurm docs/job-submission.md (tests/fixtures/world/errors/maxtext-slurm-job-submission.json)
HSA = (
    b"rocdevice.cpp:3583: Aborting with error : HSA_STATUS_ERROR_OUT_OF_RESOURCES:\n"
    b"The runtime failed to allocate the necessary resources. Available Free mem : 24 MB\n"
)


def fatal(data: bytes, patterns: dict[str, str] | None) -> list[tuple[str, str]]:
    return [
        (e.name, e.origin)
        for e in parse_log_bytes(data, patterns)
        if isinstance(e, ErrorHit) and e.severity is Severity.FATAL
    ]


def _patterns(tmp: Path, **over: object) -> dict[str, str] | None:
    def mutate(doc: dict) -> None:
        doc["error_patterns"] = json.loads(SHIPPED.read_text())["error_patterns"]
        doc.update(over)

    return load_config(write_config(tmp, mutate=mutate)).error_patterns


def test_shipped_patterns_alone_miss_what_the_built_in_set_catches(tmp_path: Path) -> None:
    own = _patterns(tmp_path, error_patterns_builtin=False)
    assert own is not None and "gpu fault" not in own
    assert fatal(HSA, own) == []  # upstream's list: the HSA abort passes unnoticed
    assert fatal(HSA, None) == [("gpu fault", "builtin")]


def test_a_configs_patterns_run_beside_the_built_in_set(tmp_path: Path) -> None:
    both = _patterns(tmp_path)
    assert both is not None and set(DEFAULT_ERROR_PATTERNS) <= set(both)
    assert fatal(HSA, both) == [("gpu fault", "builtin")]
    # the config's own signature still fires, named as the config names it
    assert ("NCCL ERROR", "builtin") in fatal(b"node-3:1:1 [0] NCCL ERROR unhandled system error\n", both)


def test_a_config_pattern_named_as_a_built_in_one_replaces_it(tmp_path: Path) -> None:
    def mutate(doc: dict) -> None:
        doc["error_patterns"] = {"gpu fault": "never matches this"}

    got = load_config(write_config(tmp_path, mutate=mutate)).error_patterns
    assert got is not None and got["gpu fault"] == "never matches this"
    assert fatal(HSA, got) == []


def test_no_block_keeps_the_built_in_set(tmp_path: Path) -> None:
    assert load_config(write_config(tmp_path)).error_patterns is None


def test_the_opt_out_is_a_checked_key(tmp_path: Path) -> None:
    bad = write_config(tmp_path, mutate=lambda doc: doc.update(error_patterns_builtin=[False]))
    with pytest.raises(UserError, match="error_patterns_builtin"):
        load_config(bad)
