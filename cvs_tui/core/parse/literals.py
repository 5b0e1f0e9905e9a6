"""Which records hold which literals (ASCII case folded): the prefilter in front of every detailed regex.

The scanner's ``LiteralScanner`` does the work: in C a bitmap of hashed four-byte prefixes rejects almost
every position and the few left are compared with the literals of their hash bucket (not an automaton);
in pure Python one ``bytes.find`` loop per literal over a lower-cased copy. Both give the same answer.
"""

from __future__ import annotations

from types import ModuleType


class LiteralFinder:
    """Finds, for each literal, the records (indexes into ``starts``) whose text holds it."""

    def __init__(self, literals: list[bytes], scanner: ModuleType) -> None:
        self.literals = list(dict.fromkeys(lit for lit in literals if lit))
        self._scanner = scanner.LiteralScanner(self.literals)

    def index(self, literal: bytes) -> int:
        return self.literals.index(literal)

    def find(self, text: bytes, starts: list[int], end: int) -> dict[int, set[int]]:
        """literal index -> record indexes, for records of ``text[:end]`` (record i = starts[i]..starts[i+1]).

        ``text`` is matched with ASCII letters folded to lower case (the literals are lower case). A literal
        that straddles two records is attributed to the one it starts in; callers re-check the record
        with the real regex, so a spurious candidate costs time, never a wrong event.
        """
        found: dict[int, set[int]] = self._scanner.find(text, starts, end)
        return found
