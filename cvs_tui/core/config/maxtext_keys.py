"""`train_params.maxtext_config` keys checked against MaxText's own `base.yml` (F23).

A typo in the passthrough (``per_device_batch_sise``) would otherwise pass every local check and surface
only once MaxText starts on the cluster. Where a MaxText is installed next to the tool (the config's
``train_params.python`` when it is a local virtual environment, else the project's ``.venv-maxtext``),
its ``configs/base.yml`` lists every key MaxText knows. An unknown key is a config problem with a
did-you-mean when that MaxText is the trainer (``train_params.python`` is its interpreter), and a warning
with the same did-you-mean when the trainer runs on the nodes (their image may hold another version).
Without a local MaxText the check is skipped and the caller says so (never silently).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from cvs_tui.core.config.placeholders import project_maxtext_python
from cvs_tui.core.config.problems import Problems, did_you_mean, jpath

# keys MaxText reads that base.yml does not define: `base_config` names the YAML a config extends
NOT_IN_BASE_YML = frozenset({"base_config"})
_PACKAGE_DIRS = ("maxtext", "MaxText")
_PYTHON_NAME = re.compile(r"python(3(\.\d+)?)?")


def base_yml_for(python: str | Path) -> Path | None:
    """The ``configs/base.yml`` of the MaxText installed in the virtual environment of ``python``."""
    exe = Path(python)
    if not exe.is_absolute() or not exe.is_file():
        return None
    env = exe.parent.parent  # <venv>/bin/python; not resolved: a venv's python links to the system one
    for pkg in _PACKAGE_DIRS:
        for found in sorted(env.glob(f"lib/python3*/site-packages/{pkg}/configs/base.yml")):
            return found
    return None


def find_base_yml(python: str | None) -> Path | None:
    """base.yml of the config's interpreter when that is a local MaxText environment. An interpreter named
    for the nodes (``python3`` in a container) falls back to the project's MaxText; a local interpreter
    without MaxText (a stand-in trainer, another framework's environment) is not checked at all."""
    if python and Path(python).is_absolute() and Path(python).is_file():
        return base_yml_for(python)
    if python and not _PYTHON_NAME.fullmatch(Path(python).name):
        return None  # the trainer is not run by a Python (a shell stand-in): nothing of MaxText to check
    fallback = project_maxtext_python()
    return base_yml_for(fallback) if fallback else None


@functools.lru_cache(maxsize=4)
def _keys(path: Path, mtime_ns: int) -> frozenset[str]:
    del mtime_ns  # part of the cache key only: an upgraded MaxText is read again
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    doc = yaml.load(path.read_text(encoding="utf-8"), Loader=loader)
    return frozenset(str(k) for k in doc) if isinstance(doc, dict) else frozenset()


def base_yml_keys(path: Path) -> frozenset[str]:
    return _keys(path, path.stat().st_mtime_ns)


def check_maxtext_keys(
    maxtext_config: Mapping[str, Any], known: Iterable[str], base_yml: Path, problems: Problems
) -> None:
    """One problem per key of ``maxtext_config`` that MaxText's ``base.yml`` does not define."""
    names = frozenset(known) | NOT_IN_BASE_YML
    for key in maxtext_config:
        if key in names:
            continue
        problems.add(
            jpath(["train_params", "maxtext_config", key]),
            f"not a MaxText setting (not in {base_yml}){did_you_mean(key, names)}",
            "fix the name, or remove it",
        )


def check_config_keys(doc: Mapping[str, Any], problems: Problems, warnings: list[str]) -> str:
    """Checks the resolved config's ``maxtext_config`` keys (sweep overrides must be among them, which
    the sweep check enforces); returns a one-line note saying what it was checked against, or why not."""
    tp = doc.get("train_params")
    mc = tp.get("maxtext_config") if isinstance(tp, dict) else None
    if not isinstance(mc, dict):
        return ""
    python = tp.get("python") if isinstance(tp, dict) else None
    base_yml = find_base_yml(python if isinstance(python, str) else None)
    if base_yml is None:
        return (
            "maxtext_config keys not checked: no local MaxText (train_params.python is not a local "
            "MaxText environment and .venv-maxtext is absent; `bash scripts/setup-maxtext.sh` makes one)"
        )
    try:
        known = base_yml_keys(base_yml)
    except (OSError, yaml.YAMLError) as exc:
        return f"maxtext_config keys not checked: {base_yml} unreadable ({exc})"
    if not known:
        return f"maxtext_config keys not checked: {base_yml} defines no keys"
    if _is_local_trainer(python):
        check_maxtext_keys(mc, known, base_yml, problems)
        return f"maxtext_config keys checked against {base_yml}"
    # the trainer runs on the nodes (in their image): the MaxText next to the tool may be another
    # version, so an unknown key is said loudly (with did-you-mean) but does not stop the run
    local = Problems()
    check_maxtext_keys(mc, known, base_yml, local)
    warnings.extend(f"{line} (checked against the MaxText next to cvs-tui)" for line in local.lines)
    return (
        f"maxtext_config keys checked against {base_yml} "
        "(unknown keys are warnings: the nodes' MaxText may differ)"
    )


def _is_local_trainer(python: object) -> bool:
    return isinstance(python, str) and Path(python).is_absolute() and Path(python).is_file()
