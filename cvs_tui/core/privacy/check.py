"""The checker: every private value in a text as (line, col, category), never the value itself; the
suspects (host-like names no rule can prove private); and what a text teaches about its own values.

Long because the detector, its line screen and the suspects share the flags that say which rule may
match a line of a given template; the word-set pattern is in ``privacy/words.py``.
"""

from __future__ import annotations

import bisect
import functools
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from cvs_tui.core.privacy import detectors as d
from cvs_tui.core.privacy import hosts
from cvs_tui.core.privacy.context import PLACEHOLDER, DenyTerm, PrivacyContext, Terms
from cvs_tui.core.privacy.detectors import Finding, Hit, Mode
from cvs_tui.core.privacy.screen import DIGITS_TO_ZERO, digit_blind, template
from cvs_tui.core.privacy.secret_rules import LINE_RULES, WHOLE_TEXT_RULES, SecretRule
from cvs_tui.core.privacy.words import words_regex

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


_GENERIC_SCREEN: dict[str, int] = {}  # line template -> screen flags, shared by every Detector
_SCREEN_MAX = 20_000  # templates remembered per screen; past this the cache starts over
_REMEMBER_LINE = 2048  # a longer template is screened each time it comes (caches stay a few tens of MB)
_LINE_MAX = 1 << 16  # a longer line is scanned without a screen (and not remembered)


_HOME_NEEDLES = ("/home/", "/users/", "/root", ":\\users", ":\\\\users", ":/users", "documents and settings")
_ASSIGN_NEEDLES = ("addr", "host", "node", "coordinator", "user", "logname", "login", "name", ":")
_Run = Callable[[str, Mode], Iterable[Hit]]
# (lower-case needles, detector, the patterns whose matches its hits come from), in tie-breaking order:
# the group rules come before the host rules, so they win a tie (`--nodelist=x[1-2]`)
_LINE_DETECTORS: tuple[tuple[tuple[str, ...], _Run, tuple[re.Pattern[str], ...]], ...] = (
    ((), d._ipv4_hits, (d._IPV4,)),
    ((":",), d._ipv6_hits, (d._IPV6,)),
    (("@",), lambda t, m: d._email_hits(t), (d._EMAIL,)),
    (_HOME_NEEDLES, lambda t, m: d._home_hits(t), (d._HOME, d._WIN_HOME)),
    (("guid", ":"), lambda t, m: d._guid_hits(t), (d._GUID,)),
    (("-n", "namespace"), lambda t, m: d._namespace_hits(t), (d._NAMESPACE,)),
    *(
        (needles, lambda t, m, rx=rx, cat=cat: d._group_hits(rx, t, cat), (rx,))
        for rx, cat, needles in d._GROUP_RULES
    ),
    (("slurm",), lambda t, m: d._slurm_hits(t), (d._SLURM,)),
    ((".",), lambda t, m: d._domain_hits(t), (d._DOMAIN,)),
    (("[",), lambda t, m: d._nodelist_hits(t), (hosts.NODELIST,)),
    (("-",), lambda t, m: [*d._pod_hits(t), *d._replica_pod_hits(t)], (d._POD, d._REPLICA_POD)),
    (_ASSIGN_NEEDLES, lambda t, m: d._assign_hits(t), (d._HOST_ASSIGN, d._NCCL, d._USER_ASSIGN, d._K8S_NAME)),
)
_PEM_NEEDLES = ("private key", "putty-user-key-file")
_PEM_FLAG = 1 << 1  # a line holds a private key rule's needle (that rule sees the whole text)
_WHOLE_FLAG = 1 << 2  # the first whole-text secret rule's needle; the next ones shift it left
_TERM_FLAG = _WHOLE_FLAG << len(WHOLE_TEXT_RULES)  # a denylist term may be on the line
_RULE_FLAG = _TERM_FLAG << 1  # the first line rule may match the line; the next ones shift it left


def _blind_needles(needles: Iterable[str]) -> tuple[str, ...]:
    return tuple(n.translate(DIGITS_TO_ZERO) for n in needles)


def _maybe_ipv6(probe: str, m: re.Match[str]) -> bool:
    """The shape an IPv6 address needs (`::`, or 6 to 7 colons), read without the digits' values."""
    v = m.group(1) if m.group(1) is not None else m.group(2)
    return v.count(":") >= 6 or ("::" in v and v.count(":") >= 2)


