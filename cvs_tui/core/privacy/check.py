"""The checker: every private value in a text as (line, col, category), never the value itself; the
suspects (host-like names no rule can prove private); and what a text teaches about its own values."""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterable

from cvs_tui.core.privacy import detectors as d
from cvs_tui.core.privacy import hosts
from cvs_tui.core.privacy.context import PLACEHOLDER, DenyTerm, PrivacyContext, Terms
from cvs_tui.core.privacy.detectors import Finding, Hit, Mode

_SUSPECT_CATEGORY = "suspect host-like name"
# card mode only: a card holds no wiring at all
_CARD_RULES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"(?<![a-z0-9+.-])[a-z][a-z0-9+.-]{0,30}://", re.I), "url"),
    (re.compile(r"(?<![\w.~])/[A-Za-z0-9_.-]+/[^\s'\"]*"), "absolute path"),
    (re.compile(r"~/"), "home path"),
    (re.compile(r"\.\./"), "relative parent path"),
    (re.compile(r"(?i)\bcluster\b"), "cluster word"),
    (re.compile(r"(?i)\b(?:ssh|scp|sftp)\b"), "remote shell"),
    (re.compile(r"\$\{?[A-Za-z_][A-Za-z0-9_]*"), "variable reference"),
    (re.compile(r"(?<![\w.-])[\w.-]{1,64}@[\w.-]{1,253}:"), "user@host"),
    (re.compile(r"(?i)\b(?:HF_TOKEN|ACCESS_TOKEN|API_KEY|PASSWORD|SECRET)\s*[:=]"), "credential"),
    (
        re.compile(
            r"(?<![a-z0-9.-])[a-z0-9-]{1,63}(?:\.[a-z0-9-]{1,63}){0,126}"
            r"\.(?:com|net|org|io|ai|dev|cloud|internal|local|lan|corp)(?::\d+)?/",
            re.I,
        ),
        "registry reference",
    ),
)


_DIGIT_RUN = re.compile(r"\d+")
_SHAPE_GROUP_MIN = 8  # terms of one shape past which one pattern and a table beat a search per term


def _term_regex(term: DenyTerm) -> re.Pattern[str]:
    flags = 0 if term.category == "token" else re.IGNORECASE
    return re.compile(rf"(?<![{d._ALNUM}]){re.escape(term.value)}(?![{d._ALNUM}])", flags)


