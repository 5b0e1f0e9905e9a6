"""No function over 80 lines and no module over 450 lines without a one-line reason in its docstring.

The reason is a sentence that starts with "Long because" (``Long because each branch is one flag.``), in
the function's docstring or the module's. The limits are the ones the architecture notes give; a long
function or module without the sentence is split into named steps instead.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import cvs_tui

PACKAGE = Path(cvs_tui.__file__).resolve().parent
MAX_FUNCTION = 80
MAX_MODULE = 450
REASON = re.compile(r"(?:^|[.:;!?]\s+)Long because \S", re.MULTILINE)


def _has_reason(node: ast.AST) -> bool:
    assert isinstance(node, ast.Module | ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
    return REASON.search(ast.get_docstring(node) or "") is not None


def shape_problems(source: str, name: str) -> list[str]:
    """Each function over MAX_FUNCTION lines (``def`` line to last line) and the module itself when over
    MAX_MODULE lines, where the docstring gives no reason."""
    tree = ast.parse(source)
    out = []
    lines = len(source.splitlines())
    if lines > MAX_MODULE and not _has_reason(tree):
        out.append(f"{name}: module of {lines} lines (over {MAX_MODULE}) without a 'Long because' reason")
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.end_lineno is not None:
            length = node.end_lineno - node.lineno + 1
            if length > MAX_FUNCTION and not _has_reason(node):
                out.append(
                    f"{name}:{node.lineno} {node.name}: {length} lines (over {MAX_FUNCTION}) "
                    "without a 'Long because' reason"
                )
    return out


def test_every_long_function_and_module_says_why() -> None:
    problems = [
        p
        for path in sorted(PACKAGE.rglob("*.py"))
        for p in shape_problems(path.read_text(encoding="utf-8"), str(path.relative_to(PACKAGE.parent)))
    ]
    assert not problems, "split these into named steps, or say why in the docstring:\n" + "\n".join(problems)


def _function(lines: int, doc: str) -> str:
    body = "".join(f"    x{i} = {i}\n" for i in range(lines - 2))
    return f'def f() -> None:\n    """{doc}"""\n{body}'


def test_the_check_flags_a_long_function_or_module_without_a_reason() -> None:
    assert shape_problems(_function(MAX_FUNCTION, "Short enough."), "m.py") == []
    assert len(shape_problems(_function(MAX_FUNCTION + 1, "Does many things."), "m.py")) == 1
    assert shape_problems(_function(MAX_FUNCTION + 1, "Many things.\n\n    Long because x."), "m.py") == []
    assert shape_problems(_function(MAX_FUNCTION + 1, "Many things. Long because x."), "m.py") == []
    assert len(shape_problems(_function(MAX_FUNCTION + 1, "Not long because of x."), "m.py")) == 1
    padding = "y = 0\n" * MAX_MODULE
    assert len(shape_problems('"""A module."""\n' + padding, "m.py")) == 1
    assert shape_problems('"""A module. Long because it is one table."""\n' + padding, "m.py") == []
