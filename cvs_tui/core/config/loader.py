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
import re
from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import ValidationError

from cvs_tui.core.config.blocks import ThresholdSpec
from cvs_tui.core.config.host_config import parse_runtime_args
from cvs_tui.core.config.maxtext_keys import check_config_keys
from cvs_tui.core.config.model import CvsConfig, Paths, RunSpec, is_secret_name
from cvs_tui.core.config.placeholders import resolve_placeholders
from cvs_tui.core.config.problems import Problems, add_validation_errors, did_you_mean, jpath
from cvs_tui.core.config.sweeps import build_runs
from cvs_tui.core.config.thresholds import check_coverage, check_gated, parse_thresholds, read_json_object
from cvs_tui.core.errors import UserError
from cvs_tui.core.parse.signatures import DEFAULT_ERROR_PATTERNS

__all__ = ["DISTRIBUTED_ENV_VARS", "LoadedConfig", "RunSpec", "find_changeme", "load_config"]

CHANGEME = "<changeme>"
# Their presence in container.env marks a config as distributed (RDMA/NIC device selection).
DISTRIBUTED_ENV_VARS = ("NCCL_IB_HCA", "NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "NCCL_IB_GID_INDEX")
# Set per node by the launcher: a config value is overridden (upstream ships NODE_RANK "0" in its
# single-node configs and its launcher overrides it too), so they only get a warning.
PER_NODE_ENV_VARS = ("JAX_COORDINATOR_IP", "NNODES", "NODE_RANK", "JAX_PROCESS_INDEX")
# Set by the launcher from other config fields: a value here would be overridden.
LAUNCHER_SET_ENV_VARS = {"HF_HOME": "paths.models_dir"}
LAUNCHER_ENV_VARS = (*PER_NODE_ENV_VARS, "XLA_FLAGS")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
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


def _get(doc: Any, *keys: str) -> Any:
    for k in keys:
        if not isinstance(doc, dict):
            return None
        doc = doc.get(k)
    return doc


def infer_mode(env: Mapping[str, Any]) -> Literal["single", "distributed"]:
    return "distributed" if any(env.get(k) for k in DISTRIBUTED_ENV_VARS) else "single"


def _changeme_step(
    doc: dict[str, Any], problems: Problems, preflight: list[str]
) -> set[tuple[str | int, ...]]:
    tagged = find_changeme(doc)
    for parts in tagged:
        value = (
            _get(doc, *[str(p) for p in parts]) if all(isinstance(p, str) for p in parts) else "<changeme>"
        )
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


def _literal_secrets(raw: Any) -> set[str]:
    """Secret-named container.env entries whose value is written in the file itself (not an
    ``{env.X}`` placeholder taken from the controller's environment, not a <changeme> reported already)."""
    env = _get(raw, "container", "env")
    if not isinstance(env, dict):
        return set()
    return {
        n
        for n, v in env.items()
        if isinstance(n, str)
        and is_secret_name(n)
        and isinstance(v, str)
        and v
        and "{env." not in v
        and "<changeme>" not in v
    }


def _semantic_checks(
    doc: dict[str, Any],
    problems: Problems,
    warnings: list[str],
    literal_secrets: AbstractSet[str] = frozenset(),
) -> None:
    """Cross-field rules on the (cleaned, resolved) document; every type is guarded."""
    env = _get(doc, "container", "env")
    if isinstance(env, dict):
        for name in env:
            if not _ENV_NAME.match(name):
                problems.add(
                    jpath(["container", "env", name]), "not a valid environment variable name", "rename it"
                )
            elif name in PER_NODE_ENV_VARS:
                warnings.append(
                    f"{jpath(['container', 'env', name])}: ignored, cvs-tui sets {name} per node "
                    "(see `cvs-tui plan`); remove it"
                )
            elif name in LAUNCHER_SET_ENV_VARS:
                warnings.append(
                    f"{jpath(['container', 'env', name])}: ignored, the launcher sets {name} from "
                    f"{LAUNCHER_SET_ENV_VARS[name]}; remove it"
                )
            elif name == "XLA_FLAGS":
                problems.add(
                    jpath(["container", "env", name]),
                    "XLA_FLAGS is built from train_params.xla_flags",
                    "move the flags to train_params.xla_flags",
                )
            elif name == "HF_TOKEN":
                problems.add(
                    jpath(["container", "env", name]),
                    "a token does not belong in the config file",
                    "put it in the file named by paths.hf_token_file",
                )
            elif name in literal_secrets:
                # a secret written into the config file travels with every copy of it (audit #11); from
                # the environment it reaches only the owner-only launcher and is masked in all output
                problems.add(
                    jpath(["container", "env", name]),
                    "a secret value does not belong in the config file",
                    f'take it from the environment ("{name}": "{{env.{name}}}"); for the Hugging Face '
                    "token use paths.hf_token_file",
                )
        port = env.get("JAX_COORDINATOR_PORT")
        if isinstance(port, str) and not (port.isdigit() and 0 < int(port) < 65536):
            problems.add(
                jpath(["container", "env", "JAX_COORDINATOR_PORT"]),
                f"not a TCP port: {port!r}",
                "use 1-65535",
            )
    runtime = _get(doc, "container", "runtime", "name")
    args = _get(doc, "container", "runtime", "args")
    if runtime in (None, "docker") and isinstance(args, dict):
        try:
            parse_runtime_args(args)
        except UserError as exc:  # one line per bad key, already `<path>: <problem>; <fix>`
            for line in exc.problems:
                if line not in problems.lines:
                    problems.lines.append(line)
    image = _get(doc, "container", "image")
    if runtime != "host" and isinstance(_get(doc, "container"), dict) and not image:
        problems.add(
            "container.image", "required for the docker runtime", "set the image present on every node"
        )

    flags = _get(doc, "train_params", "xla_flags")
    if isinstance(flags, dict):
        for name, value in flags.items():
            where = jpath(["train_params", "xla_flags", name])
            if name.startswith("-"):
                problems.add(
                    where, "flag names are written without leading dashes", f"use '{name.lstrip('-')}'"
                )
            elif not re.match(r"^[A-Za-z0-9_]+$", name):
                problems.add(where, "not an XLA flag name", "use the flag name, e.g. xla_gpu_autotune_level")
            if isinstance(value, str) and re.search(r"\s", value):
                problems.add(where, "value contains whitespace (XLA_FLAGS is space-separated)", "remove it")

    patterns = doc.get("error_patterns")
    if isinstance(patterns, dict):
        if not patterns and doc.get("error_patterns_builtin") is False:
            warnings.append(
                "error_patterns: empty with error_patterns_builtin false, so no error pattern is scanned; "
                "remove both for the built-in set"
            )
        for name, pattern in patterns.items():
            if isinstance(pattern, str):
                try:
                    re.compile(pattern)
                except re.error as exc:
                    problems.add(jpath(["error_patterns", name]), f"invalid regex: {exc}", "fix the pattern")

    mc = _get(doc, "train_params", "maxtext_config")
    if isinstance(mc, dict) and isinstance(_get(doc, "train_params"), dict):
        label = _get(doc, "train_params", "model_id") or mc.get("model_name")
        if not label:
            problems.add(
                "train_params.maxtext_config.model_name",
                "required key is missing",
                "set the MaxText model preset (or train_params.model_id for the label)",
            )

    ckpt = doc.get("checkpoint_resume")
    if isinstance(ckpt, dict) and ckpt.get("enabled") is True:
        before, period = ckpt.get("steps_before_ckpt", 6), ckpt.get("checkpoint_period", 5)
        if isinstance(before, int) and isinstance(period, int) and period > before:
            problems.add(
                "checkpoint_resume.checkpoint_period",
                f"{period} > steps_before_ckpt {before}, so phase 1 saves no checkpoint",
                "make checkpoint_period <= steps_before_ckpt",
            )
        sweep = ckpt.get("sweep", "")
        sweeps = doc.get("sweeps") or {}
        if isinstance(sweep, str) and sweep and isinstance(sweeps, dict) and sweep not in sweeps:
            problems.add(
                "checkpoint_resume.sweep",
                f"unknown sweep key '{sweep}'{did_you_mean(sweep, sweeps, cutoff=0.5)}",
                'use a key of the sweeps block, or "" for the first selected run',
            )


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no passwd entry and no USER/LOGNAME: a bare container
        return os.environ.get("USER") or "root"


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
    paths = doc.get("paths")
    if isinstance(paths, dict):
        for name, fld in Paths.model_fields.items():
            if name not in paths and fld.default is not None and isinstance(fld.default, str):
                paths[name] = fld.default

    doc = resolve_placeholders(doc, user=user or _user(), problems=problems)

    config: CvsConfig | None = None
    try:
        config = CvsConfig.model_validate(doc)
    except ValidationError as exc:
        add_validation_errors(problems, exc, CvsConfig)

    _semantic_checks(doc, problems, warnings, _literal_secrets(raw))
    runs = build_runs(doc, problems, warnings)
    maxtext_keys_note = check_config_keys(doc, problems, warnings)

    ckpt = doc.get("checkpoint_resume")
    if isinstance(ckpt, dict) and ckpt.get("enabled") is True:
        wanted = ckpt.get("sweep", "")
        sweeps = doc.get("sweeps") or {}
        selected = [r.key for r in runs]
        if (
            isinstance(wanted, str)
            and isinstance(sweeps, dict)
            and wanted in sweeps
            and wanted not in selected
        ):
            problems.add(
                "checkpoint_resume.sweep",
                f"sweep '{wanted}' is not among the selected runs",
                'add it to runs, or use "" for the first selected run',
            )

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
