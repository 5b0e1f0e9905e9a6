"""How the log pane draws and reads lines: glog level colours, harmless chatter dimmed, wrapping, and
reading a span of a node's log file back from the run folder."""

from __future__ import annotations

import re
from itertools import islice
from pathlib import Path

from rich.highlighter import Highlighter
from rich.text import Text

WRAP_MARK = "  ↪ "  # starts each continuation of a wrapped line

# glog/absl level letter (`E1201 12:41:50.715435 …`), after an optional pane prefix (`[n03] `, `  812  `)
_GLOG_LEVEL = re.compile(r"^(?:\[n\d+\] |>>|\s)*(?:\d+\s+)?([IWEF])\d{4} \d\d:\d\d")
LEVEL_STYLE = {"W": "yellow", "E": "red", "F": "bold red"}
# Start-up chatter a MaxText run prints on every node and that is harmless on these set-ups: dimmed so the
# lines that matter stand out. Each entry is a plain substring of the line.
HARMLESS: tuple[str, ...] = (
    "[NO-OP] mldiagnostics",
    "PyTorch was not found",
    "TensorFlow was not found",
    "An NVIDIA GPU may be present on this machine, but a CUDA-enabled jaxlib is not installed",
    "Unable to initialize backend 'tpu'",
    "Unable to initialize backend 'cuda'",
    "Unable to initialize backend 'rocm'",
    "Platform 'cuda' is experimental",
)


class LevelHighlighter(Highlighter):
    """Warning, error and fatal glog lines in yellow, red and bold red; known-harmless chatter dimmed."""

    def highlight(self, text: Text) -> None:
        plain = text.plain
        m = _GLOG_LEVEL.match(plain)
        if m is not None and m.group(1) in LEVEL_STYLE:
            if any(h in plain for h in HARMLESS):
                text.stylize("dim")
            else:
                text.stylize(LEVEL_STYLE[m.group(1)])
        elif any(h in plain for h in HARMLESS):
            text.stylize("dim")


def wrap_line(line: str, width: int) -> list[str]:
    """``line`` in pieces of ``width`` cells; each continuation starts with :data:`WRAP_MARK`."""
    if width <= len(WRAP_MARK) + 4 or len(line) <= width:
        return [line]
    out = [line[:width]]
    step = width - len(WRAP_MARK)
    out.extend(WRAP_MARK + line[i : i + step] for i in range(width, len(line), step))
    return out


def read_lines(path: Path, first: int, last: int) -> list[str]:
    """Lines ``first``..``last`` (1-based, inclusive) of a log file; fewer when the file is shorter."""
    if last < first:
        return []
    with path.open("r", encoding="utf-8", errors="replace") as fh:
        return [t.rstrip("\n")[:1000] for t in islice(fh, first - 1, last)]
