"""`NodeLogParser`: one node's log bytes in, typed events out, incrementally.

Speed comes from scanning whole batches of records at once: step lines are found in one pass over the
batch; every other line kind has an anchor literal and every error signature a set of necessary
literals, all found in one case-folded pass (see ``literals``), and only the records holding them run
the detailed regexes. The passes over every byte (record headers, newlines, literals, step lines, fatal
headers) run in the byte scanner (``accel.scanner``: the C module, or its pure-Python twin ``_pyscan``).
Events come out in log order: by record, then its steps, its other kinds, its error hits.

Error signatures are judged per physical line: a record may hold several (an unheadered NCCL or HIP line
is folded into the record above it), and a benign line's wording vetoes a default or config hit only on
its own line. A hit names the line that matched and carries its text.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from operator import itemgetter, sub

from cvs_tui.core.events import ErrorHit, LogEvent, Severity
from cvs_tui.core.parse import _pyscan, accel
from cvs_tui.core.parse import dialects as d
from cvs_tui.core.parse.literals import LiteralFinder
from cvs_tui.core.parse.records import RECORD_CAP, Batch, RecordSplitter
from cvs_tui.core.parse.signatures import Signature, compile_signatures
from cvs_tui.core.parse.tracebacks import TRACEBACK, exception_in_line, exception_line

ERROR_TEXT_CAP = 2000  # characters of a line kept in an ErrorHit
_RANK_ERR = 50
_FATAL = Severity.FATAL
# hits the parser makes itself (origin "always"), before the signatures' in a line's order
NONFINITE_LOSS = "non-finite loss"
NONFINITE_THROUGHPUT = "non-finite throughput"
FATAL_LEVEL = "fatal log line"
_LINE_BREAKS = re.compile(rb"[\r\n]+")
# an XLA/absl status code: where a wrapped error spells out its cause, often on a continuation line
# ("... cluster registration failed. ...\n\nOriginal error: DEADLINE_EXCEEDED: Barrier timed out")
_STATUS = re.compile(
    rb"\b(?:CANCELLED|UNKNOWN|INVALID_ARGUMENT|DEADLINE_EXCEEDED|NOT_FOUND|ALREADY_EXISTS|PERMISSION_DENIED"
    rb"|RESOURCE_EXHAUSTED|FAILED_PRECONDITION|ABORTED|OUT_OF_RANGE|UNIMPLEMENTED|INTERNAL|UNAVAILABLE"
    rb"|DATA_LOSS|UNAUTHENTICATED): "
)


class NodeLogParser:
    """Parse one node's merged stdout+stderr. ``feed`` any chunking; ``finish`` at end of stream.

    ``error_patterns`` (name -> regex, matched case-insensitively) replaces the built-in default set
    when given; always-on fatal signatures and benign classification apply either way. A pattern that
    does not compile is skipped. ``native``: use the C scanner (True: required, False: never, None: when
    built); the events are the same either way.
    """

    def __init__(self, error_patterns: dict[str, str] | None = None, *, native: bool | None = None) -> None:
        self._scanner = accel.select(native)
        self.native = accel.is_native(self._scanner)
        self._split = RecordSplitter(self._scanner)
        self.internal_errors = 0  # feeds whose unfinished record was dropped after an unexpected failure
        self._early_pos = 0  # steps of the unfinished record up to here were already emitted
        # positions (in the unfinished record) of those early steps with a non-finite loss / rate
        self._early_nan: list[int] = []
        self._early_rate: list[int] = []
        self._sigs: list[Signature] = compile_signatures(error_patterns)
        self._memstats = d.MemStats()
        self._processes = d.ProcessCount()
        # one literal finder for the line-kind anchors and the signatures' necessary literals
        literals = [anchor for anchors, _ in d.RULES for anchor in anchors]
        for sig in self._sigs:
            literals.extend(sig.literals or ())
        self._finder = LiteralFinder(literals, self._scanner)
        self._rule_lits = [[self._finder.index(a) for a in anchors] for anchors, _ in d.RULES]
        # literal index -> signatures that need it; signatures without a usable literal scan fully
        self._lit_sigs: dict[int, list[int]] = {}
        self._full_sigs: list[int] = []
        for k, sig in enumerate(self._sigs):
            if sig.literals is None:
                self._full_sigs.append(k)
            else:
                for lit in sig.literals:
                    self._lit_sigs.setdefault(self._finder.index(lit), []).append(k)

    @property
    def lines_seen(self) -> int:
        return self._split.lines_seen

    @property
    def truncated_bytes(self) -> int:
        """Bytes dropped from records longer than the record cap (never parsed)."""
        return self._split.truncated_bytes

    def feed(self, data: bytes) -> list[LogEvent]:
        try:
            batch = self._split.feed(bytes(data))
            out = self._events(batch) if batch is not None else []
            early = self._early_steps()
            return out + early if early else out
        except Exception:  # never let odd input take the caller down; the bytes are still logged
            self._reset()
            return []

    def finish(self) -> list[LogEvent]:
        try:
            batch = self._split.finish()
            return self._events(batch) if batch is not None else []
        except Exception:
            self._reset()
            return []

    def _reset(self) -> None:
        self.internal_errors += 1
        self._split = _recover(self._split)
        self._early_pos, self._early_nan, self._early_rate = 0, [], []

    # -----------------------------------------------------------------------------------------------------
    def _events(self, batch: Batch) -> list[LogEvent]:
        buf, starts, end, lines, orig = batch.buf, batch.starts, batch.end, batch.lines, batch.orig
        n = len(starts) - 1
        longs: list[int] = []
        if end > RECORD_CAP:
            sizes = list(map(sub, starts[1:], starts[:-1]))
            if max(sizes) > RECORD_CAP:
                longs = [i for i in range(n) if sizes[i] > RECORD_CAP]
        early = _Early(self._early_pos, self._early_nan, self._early_rate)
        self._early_pos, self._early_nan, self._early_rate = 0, [], []
        if not longs:
            steps, recs, others = self._scan(buf, orig, starts, end, lines, frozenset(), 0, early)
            return _merge(steps, recs, others) if others else steps
        # records over the cap are parsed on their first RECORD_CAP bytes, each on its own
        skip = frozenset(longs)
        early0 = _NO_EARLY if 0 in skip else early
        steps, recs, keyed = self._scan(buf, orig, starts, end, lines, skip, 0, early0)
        keyed.extend(((r, 0, k), ev) for k, (r, ev) in enumerate(zip(recs, steps, strict=True)))
        for i in longs:
            s = starts[i]
            rec, rec_orig = buf[s : s + RECORD_CAP], orig[s : s + RECORD_CAP]
            e0 = early if i == 0 else _NO_EARLY
            steps, recs, others = self._scan(
                rec, rec_orig, [0, len(rec)], len(rec), [lines[i]], frozenset(), i, e0
            )
            keyed.extend(((i, 0, k), ev) for k, ev in enumerate(steps))
            keyed.extend(others)
        keyed.sort(key=itemgetter(0))
        return [ev for _, ev in keyed]

    def _early_steps(self) -> list[LogEvent]:
        """Steps of the unfinished record whose line is complete, so a live view need not wait for the
        next record. Flattened logs have no line ends and wait; the events are the same either way."""
        sp = self._split
        norm, orig = sp.pending
        if len(norm) <= self._early_pos or norm.find(b"completed step: ", self._early_pos) == -1:
            return []
        out: list[LogEvent] = []
        rampup = norm.find(b"[Rampup") != -1
        for m in d.STEP.finditer(norm, self._early_pos):
            e = m.end()
            if e > RECORD_CAP or e >= len(orig) or orig[e] not in (10, 13):
                break
            ev = _pyscan.make_step(norm, m, 0, sp.pending_line, rampup, {})
            self._early_pos = e
            if ev is not None:
                out.append(ev)
                if _pyscan.not_finite(ev.loss):
                    self._early_nan.append(m.start())
                if _pyscan.not_finite(ev.tflops_per_device) or _pyscan.not_finite(ev.tokens_per_device):
                    self._early_rate.append(m.start())
        return out

    def _scan(
        self,
        buf: bytes,
        orig: bytes,
        starts: list[int],
        end: int,
        lines: list[int],
        skip: frozenset[int],
        base: int,
        early: _Early,
    ) -> tuple[list[LogEvent], list[int], list[tuple[tuple[int, int, int], LogEvent]]]:
        """The records of one buffer: (steps in order, the record of each step, the other events keyed
        (base + record, rank, position) for ordering). Record numbers of steps are relative to the buffer.

        Steps of record 0 that end before ``early.pos`` were already emitted from the unfinished record.
        """
        # 1. train steps: one pass over the whole buffer
        steps, recs, nonfinite, bad_rate = self._scanner.scan_steps(buf, starts, lines, end, early.pos, skip)
        if early.nan:
            nonfinite = early.nan + nonfinite
        if early.rate:
            bad_rate = early.rate + bad_rate

        # 2. other line kinds and error literals: one case-folded literal pass
        out: list[tuple[tuple[int, int, int], LogEvent]] = []
        append = out.append
        found = self._finder.find(buf, starts, end)
        # most batches (step lines only) hold no literal at all: nothing to look up per rule then
        for r, (anchors, handler) in enumerate(d.RULES if found else ()):
            lits = self._rule_lits[r]
            found_recs = found.get(lits[0])
            for lit in lits[1:]:
                more = found.get(lit)
                if more:
                    found_recs = more if not found_recs else found_recs | more
            if not found_recs:
                continue
            for i in sorted(found_recs):
                if i in skip:
                    continue
                s = starts[i]
                rec = buf[s : min(starts[i + 1], s + RECORD_CAP)]
                if handler is not None:
                    evs = handler(rec, lines[i])
                elif r == 0:  # profiler steps carry the header's source
                    _lvl, source, stamp = d.header_info(rec)
                    evs = d.profiler_steps(rec, lines[i], source, stamp)
                elif anchors is d.PROCESS_ANCHORS:
                    evs = self._processes(rec, lines[i])
                else:
                    evs = self._memstats(rec, lines[i])
                for k, ev in enumerate(evs):
                    append(((base + i, 1 + r, k), ev))

        # 3. error signatures: the parser's own fatal hits (at a position) and the signatures' candidates
        own: dict[int, list[tuple[int, str]]] = {}
        for name, positions in ((NONFINITE_LOSS, nonfinite), (NONFINITE_THROUGHPUT, bad_rate)):
            for p in positions:
                own.setdefault(bisect_right(starts, p) - 1, []).append((p, name))
        for i in self._scanner.fatal_records(buf, starts, end, skip):
            own.setdefault(i, []).append((starts[i], FATAL_LEVEL))
        out.extend(self._errors(buf, orig, starts, end, lines, skip, own, base, found))
        return steps, recs, out

    def _errors(
        self,
        buf: bytes,
        orig: bytes,
        starts: list[int],
        end: int,
        lines: list[int],
        skip: frozenset[int],
        own: dict[int, list[tuple[int, str]]],
        base: int,
        found: dict[int, set[int]],
    ) -> list[tuple[tuple[int, int, int], LogEvent]]:
        cands: dict[int, set[int]] = {}  # record -> signature indexes to try
        for lit, recs in found.items():  # the literals found, mostly none (not every signature's)
            sig_ids = self._lit_sigs.get(lit)
            if sig_ids is None:
                continue
            for i in recs:
                if i not in skip:
                    cands.setdefault(i, set()).update(sig_ids)
        for k in self._full_sigs:
            regex = self._sigs[k].regex
            pos = 0
            while pos < end:
                m = regex.search(buf, pos, end)
                if m is None or m.start() >= end:
                    break
                i = bisect_right(starts, m.start()) - 1
                if i not in skip:
                    cands.setdefault(i, set()).add(k)
                pos = starts[i + 1]
        for i in own:
            cands.setdefault(i, set())
        if not cands:
            return []
        out: list[tuple[tuple[int, int, int], LogEvent]] = []
        for i in sorted(cands):
            s = starts[i]
            e = min(starts[i + 1], s + RECORD_CAP)
            rec = buf[s:e]
            matched: list[tuple[Signature, int]] = []
            for k in sorted(cands[i]):
                m = self._sigs[k].regex.search(rec)
                if m is not None:
                    matched.append((self._sigs[k], m.start()))
            mine = [(p - s, name) for p, name in own.get(i, ())]
            for k, hit in enumerate(judge_record(rec, orig[s:e], lines[i], matched, mine)):
                out.append(((base + i, _RANK_ERR, k), hit))
        return out


class _Early:
    """What ``_early_steps`` already emitted from the unfinished record: steps up to ``pos``, and the
    positions of those with a non-finite loss or rate (their hits come with the complete record)."""

    __slots__ = ("nan", "pos", "rate")

    def __init__(self, pos: int, nan: list[int], rate: list[int]) -> None:
        self.pos, self.nan, self.rate = pos, nan, rate


_NO_EARLY = _Early(0, [], [])


def judge_record(
    rec: bytes, orig: bytes, line0: int, matched: list[tuple[Signature, int]], own: list[tuple[int, str]]
) -> list[ErrorHit]:
    """The hits of one record, judged per physical line (``\\n`` or ``\\r`` in ``orig``).

    ``matched``: the signatures that match the record (with where); ``own``: (position, name) of the
    parser's fatal hits. A benign signature vetoes a builtin or config hit only on the line both match;
    a hit reports the first line it (still) stands on, with that line's text. Each name once per record.
    A traceback is one incident: its hit and every hit after its header stand on its exception line, and
    the traceback hit's text is that line (see ``tracebacks``).
    """
    segs = _segments(orig)
    if len(segs) == 1:
        return _judge_line(rec, line0, [sig for sig, _ in matched], [name for _, name in own])
    heads = [a for a, _ in segs]
    found: list[tuple[int, int, str, Severity, str]] = []  # (segment, order, name, severity, origin)
    order = 0
    for p, name in own:
        found.append((max(0, bisect_right(heads, p) - 1), order, name, _FATAL, "always"))
        order += 1
    on: list[list[int]] = []
    for sig, at in matched:
        hit_segs = [j for j, (a, b) in enumerate(segs) if sig.regex.search(rec[a:b])]
        # a match that spans a line break stands on the line where it starts
        on.append(hit_segs or [max(0, bisect_right(heads, at) - 1)])
    benign = {j for (sig, _), where in zip(matched, on, strict=True) if sig.origin == "benign" for j in where}
    for (sig, _), where in zip(matched, on, strict=True):
        if sig.origin in ("builtin", "config"):
            where = [j for j in where if j not in benign]  # a benign line's wording must not fail a run
            if not where:
                continue
        found.append((where[0], order, sig.name, sig.severity, sig.origin))
        order += 1
    found.sort()
    tb_text = ""
    head = next((j for j, _o, name, _s, origin in found if name == TRACEBACK and origin == "always"), None)
    if head is not None and (exc := exception_line(orig, segs, head)) is not None:
        at, tb_text = exc
        # the traceback hit leads its incident: its text is the exception line
        moved = [(at if j >= head else j, -1 if n == TRACEBACK else o, n, s, g) for j, o, n, s, g in found]
        found = sorted(moved)
    out: list[ErrorHit] = []
    seen: set[str] = set()
    for j, _order, name, sev, origin in found:
        if name in seen:
            continue
        seen.add(name)
        a, b = segs[j]
        if name == TRACEBACK and tb_text:
            text = tb_text[:ERROR_TEXT_CAP]
        else:
            # one line, whitespace runs collapsed: the same for a log and its CRLF copy
            text = " ".join(rec[a:b].decode("utf-8", "replace").split())
            if (status := _status_line(rec, segs, j)) is not None:
                text = f"{text} {status}"
            text = text[:ERROR_TEXT_CAP]
        out.append(ErrorHit(name, sev, text, line0 + orig.count(b"\n", 0, a), origin))
    return out


def _status_line(rec: bytes, segs: list[tuple[int, int]], j: int) -> str | None:
    """The first later line of the record that names a status code, when the hit's line ``j`` names
    none: the wrapped error's cause, which the hit's text then carries too."""
    a, b = segs[j]
    if _STATUS.search(rec, a, b) is not None:
        return None
    for a, b in segs[j + 1 :]:
        if _STATUS.search(rec, a, b) is not None:
            return " ".join(rec[a:b].decode("utf-8", "replace").split())
    return None


def _judge_line(rec: bytes, line: int, matched: list[Signature], own: list[str]) -> list[ErrorHit]:
    """``judge_record`` for a record of one physical line."""
    benign = any(sig.origin == "benign" for sig in matched)
    names = [(name, _FATAL, "always") for name in own]
    for sig in matched:
        if not (benign and sig.origin in ("builtin", "config")):  # a benign line's wording must not fail
            names.append((sig.name, sig.severity, sig.origin))
    if not names:
        return []
    text = " ".join(rec.decode("utf-8", "replace").split())[:ERROR_TEXT_CAP]
    tb_text = exception_in_line(rec) if any(n == TRACEBACK for n, _s, _o in names) else None
    out: list[ErrorHit] = []
    seen: set[str] = set()
    for name, sev, origin in names:
        if name not in seen:
            seen.add(name)
            hit_text = tb_text[:ERROR_TEXT_CAP] if name == TRACEBACK and tb_text else text
            out.append(ErrorHit(name, sev, hit_text, line, origin))
    return out


def _segments(orig: bytes) -> list[tuple[int, int]]:
    """(start, end) of each non-empty physical line of a record as received; the whole record when it
    holds no line break (a one-line record, or a flattened log)."""
    body = len(orig.rstrip())
    if orig.find(b"\n", 0, body) == -1 and orig.find(b"\r", 0, body) == -1:
        return [(0, len(orig))]  # most records: one line and its line end
    segs: list[tuple[int, int]] = []
    a = 0
    for m in _LINE_BREAKS.finditer(orig):
        if m.start() > a:
            segs.append((a, m.start()))
        a = m.end()
    if a < len(orig):
        segs.append((a, len(orig)))
    return segs or [(0, len(orig))]


def _merge(
    steps: list[LogEvent], recs: list[int], others: list[tuple[tuple[int, int, int], LogEvent]]
) -> list[LogEvent]:
    """Steps (in order, ``recs[k]`` the record of ``steps[k]``) and the few other events, in log order: a
    record's steps come before its other events."""
    others.sort(key=itemgetter(0))
    out: list[LogEvent] = []
    pos = 0
    for key, ev in others:
        cut = bisect_right(recs, key[0], pos)
        if cut > pos:
            out.extend(steps[pos:cut])
            pos = cut
        out.append(ev)
    out.extend(steps[pos:])
    return out


def _recover(split: RecordSplitter) -> RecordSplitter:
    """After an internal failure, drop the unfinished record and go on with the next bytes."""
    fresh = RecordSplitter(split.scanner)
    fresh._line0 = split.newlines + 1
    fresh.newlines = split.newlines
    fresh.total_bytes = split.total_bytes
    fresh.truncated_bytes = split.truncated_bytes
    return fresh


def parse_log_bytes(data: bytes, error_patterns: dict[str, str] | None = None) -> list[LogEvent]:
    """All events of a complete log held in memory."""
    parser = NodeLogParser(error_patterns)
    return parser.feed(data) + parser.finish()
