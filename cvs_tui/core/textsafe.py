"""Make node-supplied text safe to show on a terminal or to write into XML, Markdown or HTML (audit #5).

A node's log line can hold escape sequences (`ESC ] 0;title BEL`, `ESC ] 52` clipboard writes, `ESC [ 2J`)
that a terminal or the TUI would execute, and bytes that make junit.xml ill-formed (XML 1.0 allows no C0
control other than tab, newline and carriage return, and no lone surrogate). ``sanitize_text`` replaces
them with visible text, so the line stays readable and nothing is executed:

- C0 controls and DEL become caret notation: ESC -> `^[`, NUL -> `^@`, BEL -> `^G`, DEL -> `^?`;
- C1 controls (U+0080-U+009F, including the 8-bit CSI U+009B), lone surrogates (what `surrogateescape`
  leaves for undecodable bytes) and the non-characters U+FFFE/U+FFFF become U+FFFD;
- tab is kept; newline is kept only with ``keep_newlines`` (a multi-line block), and then a CRLF pair
  becomes a plain newline.

Call it on every node-supplied string before it reaches the console, the TUI, junit.xml, summary.md or
report.html; text that holds none of these characters is returned as is (one regex search).
"""

from __future__ import annotations

import re

_BAD = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f\ud800-\udfff\ufffe\uffff]")
_BAD_KEEP_NL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff\ufffe\uffff]")
REPLACEMENT = "\ufffd"


def _visible(m: re.Match[str]) -> str:
    c = ord(m.group())
    if c < 0x20:
        return "^" + chr(c + 0x40)
    if c == 0x7F:
        return "^?"
    return REPLACEMENT


def sanitize_text(text: str, *, keep_newlines: bool = False) -> str:
    """``text`` with every control character except tab (and newline, with ``keep_newlines``) replaced
    by a visible form; see the module docstring."""
    rx = _BAD_KEEP_NL if keep_newlines else _BAD
    if rx.search(text) is None:
        return text
    if keep_newlines:
        text = text.replace("\r\n", "\n")
    return rx.sub(_visible, text)


__all__ = ["REPLACEMENT", "sanitize_text"]
