"""`NodeLogParser`: one node's log bytes in, typed events out, incrementally.

Speed comes from scanning whole batches of records at once: step lines are found in one pass over the
batch; every other line kind has an anchor literal and every error signature a set of necessary
literals, all found in one case-folded pass (see ``literals``), and only the records holding them run
the detailed regexes. The passes over every byte (record headers, newlines, literals, step lines, fatal
headers) run in the C scanner when it is built (see ``accel``); the regex code here is the reference it
is tested against and the fallback. Events come out in log order: by record, then its steps, its other
kinds, its error hits.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from operator import itemgetter, sub

from cvs_tui.core.events import ErrorHit, LogEvent, Severity, StepEvent, StepKind
from cvs_tui.core.parse import accel
from cvs_tui.core.parse import dialects as d
from cvs_tui.core.parse.literals import LiteralFinder
from cvs_tui.core.parse.records import RECORD_CAP, Batch, RecordSplitter
from cvs_tui.core.parse.signatures import Signature, compile_signatures

ERROR_TEXT_CAP = 2000  # characters of a record kept in an ErrorHit
_RANK_ERR = 50
_TRAIN = StepKind.TRAIN
_RAMPUP = StepKind.RAMPUP
_FATAL = Severity.FATAL


class NodeLogParser:
    """Parse one node's merged stdout+stderr. ``feed`` any chunking; ``finish`` at end of stream.

    ``error_patterns`` (name -> regex, matched case-insensitively) replaces the built-in default set
    when given; always-on fatal signatures and benign classification apply either way. A pattern that
    does not compile is skipped. ``native``: use the C scanner (True: required, False: never, None: when
    built); the events are the same either way.
    """

    def __init__(
        self,
        error_patterns: dict[str, str] | None = None,
        *,
        native: bool | None = None,
        _use_automaton: bool = True,
    ) -> None:
        self._nat = accel.select(native)
        self.native = self._nat is not None
        self._split = RecordSplitter(self._nat)
        self._sigs: list[Signature] = compile_signatures(error_patterns)
        self._memstats = d.MemStats()
        # one literal finder for the line-kind anchors and the signatures' necessary literals
        literals = [anchor for anchors, _ in d.RULES for anchor in anchors]
        for sig in self._sigs:
            literals.extend(sig.literals or ())
        self._finder = LiteralFinder(literals, use_automaton=_use_automaton, native=self._nat)
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
        self._early_pos, self._early_nonfinite = 0, False

    # -----------------------------------------------------------------------------------------------------
    def _events(self, batch: Batch) -> list[LogEvent]:
        buf, starts, end, lines = batch.buf, batch.starts, batch.end, batch.lines
        n = len(starts) - 1
        longs: list[int] = []
        if end > RECORD_CAP:
            sizes = list(map(sub, starts[1:], starts[:-1]))
            if max(sizes) > RECORD_CAP:
                longs = [i for i in range(n) if sizes[i] > RECORD_CAP]
        early, early_nan = self._early_pos, self._early_nonfinite
        self._early_pos, self._early_nonfinite = 0, False
        if not longs:
            steps, recs, others = self._scan(buf, starts, end, lines, frozenset(), 0, early, early_nan)
            return _merge(steps, recs, others) if others else steps
        # records over the cap are parsed on their first RECORD_CAP bytes, each on its own
        skip = frozenset(longs)
        early0 = 0 if 0 in skip else early
        steps, recs, keyed = self._scan(buf, starts, end, lines, skip, 0, early0, early_nan)
        keyed.extend(((r, 0, k), ev) for k, (r, ev) in enumerate(zip(recs, steps, strict=True)))
        for i in longs:
            rec = buf[starts[i] : starts[i] + RECORD_CAP]
            e0, n0 = (early, early_nan) if i == 0 else (0, False)
            steps, recs, others = self._scan(rec, [0, len(rec)], len(rec), [lines[i]], frozenset(), i, e0, n0)
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
            ev = _make_step(norm, m, 0, sp.pending_line, rampup, {})
            self._early_pos = e
            if ev is not None:
                out.append(ev)
                if ev.loss != ev.loss or ev.loss in (_INF, _NINF):
                    self._early_nonfinite = True
        return out

    def _scan(
        self,
        buf: bytes,
        starts: list[int],
        end: int,
        lines: list[int],
        skip: frozenset[int],
        base: int,
        early: int = 0,
        early_nonfinite: bool = False,
    ) -> tuple[list[LogEvent], list[int], list[tuple[tuple[int, int, int], LogEvent]]]:
        """The records of one buffer: (steps in order, the record of each step, the other events keyed
        (base + record, rank, position) for ordering). Record numbers of steps are relative to the buffer.

        Steps of record 0 that end before ``early`` were already emitted from the unfinished record.
        """
        # 1. train steps: one pass over the whole buffer
        if self._nat is not None:
            steps, recs, nonfinite = self._nat.scan_steps(buf, starts, lines, end, early, skip)
        else:
            steps, recs, nonfinite = _scan_steps_py(buf, starts, lines, end, early, skip)
        if early_nonfinite:
            nonfinite.insert(0, 0)

        # 2. other line kinds and error literals: one case-folded literal pass
        out: list[tuple[tuple[int, int, int], LogEvent]] = []
        append = out.append
        found = self._finder.find(buf, starts, end)
        for r, (_anchors, handler) in enumerate(d.RULES):
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
                else:
                    evs = self._memstats(rec, lines[i])
                for k, ev in enumerate(evs):
                    append(((base + i, 1 + r, k), ev))

        # 3. error signatures
        out.extend(self._errors(buf, starts, end, lines, skip, nonfinite, base, found))
        return steps, recs, out

    def _errors(
        self,
        buf: bytes,
        starts: list[int],
        end: int,
        lines: list[int],
        skip: frozenset[int],
        nonfinite: list[int],
        base: int,
        found: dict[int, set[int]],
    ) -> list[tuple[tuple[int, int, int], LogEvent]]:
        cands: dict[int, set[int]] = {}  # record -> signature indexes to try
        for lit, sig_ids in self._lit_sigs.items():
            for i in found.get(lit, ()):
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
        for i in nonfinite:
            cands.setdefault(i, set())
        flevel = self._f_level(buf, starts, end, skip)
        for i in flevel:
            cands.setdefault(i, set())
        if not cands:
            return []
        out: list[tuple[tuple[int, int, int], LogEvent]] = []
        nonfinite_set = set(nonfinite)
        for i in sorted(cands):
            s = starts[i]
            rec = buf[s : min(starts[i + 1], s + RECORD_CAP)]
            matched = [self._sigs[k] for k in sorted(cands[i]) if self._sigs[k].regex.search(rec)]
            benign = any(sig.origin == "benign" for sig in matched)
            names: list[tuple[str, Severity, str]] = []
            if i in nonfinite_set:
                names.append(("non-finite loss", _FATAL, "always"))
            if i in flevel:
                names.append(("fatal log line", _FATAL, "always"))
            for sig in matched:
                if benign and sig.origin in ("builtin", "config"):
                    continue  # a benign line's wording must not fail a run
                names.append((sig.name, sig.severity, sig.origin))
            if not names:
                continue
            # one line, whitespace runs collapsed: the same for a log, its flattened or CRLF copy
            text = " ".join(rec.decode("utf-8", "replace").split())[:ERROR_TEXT_CAP]
            seen: set[str] = set()
            for k, (name, sev, origin) in enumerate(names):
                if name in seen:
                    continue
                seen.add(name)
                out.append(((base + i, _RANK_ERR, k), ErrorHit(name, sev, text, lines[i], origin)))
        return out

    def _f_level(self, buf: bytes, starts: list[int], end: int, skip: frozenset[int]) -> set[int]:
        """Records whose absl or TF/XLA header has level F (glog FATAL: the process aborts)."""
        if self._nat is not None:
            return self._nat.fatal_records(buf, starts, end, skip)
        out: set[int] = set()
        for regex in (d.F_GLOG, d.F_TF):
            for m in regex.finditer(buf, 0, end):
                h = m.start(1)
                i = bisect_right(starts, h) - 1
                if starts[i] == h and i not in skip:
                    out.add(i)
        return out

    internal_errors = 0  # feeds whose unfinished record was dropped after an unexpected failure
    _early_pos = 0  # steps of the unfinished record up to here were already emitted
    _early_nonfinite = False


_GLOG_LEVELS = frozenset(b"IWEF")
_INF = float("inf")
_NINF = float("-inf")


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


def _scan_steps_py(
    buf: bytes, starts: list[int], lines: list[int], end: int, early: int, skip: frozenset[int]
) -> tuple[list[LogEvent], list[int], list[int]]:
    """Steps of ``buf[early:end]`` inside one record each, not in ``skip``: (events, records, records
    with a non-finite loss). The reference for the C ``scan_steps``."""
    steps: list[LogEvent] = []
    recs: list[int] = []
    nonfinite: list[int] = []
    src_cache: dict[bytes, str] = {}
    rampup = buf.find(b"[Rampup", 0, end) != -1  # spares most steps the two suffix checks
    for m in d.STEP.finditer(buf, early, end):
        p = m.start()
        i = bisect_right(starts, p) - 1
        if (skip and i in skip) or m.end() > starts[i + 1]:
            continue
        ev = _make_step(buf, m, starts[i], lines[i], rampup, src_cache)
        if ev is None:
            continue
        steps.append(ev)
        recs.append(i)
        lossf = ev.loss
        if lossf != lossf or lossf in (_INF, _NINF):
            nonfinite.append(i)
    return steps, recs, nonfinite


def _make_step(
    buf: bytes, m: re.Match[bytes], s: int, line: int, rampup: bool, src_cache: dict[bytes, str]
) -> StepEvent | None:
    """The StepEvent of one step-regex match in the record starting at ``s`` (None if a value is bad)."""
    p = m.start()
    st, sec, sl, tf, tok, tw, loss, ex = m.groups()
    # absl header: the source is the last word before the first "] ", right before the step
    if buf[s] in _GLOG_LEVELS and buf.find(b"] ", s, p) == p - 2 and buf[s + 1 : s + 5].isdigit():
        raw = buf[buf.rfind(b" ", s, p - 2) + 1 : p - 2]
        source = src_cache.get(raw)
        if source is None:
            source = src_cache[raw] = d._src(raw)
        stamp = None  # absl prints no year
    else:
        _lvl, source, stamp = d.header_info(buf[s:p])
    kind = _TRAIN
    if rampup and (buf.endswith(d.RAMPUP_TAG[0], s, p) or buf.endswith(d.RAMPUP_TAG[1], s, p)):
        kind = _RAMPUP
    try:
        return StepEvent(
            int(st),
            float(loss),
            line,
            kind,
            float(sec),
            float(tf) if tf is not None else None,
            float(tok) if tok is not None else None,
            float(tw),
            int(sl) if sl is not None else None,
            d.step_extras(ex) if ex else {},
            stamp,
            source,
        )
    except ValueError:  # a value that is not a number: not a step line after all
        return None


def _recover(split: RecordSplitter) -> RecordSplitter:
    """After an internal failure, drop the unfinished record and go on with the next bytes."""
    fresh = RecordSplitter(split._native)
    fresh._line0 = split.newlines + 1
    fresh.newlines = split.newlines
    fresh.total_bytes = split.total_bytes
    fresh.truncated_bytes = split.truncated_bytes
    return fresh


def parse_log_bytes(data: bytes, error_patterns: dict[str, str] | None = None) -> list[LogEvent]:
    """All events of a complete log held in memory."""
    parser = NodeLogParser(error_patterns)
    return parser.feed(data) + parser.finish()
