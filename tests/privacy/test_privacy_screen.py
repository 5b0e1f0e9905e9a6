"""Audit 3 M9 (RB04-RB08): the scrubber screens a text line by line on digit-blind templates and scans
only the lines that can hold a private value. The screen must never hide a hit: every test here compares
the screened scan with a scan of the whole text by every rule, on real-shaped logs and on copies of them
whose digits were changed (the same templates, so the screen answers from its cache)."""

from __future__ import annotations

import random
import re
import shutil
from pathlib import Path

import pytest

from cvs_tui.core.privacy import PrivacyContext, Scrubber, build_context
from cvs_tui.core.privacy import check as c
from cvs_tui.core.privacy import detectors as d
from cvs_tui.core.privacy.screen import crosses_lines, digit_blind, template
from cvs_tui.core.privacy.secret_rules import LINE_RULES, RULES, WHOLE_TEXT_RULES

FIX = Path(__file__).parents[1] / "fixtures"
LOGS = sorted(
    [*(FIX / "privacy").glob("*.log"), *(FIX / "maxtext").glob("*.log"), FIX / "maxtext" / "tiny.yml"]
)


def unscreened(det: c.Detector, text: str) -> list[d.Hit]:
    """Every rule over the whole text, no screen: what `Detector.hits` must equal."""
    low = text.lower()
    found: list[d.Hit] = []
    if any(n in low for n in c._PEM_NEEDLES):
        found += d._pem_hits(text)
    found += d.secret_hits(text, low, WHOLE_TEXT_RULES)
    found += c.Detector.scan_all(text, "log", det._terms_matcher())
    if "<" in text or "&lt" in text:
        found = [h for h in found if not c._only_placeholders(h.value)]
    return det.resolve(text, found)


def redigit(text: str, seed: int) -> str:
    """``text`` with every ASCII digit replaced at random: the same line templates, other values."""
    rnd = random.Random(seed)
    return re.sub(r"[0-9]", lambda m: str(rnd.randrange(10)), text)


def spans(hits: list[d.Hit]) -> list[tuple[int, int, str, str]]:
    return [(h.start, h.end, h.category, h.value) for h in hits]


@pytest.mark.parametrize("log", LOGS, ids=[p.name for p in LOGS])
def test_m9_the_screen_hides_no_hit(log: Path) -> None:
    """RB04: the screened scan finds exactly what every rule finds over the whole text, on the log and on
    three copies with other digits (templates cached from the log itself)."""
    text = log.read_text(encoding="utf-8")
    det = c.Detector(build_context(environ={}, deny_terms=["gpu-node17", "alice", "ml-team-3"]))
    for seed in (None, 1, 2, 3):
        t = text if seed is None else redigit(text, seed)
        assert spans(det.hits(t)) == spans(unscreened(det, t)), (log.name, seed)


def test_m9_learned_terms_and_audit_shapes_survive_the_screen() -> None:
    """RB08: names learned from a node list (one template for 4096 names) and every audited secret shape
    are found on lines whose digits differ from the lines that taught the screen."""
    from test_secret_shapes import CASES

    lines = ["nodes gpu[0001-4096] allocated", *(line for _, line, _ in CASES)]
    text = "\n".join(lines + [f"step {i} gpu{i:04d} ok" for i in range(1, 60)]) + "\n"
    sc = Scrubber()
    sc.learn(text)
    for seed in (None, 5, 6):
        t = text if seed is None else redigit(text, seed)
        det = sc._detector
        assert spans(det.hits(t)) == spans(unscreened(det, t)), seed


def test_m9_step_lines_are_screened_out() -> None:
    """RB04/RB08: a MaxText step line needs no scan, with or without 4096 learned node names: the log's
    step lines fall outside every scanned run."""
    text = (FIX / "maxtext" / "single_20steps.log").read_text()
    steps = [m.start() for m in re.finditer(r"(?m)^.*completed step: ", text)]
    assert len(steps) >= 20
    sc = Scrubber()
    sc.learn("nodes gpu[0001-4096] allocated\n")
    det = sc._detector
    screens = ((c._GENERIC_SCREEN, c._screen_generic), (det._term_screen, det._terms_matcher().screen_flags))
    lines, _ = c._loud_lines(text, screens)
    assert not [s for s in steps if any(a <= s < b for a, b, _ in lines)]


def test_m9_every_line_rule_is_screened_and_line_local() -> None:
    """Each rule a line scan runs has a digit-blind copy (none runs on every line for want of one) and
    cannot match a line break; only the PuTTY key body spans lines among the secret rules."""
    patterns = [r.pattern for r in LINE_RULES] + [rx for _, _, pats in c._LINE_DETECTORS for rx in pats]
    for rx in patterns:
        assert digit_blind(rx) is not None, rx.pattern
        assert not crosses_lines(rx), rx.pattern
    assert [r.id for r in WHOLE_TEXT_RULES] == ["putty-private-key"]
    assert len(LINE_RULES) + len(WHOLE_TEXT_RULES) == len(RULES)
    # every hit-producing pattern of the detectors module is in the screen
    screened = set(patterns) | {d._PEM_BEGIN}
    helpers = {d._PEM_END, d._PEM_LINE, d._PEM_BREAKS, d._PEM_HEADER, d._PEM_MATERIAL, d._KEY_WORD}
    helpers |= {d._SUSPECT, d.IPV4_IN_NAME, c.PLACEHOLDER}  # suspects, file names, placeholders
    module = {v for v in vars(d).values() if isinstance(v, re.Pattern)}
    assert module - helpers <= screened