def _maybe_host(probe: str, m: re.Match[str]) -> bool:
    """`host_kind` of a dotted name in a template: it reads digits only as digits, and no public name or
    file extension it knows holds a `0`, so a template is a host whenever one of its lines can be."""
    port = probe[m.end() : m.end() + 1] == ":" and probe[m.end() + 1 : m.end() + 3].isdigit()
    return hosts.host_kind(m.group(1), port) == "host"


_Check = Callable[[str, re.Match[str]], bool]
_POST_CHECKS: dict[re.Pattern[str], _Check] = {d._IPV6: _maybe_ipv6, d._DOMAIN: _maybe_host}
_Scan = Callable[[str, str, Mode], Iterable[Hit]]  # (text, its lower case, mode) -> hits


@dataclass(frozen=True)
class _LineRule:
    """A rule a line scan runs: its needles (as they read in a template), how it scans, and the
    digit-blind copies of the patterns its hits come from, each with a check that only drops matches no
    line of the template can turn into a hit (None: no copy, the rule may match any line)."""

    needles: tuple[str, ...]
    scan: _Scan
    screens: tuple[tuple[re.Pattern[str] | None, _Check | None], ...]

    def may_match(self, probe: str, low: str) -> bool:
        if self.needles and not any(n in low for n in self.needles):
            return False
        for rx, check in self.screens:
            if rx is None:
                return True
            if check is None:
                if rx.search(probe):
                    return True
            elif any(check(probe, m) for m in rx.finditer(probe)):
                return True
        return False


def _secret_scan(rule: SecretRule) -> _Scan:
    return lambda t, low, m: d.secret_hits(t, low, (rule,))


def _detector_scan(run: _Run) -> _Scan:
    return lambda t, low, m: run(t, m)


@functools.cache
def _line_rules() -> tuple[_LineRule, ...]:
    """The line rules in tie-breaking order: secrets, then the detectors (terms are scanned first).
    Built on first use: deriving the digit-blind copies costs a few tens of milliseconds."""
    return (
        *(
            _LineRule(_blind_needles(r.needles), _secret_scan(r), ((digit_blind(r.pattern), None),))
            for r in LINE_RULES
        ),
        *(
            _LineRule(
                _blind_needles(n),
                _detector_scan(run),
                tuple((digit_blind(rx), _POST_CHECKS.get(rx)) for rx in pats),
            )
            for n, run, pats in _LINE_DETECTORS
        ),
    )


_LOUD = (
    _RULE_FLAG << (len(LINE_RULES) + len(_LINE_DETECTORS))
) - _TERM_FLAG  # any of the term and line rule flags
_WHOLE_NEEDLES = tuple(_blind_needles(r.needles) for r in WHOLE_TEXT_RULES)


def _screen_generic(key: str) -> int:
    """Screen flags of a line template: each line rule's flag when its digit-blind patterns match it,
    and the flags of the whole-text rules whose needles it holds."""
    probe = "\n" + key  # the line break before it, as a look-behind sees it in the text
    low = probe.lower()
    flags = _PEM_FLAG if any(n in low for n in _PEM_NEEDLES) else 0
    for i, needles in enumerate(_WHOLE_NEEDLES):
        if any(n in low for n in needles):
            flags |= _WHOLE_FLAG << i
    for i, rule in enumerate(_line_rules()):
        if rule.may_match(probe, low):
            flags |= _RULE_FLAG << i
    return flags


def _remember(cache: dict[str, int], key: str, value: int) -> int:
    if len(key) > _REMEMBER_LINE:
        return value
    if len(cache) >= _SCREEN_MAX:
        cache.clear()
    cache[key] = value
    return value


_Screen = tuple[dict[str, int], Callable[[str], int]]  # (cache, what a template not cached gets)
_BLOCK = 1 << 16  # the template is screened a block of about this many characters at a time


