"""Digit-blind line screening: which lines of a text can hold a private value at all.

A log is mostly lines that differ only in their digits (step lines). The *template* of a line is the line
with every ASCII digit turned into `0` (lengths kept). For each detector pattern a *digit-blind* copy is
derived from its parse tree: a class or literal that accepts some digit accepts every digit, and a
negative look-around that tells digits apart is dropped. That copy cannot tell one digit from another, so
it matches a template whenever the original matches any line with that template: a template it does not
match proves that no line of that template holds a hit of the original. One test per distinct template
(cached) then screens every line; only the lines that may hold something are scanned for real, so a
log costs a few C-level passes (the template, a line split, one dict look-up per line) plus the real
scan of the few lines that need it. Patterns that can match a line break are not line-local and are run
over the whole text instead (``crosses_lines``).

Deriving the copy reads the pattern's parse tree (`re._parser`); a construct this module does not know
yields no copy, and the rule is then run on every line: slower, never blind.
"""

from __future__ import annotations

import re
from typing import Any

try:  # CPython's own regex parser and compiler (3.11+): private, so every use is guarded
    from re import _compiler as _sre_compiler  # type: ignore[attr-defined]
    from re import _constants as _c  # type: ignore[attr-defined]
    from re import _parser as _sre_parser  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - another Python: no screening, every line is scanned
    _sre_parser = _sre_compiler = _c = None

DIGITS_TO_ZERO = str.maketrans("123456789", "000000000")
_DIGITS = frozenset(range(48, 58))
_NL = 10


class _Opaque(Exception):
    """A pattern construct the screen does not model."""


def template(text: str) -> str:
    """``text`` with every ASCII digit made `0`: lines that differ only in digits share one template."""
    return text.translate(DIGITS_TO_ZERO)


def _class_members(items: list[tuple[Any, Any]], chars: frozenset[int]) -> set[int]:
    """Which of ``chars`` (code points) the class ``items`` (an IN body) accepts."""
    neg = bool(items) and items[0][0] is _c.NEGATE
    got: set[int] = set()
    for op, av in items[1:] if neg else items:
        if op is _c.LITERAL:
            got |= {av} & chars
        elif op is _c.RANGE:
            got |= {ch for ch in chars if av[0] <= ch <= av[1]}
        elif op is _c.CATEGORY:
            got |= {ch for ch in chars if _category_has(av, ch)}
        else:
            raise _Opaque(op)
    return set(chars) - got if neg else got


def _category_has(cat: Any, ch: int) -> bool:
    c = chr(ch)
    table = {
        _c.CATEGORY_DIGIT: c.isdigit(),
        _c.CATEGORY_NOT_DIGIT: not c.isdigit(),
        _c.CATEGORY_SPACE: c.isspace(),
        _c.CATEGORY_NOT_SPACE: not c.isspace(),
        _c.CATEGORY_WORD: c.isalnum() or c == "_",
        _c.CATEGORY_NOT_WORD: not (c.isalnum() or c == "_"),
        _c.CATEGORY_LINEBREAK: c == "\n",
        _c.CATEGORY_NOT_LINEBREAK: c != "\n",
    }
    if cat not in table:
        raise _Opaque(cat)
    return table[cat]


def _sub(state: Any, data: list[tuple[Any, Any]]) -> Any:
    return _sre_parser.SubPattern(state, data)


