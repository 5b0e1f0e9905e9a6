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
from collections.abc import Iterable
from dataclasses import fields, is_dataclass, replace
from enum import Enum
from typing import TypeVar

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


# Secret values this process knows (audit #11b): masked wherever node text is shown or written.
_SECRETS: list[str] = []
SECRET_MASK = "***"
MIN_SECRET_LEN = 6  # shorter values ("1", "true") would mask ordinary text


def register_secrets(values: Iterable[str]) -> None:
    """Remember secret values (from the config, the cluster file, the token file) so that
    :func:`mask_secrets` and :func:`sanitize_text` replace them with ``***``."""
    for v in values:
        v = v.strip()
        if len(v) >= MIN_SECRET_LEN and v not in _SECRETS:
            _SECRETS.append(v)
    _SECRETS.sort(key=len, reverse=True)  # a longer secret that holds a shorter one goes first


def mask_secrets(text: str) -> str:
    """``text`` with every registered secret value replaced by ``***``."""
    for s in _SECRETS:
        if s in text:
            text = text.replace(s, SECRET_MASK)
    return text


def sanitize_text(text: str, *, keep_newlines: bool = False) -> str:
    """``text`` with every registered secret masked and every control character except tab (and
    newline, with ``keep_newlines``) replaced by a visible form; see the module docstring."""
    if _SECRETS:
        text = mask_secrets(text)
    rx = _BAD_KEEP_NL if keep_newlines else _BAD
    if rx.search(text) is None:
        return text
    if keep_newlines:
        text = text.replace("\r\n", "\n")
    return rx.sub(_visible, text)


_T = TypeVar("_T")


def _clean(value: object) -> object:
    if isinstance(value, Enum) or (not isinstance(value, (str, tuple, list)) and not is_dataclass(value)):
        return value
    if isinstance(value, str):
        return sanitize_text(value, keep_newlines=True)
    if isinstance(value, (tuple, list)):
        items = [_clean(v) for v in value]
        if all(a is b for a, b in zip(items, value, strict=True)):
            return value
        return type(value)(items)
    return safe_event(value)


def safe_event(ev: _T) -> _T:
    """``ev`` (a frozen event dataclass, possibly nesting another) with every string field passed through
    :func:`sanitize_text`; the same object when nothing needed it. The console and the TUI apply it to
    each event before showing anything, so no node-supplied string reaches a screen raw."""
    if not is_dataclass(ev) or isinstance(ev, type):
        return ev
    changes: dict[str, object] = {}
    for f in fields(ev):
        old = getattr(ev, f.name)
        new = _clean(old)
        if new is not old:
            changes[f.name] = new
    return replace(ev, **changes) if changes else ev


__all__ = [
    "REPLACEMENT",
    "SECRET_MASK",
    "mask_secrets",
    "register_secrets",
    "safe_event",
    "sanitize_text",
]