def _loud_lines(
    text: str, screens: Sequence[_Screen], tmpl: str | None = None, loud: int = _LOUD
) -> tuple[list[tuple[int, int, int]], int]:
    """(start, end, flags) of each line some screen gives a flag in ``loud``, and the union of every
    line's flags. A screen looks at a line's template (no line break); a line longer than `_LINE_MAX`
    gets every flag without one. Each block is screened by its distinct templates: a block with no loud
    one costs no loop. ``tmpl`` is ``template(text)`` when the caller has it already."""
    if tmpl is None:
        tmpl = template(text)
    lines: list[tuple[int, int, int]] = []
    flags = 0
    pos = 0
    n = len(text)
    while pos < n:
        j = tmpl.find("\n", min(pos + _BLOCK, n))
        j = n if j < 0 else j + 1
        parts = tmpl[pos:j].split("\n")
        if not parts[-1]:
            parts.pop()  # the block ends with a line break
        marks: dict[str, int] = {}
        for line in set(parts):
            f = -1 if len(line) > _LINE_MAX else _screen_line(line, screens)
            flags |= f
            if f & loud:
                marks[line] = f
        if marks:
            lines += _positions(tmpl, pos, j, marks)
        pos = j
    return lines, flags


def _positions(tmpl: str, pos: int, j: int, marks: dict[str, int]) -> list[tuple[int, int, int]]:
    """(start, end, flags) of every line of ``tmpl[pos:j]`` whose template is in ``marks``, found by
    substring search (a block's loud lines are few; its lines are not walked one by one)."""
    block = "\n" + tmpl[pos:j] + ("" if tmpl.endswith("\n", pos, j) else "\n")
    found: list[tuple[int, int, int]] = []
    for line, f in marks.items():
        needle = "\n" + line + "\n"
        k = block.find(needle)
        while k >= 0:
            found.append((pos + k, min(pos + k + len(line) + 1, j), f))
            k = block.find(needle, k + len(line) + 1)
    found.sort()
    return found


def _runs(lines: Iterable[tuple[int, int, int]], flag: int) -> list[tuple[int, int]]:
    """The lines that carry ``flag``, adjacent ones joined."""
    out: list[tuple[int, int]] = []
    for a, b, f in lines:
        if f & flag:
            if out and out[-1][1] == a:
                out[-1] = (out[-1][0], b)
            else:
                out.append((a, b))
    return out


def _scan_runs(text: str, runs: list[tuple[int, int]], scan: _Scan, mode: Mode) -> list[Hit]:
    """``scan`` over the runs of ``text`` joined into one text (a rule that cannot match a line break
    finds in each what it finds there), its hits moved back to their places."""
    if not runs:
        return []
    parts = ["\n"]  # a look-behind at the first run sees a line break, as in the text
    at_joined: list[int] = []
    at_text: list[int] = []
    pos = 1
    for a, b in runs:
        at_joined.append(pos)
        at_text.append(a)
        parts.append(text[a:b])
        pos += b - a
    parts.append("\n")
    joined = "".join(parts)
    out: list[Hit] = []
    for h in scan(joined, joined.lower(), mode):
        i = bisect.bisect_right(at_joined, h.start) - 1
        off = at_text[i] - at_joined[i]
        out.append(Hit(h.start + off, h.end + off, h.category, h.value, h.term_no, h.group, h.learn))
    return out


def _screen_line(line: str, screens: Sequence[_Screen]) -> int:
    f = 0
    for cache, miss in screens:
        v = cache.get(line)
        if v is None:
            v = _remember(cache, line, miss(line))
        f |= v
    return f


class TermMatcher:
    """Every denylist term at once: one pattern for the case-blind terms, one for tokens (exact case),
    each match looked up in a table; ``screen`` is the digit-blind pattern of them all (for templates)."""

    def __init__(self, terms: Sequence[tuple[int | None, DenyTerm]]) -> None:
        self._fold: dict[str, tuple[int | None, DenyTerm]] = {}
        self._exact: dict[str, tuple[int | None, DenyTerm]] = {}
        for no, t in terms:
            if t.category == "token":
                self._exact.setdefault(t.value, (no, t))
            else:
                self._fold.setdefault(t.value.lower(), (no, t))
        self._rx = (
            (words_regex(self._fold, re.IGNORECASE), self._fold, True),
            (words_regex(self._exact, 0), self._exact, False),
        )
        blind = {template(v.lower()) for v in [*self._fold, *self._exact]}
        self.screen = words_regex(blind, re.IGNORECASE)

    def screen_flags(self, key: str) -> int:
        """`_TERM_FLAG` when a term may stand on a line of template ``key``."""
        return _TERM_FLAG if self.screen is not None and self.screen.search("\n" + key) else 0

    def scan(self, text: str, low: str, mode: Mode) -> list[Hit]:
        return self.hits(text)

    def hits(self, text: str) -> list[Hit]:
        out: list[Hit] = []
        for rx, table, fold in self._rx:
            if rx is None:
                continue
            pos = 0
            while (m := rx.search(text, pos)) is not None:
                entry = table.get(m.group().lower() if fold else m.group())
                if entry is not None:
                    no, t = entry
                    out.append(Hit(m.start(), m.end(), t.category, t.value, no, t.group))
                pos = m.start() + 1  # overlapping terms: each start gets its longest term
        return out


