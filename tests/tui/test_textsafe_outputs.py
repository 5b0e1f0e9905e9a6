"""Audit 2 #5: a node's escape sequences never reach a terminal, the TUI, junit.xml, summary.md or
report.html. The log is the audit's: the fixture plus a traceback whose message sets the terminal title,
writes the clipboard (OSC 52) and clears the screen."""

from __future__ import annotations

import io
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from _analysis_samples import FIXTURES, write_config
from _pilot import Settle
from rich.console import Console
from tui_streams import CLOCK, paced, suite_events

from cvs_tui.cli.console import ConsoleView
from cvs_tui.cli.main import main
from cvs_tui.core.events import ErrorHit, LogLinesEvent, NodeLogEvent, RunEvent, Severity
from cvs_tui.core.textsafe import safe_event
from cvs_tui.tui.app import CvsApp
from cvs_tui.tui.widgets.log_pane import LogPane

KEY = "BS=2,PRECISION=BF16,SL=128"
EVIL = "RuntimeError: \x1b]0;PWNED\x1b\\ \x1b]52;c;cHduZWQ=\x1b\\ \x1b[2J \x9b31m"


def _no_raw_escape(text: str) -> None:
    assert "\x1b]" not in text and "\x1b[2J" not in text and "\x9b" not in text


def test_analyze_summary_and_reports_carry_no_escape(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "a.log"
    log.write_bytes(
        (FIXTURES / "single_20steps.log").read_bytes()
        + f"Traceback (most recent call last):\n{EVIL}\n".encode()
    )
    cfg = write_config(tmp_path, runs=[KEY])
    out = tmp_path / "out"
    assert main(["analyze", str(cfg), "--logs", str(log), "--out", str(out), "--no-ui"]) == 1
    printed = capsys.readouterr().out
    _no_raw_escape(printed)
    ET.parse(out / "junit.xml")  # well-formed: no ESC byte in it
    for name in ("junit.xml", "summary.md", "report.html"):
        text = (out / name).read_text()
        assert "\x1b" not in text, name
    assert "^[]0;PWNED" in (out / "report.html").read_text()


def test_headless_console_shows_node_text_escaped() -> None:
    buf = io.StringIO()
    cv = ConsoleView(Console(file=buf, force_terminal=True, width=300))
    cv.handle(NodeLogEvent("r", 0, ErrorHit("traceback", Severity.FATAL, EVIL, 3, "builtin")))
    _no_raw_escape(buf.getvalue())
    assert "^[]0;PWNED" in buf.getvalue()


def test_safe_event_reaches_nested_and_tuple_fields() -> None:
    ev = LogLinesEvent("r", 0, 1, ("ok", EVIL))
    safe = safe_event(ev)
    assert safe.lines[0] == "ok" and "\x1b" not in safe.lines[1]
    plain = LogLinesEvent("r", 0, 1, ("ok",))
    assert safe_event(plain) is plain


async def test_tui_log_pane_and_view_hold_no_escape(settle: Settle) -> None:
    events: list[RunEvent] = suite_events(fraction=0.6)
    events += [
        LogLinesEvent("BS2_SL64", 0, 10_000, (EVIL,)),
        NodeLogEvent("BS2_SL64", 0, ErrorHit("traceback", Severity.FATAL, EVIL, 10_000, "builtin")),
    ]
    app = CvsApp(paced(events), title="t", info={}, clock=lambda: CLOCK)  # type: ignore[arg-type]
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot)
        lines = list(app.screen.query_one(LogPane).log_widget.lines)
        assert any("PWNED" in ln for ln in lines)
        for ln in lines:
            _no_raw_escape(ln)
        node = app.view.runs["BS2_SL64"].nodes[0]
        _no_raw_escape(repr(node))
