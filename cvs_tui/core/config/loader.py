"""Load a CVS jaxmaxtext config strictly: every problem at once, one line each, never a traceback.

Order: read JSON -> drop `_` comment keys (an error inside maxtext_config) -> find `<changeme>` tags ->
fill documented `paths` defaults -> resolve placeholders -> schema -> threshold file -> sweeps/runs ->
cross-field checks. Each step works on the whole document and records problems instead of stopping, so
one run of `cvs-tui config validate` shows everything that needs fixing.
"""

from __future__ import annotations

import copy
import getpass
import os
from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import ValidationError

from cvs_tui.core.config.blocks import ThresholdSpec
from cvs_tui.core.config.checks import (
    PER_NODE_ENV_VARS,
    checkpoint_sweep_selected,
    dig,
    literal_secrets,
    semantic_checks,
)
from cvs_tui.core.config.maxtext_keys import check_config_keys
from cvs_tui.core.config.model import CvsConfig, Paths, RunSpec, is_secret_name
from cvs_tui.core.config.placeholders import resolve_placeholders
from cvs_tui.core.config.problems import Problems, add_validation_errors, jpath
from cvs_tui.core.config.sweeps import build_runs
from cvs_tui.core.config.thresholds import check_coverage, check_gated, parse_thresholds, read_json_object
from cvs_tui.core.errors import UserError
from cvs_tui.core.parse.signatures import DEFAULT_ERROR_PATTERNS

__all__ = [
    "DISTRIBUTED_ENV_VARS",
    "PER_NODE_ENV_VARS",
    "LoadedConfig",
    "RunSpec",
    "find_changeme",
    "load_config",
]