class Detector:
    """Denylist terms (from the context and learned ones) plus every generic detector.

    A text is screened line by line (`screen`): a line whose digit-blind template no rule and no term
    can match is skipped, and only runs of the remaining lines are scanned for real, so a log costs a few
    C-level passes however many lines it has and however many names were learned (M9). The rules that
    span lines (private key blocks) run on the whole text when a line holds their needle."""

    def __init__(self, context: PrivacyContext) -> None:
        self.context = context
        self._terms: list[tuple[int | None, DenyTerm]] = []
        self._matcher: TermMatcher | None = None
        self._term_screen: dict[str, int] = {}
        self.add_terms(context.terms)

    def add_terms(self, terms: Iterable[DenyTerm]) -> None:
        before = len(self._terms)
        for t in terms:
            self._terms.append((None if t.learned else len(self._terms) + 1, t))
        if len(self._terms) != before:
            self._matcher = None
            self._term_screen = {}

    def learn_and_hit(
        self, text: str, known: Iterable[DenyTerm], mode: Mode = "log", *, tmpl: str | None = None
    ) -> list[Hit]:
        """One scan: every hit in ``text``, after adding the terms it teaches (those not in ``known``);
        returns the resolved hits, and the new terms stay in this detector."""
        if tmpl is None:
            tmpl = template(text)
        raw = self.hits(text, mode, resolve=False, tmpl=tmpl)
        first = len(self._terms)
        self.add_terms(learned_terms(raw, known))
        if len(self._terms) > first:
            new = TermMatcher(self._terms[first:])
            lines = _loud_lines(text, (({}, new.screen_flags),), tmpl)[0]
            raw += _scan_runs(text, _runs(lines, _TERM_FLAG), new.scan, mode)
        return self.resolve(text, raw)

    def new_terms(self, since: int) -> list[DenyTerm]:
        return [t for _, t in self._terms[since:]]

    @property
    def term_count(self) -> int:
        return len(self._terms)

    def _terms_matcher(self) -> TermMatcher:
        if self._matcher is None:
            self._matcher = TermMatcher(self._terms)
        return self._matcher

    def hits(
        self, text: str, mode: Mode = "log", *, resolve: bool = True, tmpl: str | None = None
    ) -> list[Hit]:
        """Private values in ``text``, one per span (``resolve``) or every hit of every rule (what learning
        reads: a node list that loses a tie to `--nodelist=` still teaches its names). ``tmpl`` is
        ``template(text)`` when the caller has it already."""
        terms = self._terms_matcher()
        screens = ((_GENERIC_SCREEN, _screen_generic), (self._term_screen, terms.screen_flags))
        lines, flags = _loud_lines(text, screens, tmpl)
        found: list[Hit] = []
        if flags & _PEM_FLAG:
            found += d._pem_hits(text)
        whole = [r for i, r in enumerate(WHOLE_TEXT_RULES) if flags & (_WHOLE_FLAG << i)]
        if whole:
            found += d.secret_hits(text, text.lower(), whole)
        # each rule over just the lines its screen let through, in tie-breaking order
        if flags & _TERM_FLAG:
            found += _scan_runs(text, _runs(lines, _TERM_FLAG), terms.scan, mode)
        for i, rule in enumerate(_line_rules()):
            if flags & (_RULE_FLAG << i):
                found += _scan_runs(text, _runs(lines, _RULE_FLAG << i), rule.scan, mode)
        if "<" in text or "&lt" in text:
            found = [h for h in found if not _only_placeholders(h.value)]
        return self.resolve(text, found) if resolve else found

    @staticmethod
    def scan_all(text: str, mode: Mode, terms: TermMatcher) -> list[Hit]:
        """Every line rule over all of ``text``, no screen (what the screened scan must equal)."""
        found = terms.hits(text)
        low = text.lower()
        for rule in _line_rules():
            found += rule.scan(text, low, mode)
        return found

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
    t.know(k.value for k in known)  # not re-added one by one: thousands of learned names cost a set
    for h in hits:
        for value, category, group in h.learn:
            t.add(value, category, group, learned=True)
    return t.items