def _blind(sub: Any) -> tuple[list[tuple[Any, Any]], bool]:
    """(digit-blind copy of ``sub``'s items, whether anything changed)."""
    out: list[tuple[Any, Any]] = []
    changed = False
    digit = (_c.IN, [(_c.RANGE, (48, 57))])
    for op, av in sub:
        if op is _c.LITERAL:
            if av in _DIGITS:
                out.append(digit)
                changed = True
            else:
                out.append((op, av))
        elif op is _c.NOT_LITERAL:
            if av in _DIGITS:
                out.append((_c.IN, [(_c.NEGATE, None), (_c.LITERAL, _NL)]))
                changed = True
            else:
                out.append((op, av))
        elif op is _c.IN:
            got = _class_members(av, _DIGITS)
            if got and got != _DIGITS:  # some digits only: every digit
                out.append((_c.BRANCH, (None, [_sub(sub.state, [(op, av)]), _sub(sub.state, [digit])])))
                changed = True
            else:
                out.append((op, av))
        elif op in (_c.ANY, _c.AT):
            out.append((op, av))
        elif op is _c.BRANCH:
            alts = []
            for alt in av[1]:
                items, ch = _blind(alt)
                alts.append(_sub(sub.state, items))
                changed |= ch
            out.append((op, (av[0], alts)))
        elif op is _c.SUBPATTERN:
            items, ch = _blind(av[3])
            out.append((op, (*av[:3], _sub(sub.state, items))))
            changed |= ch
        elif op in (_c.MAX_REPEAT, _c.MIN_REPEAT):
            items, ch = _blind(av[2])
            out.append((op, (av[0], av[1], _sub(sub.state, items))))
            changed |= ch
        elif op is _c.ASSERT:
            items, ch = _blind(av[1])
            out.append((op, (av[0], _sub(sub.state, items))))
            changed |= ch
        elif op is _c.ASSERT_NOT:
            _, ch = _blind(av[1])
            if ch:  # it tells digits apart: dropping it only lets more through
                changed = True
            else:
                out.append((op, av))
        elif op in (_c.ATOMIC_GROUP, _c.POSSESSIVE_REPEAT):
            body = av if op is _c.ATOMIC_GROUP else av[2]
            if _blind(body)[1]:
                raise _Opaque(op)  # a wider body inside an atomic group can fail where the original matches
            out.append((op, av))
        else:
            raise _Opaque(op)
    return out, changed


def digit_blind(rx: re.Pattern[str]) -> re.Pattern[str] | None:
    """A pattern that matches a line's template whenever ``rx`` matches the line (see the module
    docstring); None when ``rx`` uses a construct this module does not model."""
    if _sre_parser is None:
        return None
    try:
        tree = _sre_parser.parse(rx.pattern, rx.flags)
        items, changed = _blind(tree)
        if not changed:
            return rx
        tree.data = items
        tree.width = None
        compiled: re.Pattern[str] = _sre_compiler.compile(tree, rx.flags)
        return compiled
    except (_Opaque, re.error, AttributeError, TypeError, ValueError):
        return None


def _can_take_newline(sub: Any, flags: int) -> bool:
    for op, av in sub:
        if (op is _c.LITERAL and av == _NL) or (op is _c.NOT_LITERAL and av != _NL):
            return True
        if op is _c.IN and _class_members(av, frozenset({_NL})):
            return True
        if op is _c.ANY and flags & re.DOTALL:
            return True
        if op is _c.BRANCH and any(_can_take_newline(alt, flags) for alt in av[1]):
            return True
        if op is _c.SUBPATTERN and _can_take_newline(av[3], flags | av[1]):
            return True
        if op in (_c.MAX_REPEAT, _c.MIN_REPEAT, _c.POSSESSIVE_REPEAT) and _can_take_newline(av[2], flags):
            return True
        if op in (_c.ASSERT, _c.ASSERT_NOT) and _can_take_newline(av[1], flags):
            return True
        if op is _c.ATOMIC_GROUP and _can_take_newline(av, flags):
            return True
        if op in (_c.GROUPREF, _c.GROUPREF_EXISTS, _c.GROUPREF_IGNORE):
            return True
    return False


def crosses_lines(rx: re.Pattern[str]) -> bool:
    """Whether ``rx`` (or one of its look-arounds) can consume a line break: such a pattern is not
    line-local and must see the whole text. True when it cannot be told."""
    if _sre_parser is None:
        return True
    try:
        tree = _sre_parser.parse(rx.pattern, rx.flags)
        return _can_take_newline(tree, rx.flags | tree.state.flags)
    except (_Opaque, re.error, AttributeError, TypeError, ValueError):
        return True
