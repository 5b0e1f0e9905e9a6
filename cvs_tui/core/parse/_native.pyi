"""The C byte scanner (``_native.c``). ``_pyscan`` is its pure-Python twin with the same functions."""

from collections.abc import Callable, Collection, Sequence

from cvs_tui.core.events import StepEvent, StepKind

def find_headers(norm: bytes, pos: int) -> list[int]: ...
def record_lines(orig: bytes, starts: list[int], line0: int) -> list[int]: ...
def configure(
    step_cls: type[StepEvent],
    train_kind: StepKind,
    rampup_kind: StepKind,
    src_fn: Callable[[bytes], str],
    header_info_fn: Callable[[bytes], tuple[str | None, str | None, float | None]],
    /,
) -> None: ...
def scan_steps(
    buf: bytes, starts: list[int], lines: list[int], end: int, early: int, skip: Collection[int], /
) -> tuple[list[StepEvent], list[int], list[int], list[int]]: ...
def fatal_records(buf: bytes, starts: list[int], end: int, skip: Collection[int], /) -> set[int]: ...

class LiteralScanner:
    def __init__(self, literals: Sequence[bytes]) -> None: ...
    @property
    def literals(self) -> list[bytes]: ...
    def find(self, text: bytes, starts: list[int], end: int, /) -> dict[int, set[int]]: ...

def clock_lines(
    data: bytes, end: int, line0: int, state: tuple[int, int, float], /
) -> tuple[bytes, bytes, int, tuple[int, int, float]]: ...