class _Lines:
    """Line and column of offsets in a text, counted as they are asked for (in ascending order a text is
    counted once; an earlier offset starts the count over)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.offset = 0
        self.line = 1

    def at(self, offset: int) -> tuple[int, int]:
        if offset < self.offset:
            self.offset, self.line = 0, 1
        self.line += self.text.count("\n", self.offset, offset)
        self.offset = offset
        return self.line, offset - self.text.rfind("\n", 0, offset)


def findings_of(text: str, hits: Iterable[Hit]) -> list[Finding]:
    """``hits`` (in ascending order) as (line, col, category) findings."""
    lines = _Lines(text)
    return [Finding(*lines.at(h.start), h.category, h.term_no) for h in hits]


def find_private(
    text: str, context: PrivacyContext | None = None, *, mode: Mode = "log", tmpl: str | None = None
) -> list[Finding]:
    """Every private value in ``text`` as (line, col, category); the values themselves are not returned.
    Values the text teaches (the short name of an FQDN in it, the user of a `/home/<user>` in it) are
    found too. ``tmpl`` is ``template(text)`` when the caller has it already."""
    det = Detector(context or PrivacyContext())
    hits = det.learn_and_hit(text, det.context.terms, mode, tmpl=tmpl)
    out = findings_of(text, hits)
    lines = _Lines(text)
    if mode == "card":
        # a card rule names the problem better than the generic host rule at the same spot
        ruled = {lines.at(m.start()) for rx, _ in _CARD_RULES for m in rx.finditer(text)}
        out = [f for f in out if not (f.category == "host" and (f.line, f.col) in ruled)]
        taken = {(f.line, f.col) for f in out}
        for rx, cat in _CARD_RULES:
            for m in rx.finditer(text):
                line, col = lines.at(m.start())
                if (line, col) not in taken:
                    out.append(Finding(line, col, cat))
                    taken.add((line, col))
        out.sort(key=lambda f: (f.line, f.col))
    return out


_SUSPECT_SCREEN: dict[str, int] = {}


def _suspect_screen(key: str) -> int:
    """1 when a line template holds a name shaped like a machine: the suspect patterns and
    `looks_like_host` read digits only as digits, so the template answers for every line it stands for."""
    probe = "\n" + key
    for rx in (d._SUSPECT, d._DOMAIN):
        if any(hosts.looks_like_host(m.group(1).split(".", 1)[0]) for m in rx.finditer(probe)):
            return 1
    return 0


def find_suspects(text: str, detector: Detector | None = None, *, tmpl: str | None = None) -> list[Finding]:
    """Names shaped like machines (`gpu-node17`, `mi300-rack4-07`, `srv01.acme.zz`) that no rule proves
    private: a user checks them by hand, or passes --cluster/--deny-term so they become known."""
    det = detector or Detector(PrivacyContext())
    if tmpl is None:
        tmpl = template(text)
    runs = _runs(_loud_lines(text, ((_SUSPECT_SCREEN, _suspect_screen),), tmpl, 1)[0], 1)
    if not runs:
        return []
    taken = [(h.start, h.end) for h in det.hits(text, tmpl=tmpl)]
    taken += [(m.start(), m.end()) for m in PLACEHOLDER.finditer(text)]
    taken.sort()
    lines = _Lines(text)
    out: list[Finding] = []
    for a, b in runs:
        for rx in (d._SUSPECT, d._DOMAIN):
            for m in rx.finditer(text, a, b):
                token = m.group(1)
                first = token.split(".", 1)[0]
                if "." in token and hosts.host_kind(token, False) == "public":
                    continue
                if not hosts.looks_like_host(first) or _covered(taken, m.start(1), m.end(1)):
                    continue
                out.append(Finding(*lines.at(m.start(1)), _SUSPECT_CATEGORY))
    return sorted(set(out), key=lambda f: (f.line, f.col))


def _covered(spans: list[tuple[int, int]], start: int, end: int) -> bool:
    i = bisect.bisect_right(spans, (start, 1 << 62)) - 1
    return (i >= 0 and spans[i][0] <= start < spans[i][1]) or any(
        s < end and start < e for s, e in spans[i + 1 : i + 2]
    )