class Detector:
    """Denylist terms (from the context and learned ones) plus every generic detector. A term's regex
    runs only when the term occurs in the text at all (one substring search), so thousands of learned
    node names cost little."""

    def __init__(self, context: PrivacyContext) -> None:
        self.context = context
        self._terms: list[tuple[int | None, DenyTerm, re.Pattern[str] | None]] = []
        self.add_terms(context.terms)

    def add_terms(self, terms: Iterable[DenyTerm]) -> None:
        for t in terms:
            self._terms.append((None if t.learned else len(self._terms) + 1, t, None))

    def learn_and_hit(self, text: str, known: Iterable[DenyTerm], mode: Mode = "log") -> list[Hit]:
        """One scan: every hit in ``text``, after adding the terms it teaches (those not in ``known``);
        returns the resolved hits, and the new terms stay in this detector."""
        raw = self.hits(text, mode, resolve=False)
        first = len(self._terms)
        self.add_terms(learned_terms(raw, known))
        if len(self._terms) > first:
            raw += self._term_hits(text, first)
        return self.resolve(text, raw)

    def new_terms(self, since: int) -> list[DenyTerm]:
        return [t for _, t, _ in self._terms[since:]]

    @property
    def term_count(self) -> int:
        return len(self._terms)

    def _term_hits(self, text: str, first: int = 0) -> list[Hit]:
        """Hits of the terms from ``first`` on. Terms that differ only in their digits (the 4096 names a
        `gpu[0001-4096]` node list teaches) share one pattern run once over the text, each match looked
        up in a table: the cost grows with the text and the number of distinct name shapes, not with
        the number of names (M9)."""
        low = text.lower()
        found: list[Hit] = []
        groups: dict[tuple[bool, str], list[int]] = {}
        for i in range(first, len(self._terms)):
            term = self._terms[i][1]
            token = term.category == "token"
            shape = _DIGIT_RUN.sub("0", term.value if token else term.value.lower())
            groups.setdefault((token, shape), []).append(i)
        for (token, _), idx in groups.items():
            if len(idx) >= _SHAPE_GROUP_MIN:
                found += self._shape_hits(text, idx, token)
                continue
            for i in idx:
                no, term, rx = self._terms[i]
                needle = term.value if token else term.value.lower()
                if needle not in (text if token else low):
                    continue
                if rx is None:
                    rx = _term_regex(term)
                    self._terms[i] = (no, term, rx)
                found += [
                    Hit(m.start(), m.end(), term.category, term.value, no, term.group)
                    for m in rx.finditer(text)
                ]
        return found

    def _shape_hits(self, text: str, idx: list[int], token: bool) -> list[Hit]:
        by_value = {
            (t.value if token else t.value.lower()): (no, t) for no, t, _ in (self._terms[i] for i in idx)
        }
        sample = self._terms[idx[0]][1].value
        parts = [re.escape(p) for p in _DIGIT_RUN.split(sample)]
        rx = re.compile(
            rf"(?<![{d._ALNUM}])" + r"\d+".join(parts) + rf"(?![{d._ALNUM}])", 0 if token else re.IGNORECASE
        )
        out: list[Hit] = []
        for m in rx.finditer(text):
            hit = by_value.get(m.group() if token else m.group().lower())
            if hit is not None:
                no, t = hit
                out.append(Hit(m.start(), m.end(), t.category, t.value, no, t.group))
        return out

    def hits(self, text: str, mode: Mode = "log", *, resolve: bool = True) -> list[Hit]:
        """Private values in ``text``, one per span (``resolve``) or every hit of every rule (what learning
        reads: a node list that loses a tie to `--nodelist=` still teaches its names)."""
        found = self._term_hits(text)
        low = text.lower()

        def has(*needles: str) -> bool:
            return any(n in low for n in needles)

        if has("private key", "putty-user-key-file"):
            found += d._pem_hits(text)
        found += d.secret_hits(text, low)
        found += d._ipv4_hits(text, mode)
        if has(":"):
            found += d._ipv6_hits(text, mode)
        if has("@"):
            found += d._email_hits(text)
        if has("/home/", "/users/", "/root", ":\\users", ":\\\\users", ":/users", "documents and settings"):
            found += d._home_hits(text)
        if has("guid", ":"):
            found += d._guid_hits(text)
        if has("-n", "namespace"):
            found += d._namespace_hits(text)
        for rx, cat, needles in d._GROUP_RULES:  # before the host rules: they win a tie (`--nodelist=x[1-2]`)
            if has(*needles):
                found += d._group_hits(rx, text, cat)
        if has("slurm"):
            found += d._slurm_hits(text)
        if has("."):
            found += d._domain_hits(text)
        if has("["):
            found += d._nodelist_hits(text)
        if has("-"):
            found += d._pod_hits(text)
            found += d._replica_pod_hits(text)
        if has("addr", "host", "node", "coordinator", "user", "logname", "login", "name", ":"):
            found += d._assign_hits(text)
        if "<" in text or "&lt" in text:
            found = [h for h in found if not _only_placeholders(h.value)]
        return self.resolve(text, found) if resolve else found

    @staticmethod
    def resolve(text: str, found: list[Hit]) -> list[Hit]:
        # placeholders are never private (a scrubbed file must re-check clean)
        spans = [(m.start(), m.end()) for m in PLACEHOLDER.finditer(text)] if "<" in text else []
        if spans:
            found = [h for h in found if not _inside(spans, h.start, h.end)]
        return resolve_overlaps(found)


# a placeholder as it stands in text, HTML-escaped in markup, and the pieces of one a rule may cut off
_PLACEHOLDER_PIECES = re.compile(r"(?:<|&lt;)[a-z]+(?:-[a-z]+)?(?:-\d+)?(?:>|&gt;)|&lt;?|&gt;?|&amp;?")


def _only_placeholders(value: str) -> bool:
    """A hit that holds nothing but placeholders (`&lt;token&gt;`, `&lt` cut at its `;`) and punctuation:
    what an earlier pass left, not a private value; learning it would make every escaped placeholder a
    leftover."""
    if "<" not in value and "&" not in value:
        return False
    rest = _PLACEHOLDER_PIECES.sub("", value)
    return not any(c.isalnum() for c in rest)


