"""`sanitize_text`: node-supplied text loses every control sequence a terminal would run or XML rejects
(audit #5), and stays readable."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from hypothesis import given, settings
from hypothesis import strategies as st

from cvs_tui.core.textsafe import REPLACEMENT, sanitize_text

PAYLOAD = "RuntimeError: \x1b]0;PWNED\x1b\\ \x1b[2J \x1b]52;c;aGk=\x07 done"


def test_escape_sequences_become_visible_text() -> None:
    out = sanitize_text(PAYLOAD)
    assert "\x1b" not in out and "\x07" not in out
    assert out == "RuntimeError: ^[]0;PWNED^[\\ ^[[2J ^[]52;c;aGk=^G done"


def test_tab_kept_newlines_only_when_asked() -> None:
    assert sanitize_text("a\tb\nc\r\nd\re") == "a\tb^Jc^M^Jd^Me"
    assert sanitize_text("a\tb\nc\r\nd\re", keep_newlines=True) == "a\tb\nc\nd^Me"


def test_c1_del_surrogates_and_nonchars() -> None:
    assert sanitize_text("x\x9b31m\x85y\x7fz") == f"x{REPLACEMENT}31m{REPLACEMENT}y^?z"
    assert sanitize_text("bad \udcff byte \ufffe") == f"bad {REPLACEMENT} byte {REPLACEMENT}"
    assert sanitize_text("\x00") == "^@"


def test_ordinary_text_is_returned_as_is() -> None:
    text = "completed step: 10, loss: 7.123 — ünïcode ✓ 日本"
    assert sanitize_text(text) is text


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(codec=None, exclude_categories=()), max_size=80), st.booleans())
def test_output_is_terminal_safe_and_well_formed_xml(text: str, keep: bool) -> None:
    out = sanitize_text(text, keep_newlines=keep)
    assert not any((ord(c) < 0x20 and c not in "\t\n") or 0x7F <= ord(c) <= 0x9F for c in out)
    assert "\n" not in out or keep
    out.encode("utf-8")  # no lone surrogate left
    ET.fromstring(f"<t a='x'>{out.replace('&', '&amp;').replace('<', '&lt;')}</t>")
