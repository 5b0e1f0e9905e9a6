"""The config's cross-field rules: what the schema alone cannot say (container env names, the runtime's
args and image, XLA flag names, error-pattern regexes, the model name, the checkpoint-resume block), run
on the cleaned and resolved document with every type guarded, each problem recorded, never raised."""

from __future__ import annotations

import re
from collections.abc import Set as AbstractSet
from typing import Any

from cvs_tui.core.config.host_config import parse_runtime_args
from cvs_tui.core.config.model import RunSpec, is_secret_name
from cvs_tui.core.config.problems import Problems, did_you_mean, jpath
from cvs_tui.core.errors import UserError

# Set per node by the launcher: a config value is overridden (upstream ships NODE_RANK "0" in its
# single-node configs and its launcher overrides it too), so they only get a warning.
PER_NODE_ENV_VARS = ("JAX_COORDINATOR_IP", "NNODES", "NODE_RANK", "JAX_PROCESS_INDEX")
# Set by the launcher from other config fields: a value here would be overridden.
LAUNCHER_SET_ENV_VARS = {"HF_HOME": "paths.models_dir"}
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def dig(doc: Any, *keys: str) -> Any:
    """``doc[k1][k2]...``, None where a level is missing or not an object."""
    for k in keys:
        if not isinstance(doc, dict):
            return None
        doc = doc.get(k)
    return doc


def literal_secrets(raw: Any) -> set[str]:
    """Secret-named container.env entries whose value is written in the file itself (not an
    ``{env.X}`` placeholder taken from the controller's environment, not a <changeme> reported already)."""
    env = dig(raw, "container", "env")
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


def semantic_checks(
    doc: dict[str, Any],
    problems: Problems,
    warnings: list[str],
    written_secrets: AbstractSet[str] = frozenset(),
) -> None:
    """Cross-field rules on the (cleaned, resolved) document; every type is guarded."""
    _container_env(doc, problems, warnings, written_secrets)
    _container_runtime(doc, problems)
    _xla_flags(doc, problems)
    _error_patterns(doc, problems, warnings)
    _model_name(doc, problems)
    _checkpoint_resume(doc, problems)


def _container_env(
    doc: dict[str, Any], problems: Problems, warnings: list[str], written_secrets: AbstractSet[str]
) -> None:
    """container.env: names, the variables cvs-tui or the launcher sets, secrets, the coordinator port."""
    env = dig(doc, "container", "env")
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
            elif name in written_secrets:
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


def _container_runtime(doc: dict[str, Any], problems: Problems) -> None:
    """container.runtime.args (Docker's) and the image a Docker runtime needs."""
    runtime = dig(doc, "container", "runtime", "name")
    args = dig(doc, "container", "runtime", "args")
    if runtime in (None, "docker") and isinstance(args, dict):
        try:
            parse_runtime_args(args)
        except UserError as exc:  # one line per bad key, already `<path>: <problem>; <fix>`
            for line in exc.problems:
                if line not in problems.lines:
                    problems.lines.append(line)
    image = dig(doc, "container", "image")
    if runtime != "host" and isinstance(dig(doc, "container"), dict) and not image:
        problems.add(
            "container.image", "required for the docker runtime", "set the image present on every node"
        )


def _xla_flags(doc: dict[str, Any], problems: Problems) -> None:
    flags = dig(doc, "train_params", "xla_flags")
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


def _error_patterns(doc: dict[str, Any], problems: Problems, warnings: list[str]) -> None:
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


def _model_name(doc: dict[str, Any], problems: Problems) -> None:
    mc = dig(doc, "train_params", "maxtext_config")
    if isinstance(mc, dict) and isinstance(dig(doc, "train_params"), dict):
        label = dig(doc, "train_params", "model_id") or mc.get("model_name")
        if not label:
            problems.add(
                "train_params.maxtext_config.model_name",
                "required key is missing",
                "set the MaxText model preset (or train_params.model_id for the label)",
            )


def _checkpoint_resume(doc: dict[str, Any], problems: Problems) -> None:
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


def checkpoint_sweep_selected(doc: dict[str, Any], runs: list[RunSpec], problems: Problems) -> None:
    """checkpoint_resume.sweep, once the runs are selected: a declared sweep that is not among them."""
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


__all__ = [
    "LAUNCHER_SET_ENV_VARS",
    "PER_NODE_ENV_VARS",
    "checkpoint_sweep_selected",
    "dig",
    "literal_secrets",
    "semantic_checks",
]