@pytest.mark.parametrize(
    ("pattern", "line"),
    [
        (r"(?<![A-Za-z0-9_-])(ya29\.[0-9A-Za-z_-]{20,})", "tok ya29.abcdefghijklmnopqrstuv"),
        (r"[bcdfghjklmnpqrstvwxz2456789]{5}", "x-7b2kq"),
        (r"(?<![3-9])\d{2}", "a 12"),
        (r"A3T[A-Z0-9]{4}", "A3T7XY2"),
        (r"(?<!\.\d)x", "5x"),
        (r"[^5]{3}", "555"),
    ],
)
def test_m9_a_digit_blind_copy_matches_every_line_of_a_template(pattern: str, line: str) -> None:
    """The copy matches the template of a line the original matches, whatever digits the line had."""
    rx = re.compile(pattern)
    blind = digit_blind(rx)
    assert blind is not None
    for seed in range(20):
        variant = redigit(line, seed)
        if rx.search(variant):
            assert blind.search(template(variant)), (pattern, variant)


def test_m9_a_pattern_the_screen_cannot_read_is_scanned_everywhere() -> None:
    """A back reference has no digit-blind copy: no copy, so the rule would run on every line."""
    assert digit_blind(re.compile(r"(\d)\1")) is None
    assert crosses_lines(re.compile(r"a\s+b")) and not crosses_lines(re.compile(r"a[ \t]+b"))


def test_m9_placeholders_and_context_terms_keep_their_meaning() -> None:
    """Context terms are found case-blind (tokens exactly), with their numbers; a scrubbed text re-checks
    clean through the screen."""
    ctx = PrivacyContext(
        build_context(environ={}, deny_terms=["Gpu-Node17"]).terms
        + build_context(environ={"HF_TOKEN": "hf_SeCrEtVaLuE123456"}).terms[:1]
    )
    text = "a GPU-NODE17 b\nx hf_SeCrEtVaLuE123456 y hf_secretvalue123456\n" * 3
    det = c.Detector(ctx)
    got = spans(det.hits(text))
    assert got == spans(unscreened(det, text))
    sc = Scrubber(ctx)
    out = sc.scrub_text(text)
    assert "GPU-NODE17" not in out and "hf_SeCrEtVaLuE123456" not in out
    assert sc.check_text(out) == []


KEY_BLOCK = (
    "-----BEGIN RSA PRIVATE KEY-----\n"
    + "".join(
        f"MIIEpAIBAAKCAQEA3Tz2mr7SZiAMfQyuvBjM2k7c7ObJf9e8CK8Tq8k3xYkB0pP4q{i:03d}\n" for i in range(40)
    )
    + "-----END RSA PRIVATE KEY-----\n"
)


@pytest.mark.parametrize("encoding", ["utf-8", "utf-16"])
def test_m9_files_are_read_a_chunk_at_a_time_with_the_same_result(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, encoding: str
) -> None:
    """RB04 (memory): scrub and check-private read a file a chunk of whole lines at a time; with chunks of
    a few KB (a key block held together) the output, the findings and the suspects are those of one
    chunk for the whole file."""
    from cvs_tui.core.privacy import check_files, scrub_files, stream

    logs = [p for p in LOGS if p.suffix == ".log"]
    text = "".join(p.read_text(encoding="utf-8") for p in logs)
    text = text[:20000] + KEY_BLOCK + text[20000:] + "x=1\n" + KEY_BLOCK + "user=alice at the end\n"
    src = tmp_path / "in" / "all.log"
    src.parent.mkdir()
    src.write_text(text, encoding=encoding)
    results = []
    for chunk in (None, 3000):
        if chunk:
            monkeypatch.setattr(stream, "CHUNK", chunk)
            monkeypatch.setattr(stream, "_KEY_HOLD", 2900)
        out = tmp_path / "out"
        shutil.rmtree(out, ignore_errors=True)
        report = scrub_files([src], out_dir=out)
        suspects: list[str] = []
        found = check_files([src], suspects=suspects)
        written = (out / "all.log").read_bytes()
        results.append((written, report.leftovers, report.suspects, report.replaced, found, suspects))
    assert results[0] == results[1]
    assert results[0][4] and b"PRIVATE KEY" not in results[0][0]
    chunks = list(stream.text_chunks(src, stream.sniff(src), 3000))
    assert len(chunks) > 10 and "".join(chunks) == text
    assert all(c.endswith("\n") for c in chunks)
