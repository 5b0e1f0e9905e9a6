"""Placeholder resolution: `{user-id}`, `{shared_fs}`/`{paths.X}` (from the `paths` block) and `{env.NAME}`.

`paths` values may reference each other; they are resolved depth-first (the same answer as substituting
to a fixed point) so that a cycle is reported with the chain that forms it. Every other string value in
the config is then substituted once with the resolved paths. An unknown placeholder is an error, never
left verbatim, so a typo like `{paths.model_dir}` cannot reach a node as a literal directory name.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from cvs_tui.core.config.problems import Problems, jpath

PLACEHOLDER_RE = re.compile(r"\{([A-Za-z0-9_.\-]+)\}")
USER_ID = "user-id"
# `{run_dir}` is the run folder; it exists only once a run starts, so the plan fills it in, not the loader.
RUN_DIR = "run_dir"

# Subtrees whose strings are not substituted: error_patterns hold regexes (`\d{3}` is not a placeholder).
SKIP_TOP_LEVEL = frozenset({"error_patterns"})


MAXTEXT_PYTHON_VAR = "CVS_TUI_MAXTEXT_PYTHON"


def project_maxtext_python() -> Path:
    """The MaxText environment the setup scripts make next to the package (a checkout: `.venv-maxtext`)."""
    return Path(__file__).resolve().parents[3] / ".venv-maxtext" / "bin" / "python"


def env_default(var: str) -> str | None:
    """What an unset ``{env.VAR}`` means without an export: only ``CVS_TUI_MAXTEXT_PYTHON``, as the
    project's own MaxText environment when that exists (so the shipped local configs work after the
    demo); anything else stays an error."""
    if var == MAXTEXT_PYTHON_VAR and (python := project_maxtext_python()).is_file():
        return str(python)
    return None


class _Resolver:
    def __init__(self, paths: Mapping[str, Any], user: str, env: Mapping[str, str], problems: Problems):
        self.raw_paths = {k: v for k, v in paths.items() if isinstance(v, str)}
        self.paths_ok = True  # False when the config's paths block is not an object
        self.user = user
        self.env = env
        self.problems = problems
        self.resolved: dict[str, str] = {}
        self.failed: set[str] = set()

    def known_names(self) -> list[str]:
        names = [f"{{{USER_ID}}}"]
        names += [f"{{{k}}}" for k in self.raw_paths] + [f"{{paths.{k}}}" for k in self.raw_paths]
        return names

    def path_value(self, key: str, stack: list[str], where: str) -> str | None:
        if key in self.resolved:
            return self.resolved[key]
        if key in self.failed:
            return None
        if key in stack:
            chain = " -> ".join(f"{{paths.{k}}}" for k in [*stack[stack.index(key) :], key])
            self.problems.add(
                jpath(["paths", stack[-1]]),
                f"placeholder cycle {{paths.{key}}} ({chain})",
                "make one of these paths a literal value",
            )
            self.failed.update(stack[stack.index(key) :])
            return None
        value = self.substitute(self.raw_paths[key], [*stack, key], jpath(["paths", key]))
        if value is None:
            self.failed.add(key)
            return None
        self.resolved[key] = value
        return value

    def substitute(self, text: str, stack: list[str], where: str) -> str | None:
        """Substitute every placeholder in ``text``; None (problem recorded) when one cannot resolve."""
        ok = True

        def repl(m: re.Match[str]) -> str:
            nonlocal ok
            name = m.group(1)
            if name == USER_ID:
                return self.user
            if name == RUN_DIR:
                return m.group(0)
            if name.startswith("env."):
                var = name[4:]
                if var in self.env:
                    return self.env[var]
                if (default := env_default(var)) is not None:
                    return default
                ok = False
                self.problems.add(
                    where,
                    f"placeholder {{env.{var}}} names an unset environment variable",
                    f"export {var} before running cvs-tui, or write the value literally",
                )
                return m.group(0)
            key = name[6:] if name.startswith("paths.") else name
            if key in self.raw_paths:
                value = self.path_value(key, stack, where)
                if value is None:
                    ok = False
                    return m.group(0)
                return value
            ok = False
            if not self.paths_ok:  # `paths` itself is broken (reported by the schema): no second line
                return m.group(0)
            close = difflib.get_close_matches(m.group(0), self.known_names(), n=1, cutoff=0.6)
            hint = f" (did you mean {close[0]}?)" if close else ""
            self.problems.add(
                where,
                f"unknown placeholder {m.group(0)}{hint}",
                "use {user-id}, {run_dir}, {env.NAME}, {paths.X} or {X} where X is a key of the paths block",
            )
            return m.group(0)

        out = PLACEHOLDER_RE.sub(repl, text)
        return out if ok else None


def resolve_placeholders(
    doc: dict[str, Any],
    *,
    user: str,
    problems: Problems,
    env: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Return a copy of ``doc`` with every placeholder substituted; problems are recorded, not raised."""
    env = os.environ if env is None else env
    paths = doc.get("paths")
    resolver = _Resolver(paths if isinstance(paths, dict) else {}, user, env, problems)
    resolver.paths_ok = isinstance(paths, dict)

    def walk(node: Any, parts: list[str | int]) -> Any:
        if isinstance(node, dict):
            out: dict[str, Any] = {}
            for k, v in node.items():
                if not parts and k in SKIP_TOP_LEVEL:
                    out[k] = v
                    continue
                out[k] = walk(v, [*parts, k])
            return out
        if isinstance(node, list):
            return [walk(v, [*parts, i]) for i, v in enumerate(node)]
        if isinstance(node, str) and "{" in node:
            if len(parts) == 2 and parts[0] == "paths" and isinstance(parts[1], str):
                value = resolver.path_value(parts[1], [], jpath(parts))
            else:
                value = resolver.substitute(node, [], jpath(parts))
            return node if value is None else value
        return node

    return walk(doc, [])


def substitute_user(text: str, user: str) -> str:
    """Substitute `{user-id}` only (the cluster file knows no paths)."""
    return text.replace("{" + USER_ID + "}", user)


def walk_strings(node: Any, fn: Callable[[str, list[str | int]], None], parts: list[str | int]) -> None:
    """Call ``fn(value, json_path_parts)`` for every string value under ``node``."""
    if isinstance(node, dict):
        for k, v in node.items():
            walk_strings(v, fn, [*parts, k])
    elif isinstance(node, list):
        for i, v in enumerate(node):
            walk_strings(v, fn, [*parts, i])
    elif isinstance(node, str):
        fn(node, parts)
