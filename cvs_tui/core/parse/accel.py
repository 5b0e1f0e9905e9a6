"""Which byte scanner the parser runs: the C module ``_native`` (built from ``_native.c`` by ``pip install``)
or its pure-Python twin ``_pyscan``. Both have the same functions (``_native.pyi``) and give the same
answers (the test-suite compares them on real and fuzzed logs); the C one is several times faster.

``scanner`` is chosen by one import. Without a C compiler ``_native`` is missing and ``_pyscan`` runs;
``CVS_TUI_PURE_PARSER=1`` selects ``_pyscan`` on purpose (for comparisons, or to rule the C code out).
``describe()`` says which one runs and why (``cvs-tui --version``, the benchmark).
"""

from __future__ import annotations

import os
from types import ModuleType

from cvs_tui.core.events import StepEvent, StepKind
from cvs_tui.core.parse import _pyscan
from cvs_tui.core.parse import dialects as d

_why_not = ""
scanner: ModuleType
try:
    from cvs_tui.core.parse import _native as scanner
except ImportError:  # not compiled: the pure-Python twin
    scanner, _why_not = _pyscan, "C scanner not built"

_pyscan.configure(StepEvent, StepKind.TRAIN, StepKind.RAMPUP, d.source_of, d.header_info)
if scanner is not _pyscan:
    # StepEvents are built in C by filling their slots; configure checks the class still allows that
    try:
        scanner.configure(StepEvent, StepKind.TRAIN, StepKind.RAMPUP, d.source_of, d.header_info)
    except TypeError as exc:  # a StepEvent the C code does not know: stay correct, run Python
        scanner, _why_not = _pyscan, f"C scanner out of date with StepEvent: {exc}"

PURE_ENV = "CVS_TUI_PURE_PARSER"


def built() -> bool:
    """Whether the C scanner is compiled and usable."""
    return scanner is not _pyscan


def select(native: bool | None) -> ModuleType:
    """The scanner module to use: ``True`` requires the C one, ``False`` refuses it, ``None`` takes it when
    built and not turned off by ``CVS_TUI_PURE_PARSER=1``."""
    if native is False or (native is None and os.environ.get(PURE_ENV) == "1"):
        return _pyscan
    if native and scanner is _pyscan:
        raise RuntimeError(f"the parser's C scanner is unavailable: {_why_not}")
    return scanner


def is_native(mod: ModuleType) -> bool:
    return mod is not _pyscan


def describe() -> str:
    """One line for benchmarks and version output."""
    if scanner is _pyscan:
        return f"pure Python ({_why_not})"
    if os.environ.get(PURE_ENV) == "1":
        return f"pure Python ({PURE_ENV}=1)"
    return "C scanner"
