"""The exception a Python traceback ends in: what a traceback hit names and the line it stands on.

A traceback's header (`Traceback (most recent call last):`) says only that the program died; the root
cause is the exception line after the frames (`jaxlib.xla_extension.XlaRuntimeError: DEADLINE_EXCEEDED:
Barrier timed out. ...`, `RuntimeError: Bad StatusOr access: FAILED_PRECONDITION: ...`). A traceback hit
stands on that line, so a report's context around it shows the last frames, and carries the line with
the last frame's place as its text."""

from __future__ import annotations

import re

# the signature (signatures.ALWAYS_ON_PATTERNS) whose hits are tracebacks
TRACEBACK = "python traceback"
_HEADER = b"Traceback (most recent call last):"
_FRAME = re.compile(rb'File "([^"]*)", line (\d+), in (\S+)')
# in a one-line record (a flattened log) the exception is the first `Name(Error|...)...: ` after the frames
_EXCEPTION = re.compile(
    rb"(?<![\w.])(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt|Failure|Warning)(?::|\s*$)"
)


def frame_place(frame: bytes) -> str:
    """`File ".../utils.py", line 179, in _fn` -> `utils.py:179 in _fn`."""
    m = _FRAME.search(frame)
    if m is None:
        return ""
    name = m.group(1).rsplit(b"/", 1)[-1]
    return f"{name.decode('utf-8', 'replace')}:{int(m.group(2))} in {m.group(3).decode('utf-8', 'replace')}"


def _text(line: bytes, frame: bytes | None) -> str:
    exc = " ".join(line.decode("utf-8", "replace").split())
    place = frame_place(frame) if frame else ""
    return f"{exc} (last frame: {place})" if place else exc


def exception_line(orig: bytes, segs: list[tuple[int, int]], head: int) -> tuple[int, str] | None:
    """(segment, text) of the exception line of the traceback whose header is on segment ``head`` of a
    record's physical lines, None when the record ends before one. Frames and code are indented; the
    exception line is the first line after the header that is not (a label such as srun's ` 0: ` before
    the header is taken off every line)."""
    a, b = segs[head]
    first = orig[a:b]
    k = first.find(_HEADER)
    prefix = first[:k] if k > 0 else b""
    frame: bytes | None = None
    for j in range(head + 1, len(segs)):
        a, b = segs[j]
        line = orig[a:b].rstrip(b"\r\n")
        if prefix and line.startswith(prefix):
            line = line[len(prefix) :]
        if not line.strip():
            continue
        if line[:1] in (b" ", b"\t"):
            stripped = line.strip()
            if stripped.startswith(b"File "):
                frame = stripped
            continue
        if line.startswith(_HEADER):
            return None
        return j, _text(line, frame)
    return None


def exception_in_line(rec: bytes) -> str | None:
    """The exception of a traceback held on one line (a flattened log): the text from the first exception
    name after the last frame, None when there is none."""
    start = rec.find(_HEADER)
    if start < 0:
        return None
    frame: bytes | None = None
    pos = start + len(_HEADER)
    for m in _FRAME.finditer(rec, pos):
        frame, pos = m.group(0), m.end()
    exc = _EXCEPTION.search(rec, pos)
    if exc is None:
        return None
    return _text(rec[exc.start() :], frame)


__all__ = ["TRACEBACK", "exception_in_line", "exception_line", "frame_place"]