CHANGEME = "<changeme>"
# Their presence in container.env marks a config as distributed (RDMA/NIC device selection).
DISTRIBUTED_ENV_VARS = ("NCCL_IB_HCA", "NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "NCCL_IB_GID_INDEX")
LAUNCHER_ENV_VARS = (*PER_NODE_ENV_VARS, "XLA_FLAGS")
# Subtrees that pass through to MaxText: a `_` key there is written to the YAML, so it is an error.
_NO_COMMENT_KEYS = (("train_params", "maxtext_config"),)


@dataclass(frozen=True)
class LoadedConfig:
    path: Path
    config: CvsConfig
    raw: dict[str, Any]
    threshold_path: Path
    thresholds: dict[str, dict[str, ThresholdSpec]]
    mode: Literal["single", "distributed"]
    warnings: list[str] = field(default_factory=list)
    preflight_errors: list[str] = field(default_factory=list)
    runs: list[RunSpec] = field(default_factory=list)
    model_label: str = ""
    error_patterns: dict[str, str] | None = None
    maxtext_keys_note: str = ""  # what maxtext_config's keys were checked against, or why they were not

    @property
    def all_synthetic(self) -> bool:
        """True when no selected run needs the tokenizer (smoke and checkpoint runs reuse a sweep's)."""
        return all(r.maxtext_config.get("dataset_type") == "synthetic" for r in self.runs)


def effective_error_patterns(patterns: dict[str, str] | None, builtin: bool = True) -> dict[str, str] | None:
    """The signatures a run scans: None (the built-in set) when the config has no error_patterns; else the
    config's beside the built-in set (a config pattern named as a built-in one replaces it), or alone when
    error_patterns_builtin is false. A config's own list so never catches less than the built-in set
    unless it says so."""
    if patterns is None:
        return None
    if not builtin:
        return dict(patterns)
    return {**DEFAULT_ERROR_PATTERNS, **patterns}


def drop_comments(node: Any, parts: list[str | int], problems: Problems) -> Any:
    """Drop `_`-prefixed keys everywhere, except where they would reach MaxText (an error there)."""
    if isinstance(node, dict):
        out: dict[str, Any] = {}
        forbidden = tuple(parts) in _NO_COMMENT_KEYS
        for k, v in node.items():
            if k.startswith("_"):
                if forbidden:
                    problems.add(
                        jpath([*parts, k]),
                        "comment keys are not allowed in maxtext_config (every key is written to the MaxText "
                        "YAML and MaxText rejects unknown keys)",
                        "remove it or move the comment next to train_params",
                    )
                continue
            out[k] = drop_comments(v, [*parts, k], problems)
        return out
    if isinstance(node, list):
        return [drop_comments(v, [*parts, i], problems) for i, v in enumerate(node)]
    return node


def find_changeme(node: Any, parts: list[str | int] | None = None) -> list[list[str | int]]:
    """JSON paths of every string value still carrying a `<changeme>` tag (case-insensitive)."""
    parts = parts or []
    found: list[list[str | int]] = []
    if isinstance(node, dict):
        for k, v in node.items():
            found += find_changeme(v, [*parts, k])
    elif isinstance(node, list):
        for i, v in enumerate(node):
            found += find_changeme(v, [*parts, i])
    elif isinstance(node, str) and CHANGEME in node.lower():
        found.append(parts)
    return found


def infer_mode(env: Mapping[str, Any]) -> Literal["single", "distributed"]:
    return "distributed" if any(env.get(k) for k in DISTRIBUTED_ENV_VARS) else "single"


def _changeme_step(
    doc: dict[str, Any], problems: Problems, preflight: list[str]
) -> set[tuple[str | int, ...]]:
    tagged = find_changeme(doc)
    for parts in tagged:
        value = dig(doc, *[str(p) for p in parts]) if all(isinstance(p, str) for p in parts) else "<changeme>"
        if any(isinstance(p, str) and is_secret_name(p) for p in parts):
            value = "***"  # a tagged secret is still never echoed
        where = jpath(parts)
        if parts == ["container", "image"]:
            preflight.append(
                f"{where}: still tagged <changeme> ({value!r}); set the image tag your cluster has "
                "(nothing is launched until it is replaced)"
            )
        elif parts[:2] == ["container", "env"]:
            problems.add(
                where,
                f"still tagged <changeme> ({value!r})",
                "replace the whole value with your cluster's setting (ibv_devices lists HCAs, "
                "ip -br link lists interfaces)",
            )
        elif parts == ["threshold_json"]:
            problems.add(
                where,
                f"still tagged <changeme> ({value!r})",
                "point it at the threshold file for your GPU (e.g. mi300x_* or mi325x_*) and drop the tag",
            )
        else:
            problems.add(where, f"still tagged <changeme> ({value!r})", "replace it with your value")
    return {tuple(p) for p in tagged}


def is_old_layout(raw: Mapping[str, Any]) -> bool:
    """A CVS config before the 2026 layout: `training{}` (+ `enabled_sweep_list`), no train_params."""
    training = raw.get("training")
    return "train_params" not in raw and (
        isinstance(training, dict) or "enabled_sweep_list" in raw or "framework" in raw
    )


def foreign_layout(raw: Mapping[str, Any], path: Path) -> str | None:
    """One line for a config of another upstream CVS suite (its training/jax layout: `config` +
    `model_params`), which no key-by-key list of errors would explain; None for anything else."""
    if "train_params" in raw or "model_params" not in raw or not isinstance(raw.get("config"), dict):
        return None
    return (
        f"{path}: this is upstream CVS's training/jax layout (config + model_params), not a jaxmaxtext "
        "config; start from a shipped one (`cvs-tui config list`, `cvs-tui config copy NAME`) and carry "
        "your values over"
    )


def _resolve_threshold_path(config_path: Path, given: str) -> Path:
    p = Path(os.path.expanduser(given))
    return p if p.is_absolute() else config_path.parent / p


def _is_file(p: Path) -> bool:
    """``Path.is_file`` that answers False for a name the OS refuses (too long, NUL byte) instead of raising
    (found by tests/cli/test_input_fuzz.py)."""
    try:
        return p.is_file()
    except (OSError, ValueError):
        return False


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no passwd entry and no USER/LOGNAME: a bare container
        return os.environ.get("USER") or "root"


def _fill_path_defaults(doc: dict[str, Any]) -> None:
    paths = doc.get("paths")
    if isinstance(paths, dict):
        for name, fld in Paths.model_fields.items():
            if name not in paths and fld.default is not None and isinstance(fld.default, str):
                paths[name] = fld.default


def _threshold_step(
    path: Path,
    doc: dict[str, Any],
    tagged: AbstractSet[tuple[str | int, ...]],
    runs: list[RunSpec],
    problems: Problems,
    warnings: list[str],
) -> tuple[Path, dict[str, dict[str, ThresholdSpec]]]:
    """The threshold file (``threshold_json``, else ``<config>_threshold.json`` beside the config) and its
    specs by sweep key, checked against the declared and the selected sweeps."""
    thresholds: dict[str, dict[str, ThresholdSpec]] = {}
    threshold_path = path.with_name(f"{path.stem}_threshold.json")
    given = doc.get("threshold_json", "")
    if isinstance(given, str) and ("threshold_json",) not in tagged:
        if given.strip():
            threshold_path = _resolve_threshold_path(path, given.strip())
        if not _is_file(threshold_path):
            shown = given.strip() or "(empty: the default)"
            problems.add(
                "threshold_json",
                f"threshold file {str(threshold_path)!r} not found "
                f"(threshold_json {shown!r} in {str(path)!r})",
                "set threshold_json to an existing file; relative paths resolve next to the config",
            )
        else:
            tp = Problems(prefix=f"{threshold_path.name}: ")
            data = read_json_object(threshold_path, "threshold file", problems)
            if data is not None:
                thresholds = parse_thresholds(data, tp, warnings)
            problems.extend(tp)
            if data is not None and isinstance(doc.get("sweeps", {}), dict):
                declared = list(doc.get("sweeps") or {}) or ["default"]
                enforce = doc.get("enforce_thresholds", True) is not False
                check_coverage(
                    thresholds,
                    declared=declared,
                    selected=[r.key for r in runs],
                    enforce=enforce,
                    threshold_name=threshold_path.name,
                    problems=problems,
                    warnings=warnings,
                )
                check_gated(
                    data,
                    selected=[r.key for r in runs],
                    enforce=enforce,
                    threshold_name=threshold_path.name,
                    problems=problems,
                    warnings=warnings,
                )
    return threshold_path, thresholds


def load_config(path: str | os.PathLike[str], *, user: str | None = None) -> LoadedConfig:
    """Load, resolve and validate a config; raises UserError listing every problem."""
    path = Path(path)
    problems = Problems()
    raw = read_json_object(path, "config file", problems)
    problems.raise_if_any()
    assert raw is not None
    if is_old_layout(raw):
        raise UserError(
            f"{path}: this is the pre-2026 CVS layout (a training block with sweeps[] and "
            f"enabled_sweep_list); convert it with `cvs-tui config migrate {path} NEW.json` and use NEW.json"
        )
    if (foreign := foreign_layout(raw, path)) is not None:
        raise UserError(foreign)

    doc = drop_comments(raw, [], problems)
    preflight: list[str] = []
    warnings: list[str] = []
    tagged = _changeme_step(doc, problems, preflight)

    # Documented paths defaults are filled before resolution so that they resolve like written values.
    _fill_path_defaults(doc)

    doc = resolve_placeholders(doc, user=user or _user(), problems=problems)

    config: CvsConfig | None = None
    try:
        config = CvsConfig.model_validate(doc)
    except ValidationError as exc:
        add_validation_errors(problems, exc, CvsConfig)

    semantic_checks(doc, problems, warnings, literal_secrets(raw))
    runs = build_runs(doc, problems, warnings)
    maxtext_keys_note = check_config_keys(doc, problems, warnings)

    checkpoint_sweep_selected(doc, runs, problems)

    threshold_path, thresholds = _threshold_step(path, doc, tagged, runs, problems, warnings)

    if problems.lines:
        # everything to fix in one pass: the launch-blocking tags (the image) too, not in a second wave
        raise UserError(problems.lines + [f"{problems.prefix}{line}" for line in preflight])
    assert config is not None

    label = config.train_params.model_id or str(config.train_params.maxtext_config.get("model_name"))
    return LoadedConfig(
        path=path,
        config=config,
        raw=copy.deepcopy(raw),
        threshold_path=threshold_path,
        thresholds=thresholds,
        mode=infer_mode(config.container.env),
        warnings=warnings,
        preflight_errors=preflight,
        runs=runs,
        model_label=label,
        error_patterns=effective_error_patterns(config.error_patterns, config.error_patterns_builtin),
        maxtext_keys_note=maxtext_keys_note,
    )
