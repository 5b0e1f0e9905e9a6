"""Collecting config problems so that every one is reported at once, one line each.

Each line reads `<json.path>: <problem>; <fix>`. JSON paths use dots for plain keys and `["..."]` for keys
that are not identifiers (sweep keys such as `BS=3,PRECISION=BF16,SL=8192`), `[i]` for list items.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Sequence
from typing import Any

from pydantic import BaseModel, ValidationError

from cvs_tui.core.errors import UserError

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_\-]*$")


def jpath(parts: Sequence[str | int]) -> str:
    """Format a JSON path: `train_params.maxtext_config.steps`, `sweeps["BS=3,SL=8"]`, `runs[1]`."""
    out = ""
    for p in parts:
        if isinstance(p, int):
            out += f"[{p}]"
        elif _IDENT.match(p):
            out += f".{p}" if out else p
        else:
            out += '["' + p.replace("\\", "\\\\").replace('"', '\\"') + '"]'
    return out or "(root)"


def did_you_mean(word: str, choices: Iterable[str], cutoff: float = 0.6) -> str:
    """` (did you mean 'x'?)` or ``""``."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=cutoff)
    return f" (did you mean '{close[0]}'?)" if close else ""


class Problems:
    """An ordered, de-duplicated list of problem lines."""

    def __init__(self, prefix: str = "") -> None:
        self.prefix = prefix
        self.lines: list[str] = []

    def add(self, path: str, problem: str, fix: str) -> None:
        line = f"{self.prefix}{path}: {problem}; {fix}"
        if line not in self.lines:
            self.lines.append(line)

    def extend(self, other: Problems) -> None:
        for line in other.lines:
            if line not in self.lines:
                self.lines.append(line)

    def __bool__(self) -> bool:
        return bool(self.lines)

    def raise_if_any(self) -> None:
        if self.lines:
            raise UserError(self.lines)


def _unwrap_model(annotation: object) -> type[BaseModel] | None:
    """The pydantic model inside ``X``, ``X | None`` or ``dict[str, X]`` (values only: keys are data)."""
    from typing import get_args

    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in get_args(annotation):
        found = _unwrap_model(arg)
        if found is not None:
            return found
    return None


def _fields_at(model: type[BaseModel], loc: Sequence[str | int]) -> list[str]:
    """Field names of the model reached by following ``loc`` from ``model`` (for did-you-mean hints)."""
    from typing import get_origin

    current: type[BaseModel] | None = model
    i = 0
    while current is not None and i < len(loc):
        field = current.model_fields.get(str(loc[i]))
        if field is None:
            return []
        annotation = field.annotation
        i += 1
        if get_origin(annotation) is dict or "dict[" in str(annotation):
            i += 1  # skip the data key (e.g. a node name or cell key)
        current = _unwrap_model(annotation)
    return list(current.model_fields) if current is not None else []


_UNION_TAGS = frozenset({"str", "int", "float", "bool"})
_FIXES = {
    "missing": "add it",
    "extra_forbidden": "remove or rename it",
    "literal_error": "use one of the allowed values",
    "enum": "use one of the allowed values",
    "string_type": "write it as a JSON string (in quotes)",
    "bool_type": "use true or false",
    "int_type": "use a whole number",
    "int_parsing": "use a whole number",
}


def add_validation_errors(
    problems: Problems, exc: ValidationError, model: type[BaseModel], base: Sequence[str | int] = ()
) -> None:
    """Turn a pydantic ValidationError into problem lines (path, what is wrong, how to fix it)."""
    grouped: dict[tuple[str | int, ...], list[Any]] = {}
    for err in exc.errors(include_url=False):
        loc = [p for p in err["loc"] if not (isinstance(p, str) and p.startswith("function-"))]
        while loc and loc[-1] in _UNION_TAGS:  # `x.str`, `x.int`: members of one union, one problem
            loc = loc[:-1]
        grouped.setdefault(tuple(loc), []).append(err)
    for loc_t, errs in grouped.items():
        loc = list(loc_t)
        path = jpath([*base, *loc])
        if len(errs) > 1:
            problems.add(path, "has the wrong type", "use a string, a number or true/false")
            continue
        err = errs[0]
        etype = err["type"]
        msg = err["msg"]
        if msg.startswith("Value error, "):
            msg = msg[len("Value error, ") :]
        msg = re.sub(r"a valid dictionary( or instance of \w+)?", "an object ({...})", msg)
        if etype == "extra_forbidden":
            key = str(loc[-1]) if loc else ""
            hint = did_you_mean(key, _fields_at(model, loc[:-1]))
            problems.add(
                path, f"unknown key '{key}'{hint}", "remove or rename it (comment keys start with _)"
            )
            continue
        if etype == "missing":
            problems.add(path, "required key is missing", "add it")
            continue
        got = err.get("input")
        shown = "" if isinstance(got, dict | list) else f" (got {got!r})"
        problems.add(path, f"{msg[0].lower()}{msg[1:]}{shown}", _FIXES.get(etype, "fix the value"))
