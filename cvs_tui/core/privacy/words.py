"""One compiled pattern for a set of words (the denylist and the names a text taught), bounded like a
term, as a trie so that a position costs one walk whatever the number of words."""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable

from cvs_tui.core.privacy import detectors as d

_TRIE_MAX = 200  # a longer term joins a plain alternation (the trie's nesting would grow with it)


_Trie = dict[str, "_Trie"]


def _trie(words: Iterable[str]) -> str:
    root: _Trie = {}
    for w in words:
        node = root
        for ch in w:
            node = node.setdefault(ch, {})
        node[""] = {}

    def emit(node: _Trie) -> str:
        alts = [re.escape(ch) + emit(child) for ch, child in sorted(node.items()) if ch]
        if not alts:
            return ""
        body = alts[0] if len(alts) == 1 else "(?:" + "|".join(alts) + ")"
        return f"(?:{body})?" if "" in node else body

    return emit(root)


def words_regex(words: Iterable[str], flags: int) -> re.Pattern[str] | None:
    """One pattern for every word, bounded like a term (no letter or digit on either side), as a trie so
    a position costs one walk whatever the number of words; at one start the longest word wins."""
    return _compiled_words(tuple(sorted(set(words), key=lambda w: (-len(w), w))), flags)


@functools.lru_cache(maxsize=16)  # the detectors of one scrub or check share their term sets
def _compiled_words(ws: tuple[str, ...], flags: int) -> re.Pattern[str] | None:
    if not ws:
        return None
    short = [w for w in ws if len(w) <= _TRIE_MAX]
    long = [re.escape(w) for w in ws if len(w) > _TRIE_MAX]
    edge = d._ALNUM
    try:
        body = "|".join([*long, _trie(short)] if short else long)
        return re.compile(rf"(?<![{edge}])(?:{body})(?![{edge}])", flags)
    except (RecursionError, re.error):  # a pathological word set: the plain alternation, longest first
        body = "|".join(map(re.escape, ws))
        return re.compile(rf"(?<![{edge}])(?:{body})(?![{edge}])", flags)
