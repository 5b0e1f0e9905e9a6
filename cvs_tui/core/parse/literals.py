"""Which records hold which literals (ASCII case folded): the prefilter in front of every detailed regex.

The C scanner's Aho-Corasick pass folds case as it reads; otherwise a lower-cased copy is searched, by
pyahocorasick when installed or one ``bytes.find`` loop per literal (the same answer, slower).
"""

from __future__ import annotations

from bisect import bisect_right
from types import ModuleType

try:
    import ahocorasick as _ahocorasick
except ImportError:  # optional accelerator
    _ahocorasick = None


class LiteralFinder:
    """Finds, for each literal, the records (indexes into ``starts``) whose text holds it."""

    def __init__(
        self, literals: list[bytes], *, use_automaton: bool = True, native: ModuleType | None = None
    ) -> None:
        self.literals = list(dict.fromkeys(lit for lit in literals if lit))
        self._lens = [len(lit) for lit in self.literals]
        self._automaton = None
        self._scanner = native.LiteralScanner(self.literals) if native is not None else None
        if self._scanner is None and use_automaton and _ahocorasick is not None and self.literals:
            auto = _ahocorasick.Automaton()
            for k, lit in enumerate(self.literals):
                auto.add_word(lit.decode("latin-1"), k)
            auto.make_automaton()
            self._automaton = auto

    @property
    def accelerated(self) -> bool:
        return self._automaton is not None or self._scanner is not None

    def index(self, literal: bytes) -> int:
        return self.literals.index(literal)

    def find(self, text: bytes, starts: list[int], end: int) -> dict[int, set[int]]:
        """literal index -> record indexes, for records of ``text[:end]`` (record i = starts[i]..starts[i+1]).

        ``text`` is matched with ASCII letters folded to lower case (the literals are lower case). A literal
        that straddles two records is attributed to the one it starts in; callers re-check the record
        with the real regex, so a spurious candidate costs time, never a wrong event.
        """
        if self._scanner is not None:
            return self._scanner.find(text, starts, end)
        text = text[:end].lower()
        out: dict[int, set[int]] = {}
        if self._automaton is not None:
            lens = self._lens
            last_k = last_i = -1
            for e, k in self._automaton.iter(text[:end].decode("latin-1")):
                i = bisect_right(starts, e - lens[k] + 1) - 1
                if k == last_k and i == last_i:
                    continue
                last_k, last_i = k, i
                rec = out.get(k)
                if rec is None:
                    out[k] = {i}
                else:
                    rec.add(i)
            return out
        for k, lit in enumerate(self.literals):
            pos = text.find(lit, 0, end)
            while pos != -1:
                i = bisect_right(starts, pos) - 1
                out.setdefault(k, set()).add(i)
                pos = text.find(lit, starts[i + 1], end)
        return out
