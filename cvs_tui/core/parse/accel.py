"""The parser's optional C scanner (``_native``, built from ``_native.c`` by ``pip install``).

It answers exactly what the pure-Python code answers (the test-suite compares the two on real and fuzzed
logs), several times faster. Without a C compiler the module is missing and the Python path runs;
``CVS_TUI_PURE_PARSER=1`` selects the Python path on purpose (for comparisons, or to rule the scanner out).
"""

from __future__ import annotations

import os
from types import ModuleType

from cvs_tui.core.events import StepEvent, StepKind
from cvs_tui.core.parse import dialects as d

_why_not = "C scanner not built"
_built: ModuleType | None
try:
    # the plain-import form: mypy does not resolve the stub through "from cvs_tui.core.parse import"
    # here, inside the package __init__ import cycle
    import cvs_tui.core.parse._native as _built
except ImportError:  # not compiled: the pure-Python path
    _built = None

if _built is not None:
    # StepEvents are built in C by filling their slots; configure checks the class still allows that
    try:
        _built.configure(StepEvent, StepKind.TRAIN, StepKind.RAMPUP, d._src, d.header_info)
    except TypeError as exc:  # a StepEvent the C code does not know: stay correct, run Python
        _built, _why_not = None, f"C scanner out of date with StepEvent: {exc}"

PURE_ENV = "CVS_TUI_PURE_PARSER"


def built() -> bool:
    """Whether the C scanner is compiled and importable."""
    return _built is not None


def select(native: bool | None) -> ModuleType | None:
    """The scanner module to use: ``True`` requires it, ``False`` refuses it, ``None`` takes it when built
    and not turned off by ``CVS_TUI_PURE_PARSER=1``."""
    if native is False or (native is None and os.environ.get(PURE_ENV) == "1"):
        return None
    if _built is None:
        if native:
            raise RuntimeError(f"the parser's C scanner is unavailable: {_why_not}")
        return None
    return _built


def describe() -> str:
    """One line for benchmarks and version output."""
    if _built is None:
        return f"pure Python ({_why_not})"
    if os.environ.get(PURE_ENV) == "1":
        return f"pure Python ({PURE_ENV}=1)"
    return "C scanner"