def _inside(spans: list[tuple[int, int]], start: int, end: int) -> bool:
    """``start..end`` lies within one of ``spans`` (sorted, disjoint)."""
    i = bisect.bisect_right(spans, (start, 1 << 62)) - 1
    return i >= 0 and spans[i][0] <= start and end <= spans[i][1]


def resolve_overlaps(hits: list[Hit]) -> list[Hit]:
    """Earliest start wins; at the same start the longest; denylist terms beat detectors on ties."""
    hits.sort(key=lambda h: (h.start, -(h.end - h.start), h.term_no is None))
    out: list[Hit] = []
    end = -1
    for h in hits:
        if h.start >= end:
            out.append(h)
            end = h.end
    return out


def learned_terms(hits: Iterable[Hit], known: Iterable[DenyTerm] = ()) -> list[DenyTerm]:
    """The values ``hits`` teach (short host names, expanded node lists, users, JobSet names) that are not
    in ``known`` yet."""
    t = Terms()
    for k in known:
        t.add(k.value, k.category, k.group, learned=k.learned)
    n = len(t.items)
    for h in hits:
        for value, category, group in h.learn:
            t.add(value, category, group, learned=True)
    return t.items[n:]


def _line_starts(text: str) -> list[int]:
    return [0, *(m.end() for m in re.finditer(r"\n", text))]


def _position(starts: list[int], offset: int) -> tuple[int, int]:
    i = bisect.bisect_right(starts, offset) - 1
    return i + 1, offset - starts[i] + 1


def find_private(text: str, context: PrivacyContext | None = None, *, mode: Mode = "log") -> list[Finding]:
    """Every private value in ``text`` as (line, col, category); the values themselves are not returned.
    Values the text teaches (the short name of an FQDN in it, the user of a `/home/<user>` in it) are
    found too."""
    det = Detector(context or PrivacyContext())
    hits = det.learn_and_hit(text, det.context.terms, mode)
    starts = _line_starts(text)
    out = [Finding(*_position(starts, h.start), h.category, h.term_no) for h in hits]
    if mode == "card":
        # a card rule names the problem better than the generic host rule at the same spot
        ruled = {_position(starts, m.start()) for rx, _ in _CARD_RULES for m in rx.finditer(text)}
        out = [f for f in out if not (f.category == "host" and (f.line, f.col) in ruled)]
        taken = {(f.line, f.col) for f in out}
        for rx, cat in _CARD_RULES:
            for m in rx.finditer(text):
                line, col = _position(starts, m.start())
                if (line, col) not in taken:
                    out.append(Finding(line, col, cat))
                    taken.add((line, col))
        out.sort(key=lambda f: (f.line, f.col))
    return out


def find_suspects(text: str, detector: Detector | None = None) -> list[Finding]:
    """Names shaped like machines (`gpu-node17`, `mi300-rack4-07`, `srv01.acme.zz`) that no rule proves
    private: a user checks them by hand, or passes --cluster/--deny-term so they become known."""
    det = detector or Detector(PrivacyContext())
    taken = [(h.start, h.end) for h in det.hits(text)]
    taken += [(m.start(), m.end()) for m in PLACEHOLDER.finditer(text)]
    taken.sort()
    starts = _line_starts(text)
    out: list[Finding] = []
    for rx in (d._SUSPECT, d._DOMAIN):
        for m in rx.finditer(text):
            token = m.group(1)
            first = token.split(".", 1)[0]
            if "." in token and hosts.host_kind(token, False) == "public":
                continue
            if not hosts.looks_like_host(first) or _covered(taken, m.start(1), m.end(1)):
                continue
            out.append(Finding(*_position(starts, m.start(1)), _SUSPECT_CATEGORY))
    return sorted(set(out), key=lambda f: (f.line, f.col))


def _covered(spans: list[tuple[int, int]], start: int, end: int) -> bool:
    i = bisect.bisect_right(spans, (start, 1 << 62)) - 1
    return (i >= 0 and spans[i][0] <= start < spans[i][1]) or any(
        s < end and start < e for s, e in spans[i + 1 : i + 2]
    )
