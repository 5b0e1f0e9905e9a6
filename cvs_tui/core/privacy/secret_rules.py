"""The secret detectors, loaded from `secret_rules.toml` (the rules are data: one entry per shape).

Each rule names the secret by its first matching group; a rule runs only on text holding one of its
needles. ``secret_hits`` yields one hit per secret found, category `token` (or `key` for a private key
body). Values that are clearly not secrets (placeholders, numbers, booleans, `${VAR}` references, masks)
are skipped for the key=value rules.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import resources

from cvs_tui.core.privacy.placeholder import PLACEHOLDER
from cvs_tui.core.privacy.screen import crosses_lines


@dataclass(frozen=True)
class SecretRule:
    id: str
    description: str
    pattern: re.Pattern[str]
    needles: tuple[str, ...]
    category: str = "token"
    skip_plain: bool = False  # a key=value rule: skip values that cannot be secrets
    skip_keys: re.Pattern[str] | None = None  # a key=value rule: keys that name no secret value
    anchors: tuple[str, ...] = ()  # lower-case words a match starts with: the pattern is tried only there


def _load() -> tuple[SecretRule, ...]:
    raw = tomllib.loads(resources.files(__package__).joinpath("secret_rules.toml").read_text("utf-8"))
    rules = []
    for r in raw["rule"]:
        rules.append(
            SecretRule(
                id=r["id"],
                description=r["description"],
                pattern=re.compile(r["regex"]),
                needles=tuple(n.lower() for n in r["needles"]),
                category=r.get("category", "token"),
                skip_plain=bool(r.get("skip_plain", False)),
                skip_keys=re.compile(r["skip_keys"]) if "skip_keys" in r else None,
                anchors=tuple(a.lower() for a in r.get("anchors", ())),
            )
        )
    return tuple(rules)


RULES: tuple[SecretRule, ...] = _load()
# a rule whose match can span lines (a PuTTY key body) sees the whole text; the others one line at a time
WHOLE_TEXT_RULES: tuple[SecretRule, ...] = tuple(r for r in RULES if crosses_lines(r.pattern))
LINE_RULES: tuple[SecretRule, ...] = tuple(r for r in RULES if r not in WHOLE_TEXT_RULES)

_NOT_SECRET = frozenset(
    {"none", "null", "nil", "true", "false", "yes", "no", "on", "off", "undefined", "***"}
)
_KEY_AFTER = re.compile(r"[\"']?[ \t]{0,8}(?:=(?!=)|:(?:[ \t]|$))", re.M)
_NUMBER = re.compile(r"[-+]?[\d.,_]+(?:e[-+]?\d+)?%?", re.I)


def plain_value(value: str) -> bool:
    """A value after a secret-named key that cannot be a secret: a placeholder, a number, a boolean, a
    reference (`$VAR`, `${VAR}`, `<...>`), a mask (`***`), or punctuation only."""
    v = value.strip()
    if len(v) < 3 or v.lower() in _NOT_SECRET or PLACEHOLDER.fullmatch(v) or _NUMBER.fullmatch(v):
        return True
    if v.startswith(("$", "<", "%(")) or set(v) <= set("*xX.-_#•"):
        return True
    return not any(c.isalnum() for c in v)


def _anchored(rule: SecretRule, text: str, low: str) -> Iterable[re.Match[str]]:
    """The rule's matches that start at one of its anchors, left to right (overlapping ones too: a key
    whose value is the next key, `credentials: aws_secret_access_key = v`, leaves that key to match)."""
    starts: list[int] = []
    for a in rule.anchors:
        i = low.find(a)
        while i >= 0:
            starts.append(i)
            i = low.find(a, i + 1)
    for pos in sorted(set(starts)):
        m = rule.pattern.match(text, pos)
        if m is not None:
            yield m


def secret_hits(
    text: str, low: str, rules: Iterable[SecretRule] = RULES
) -> Iterable[tuple[int, int, str, str, str]]:
    """(start, end, category, value, rule id) for every secret in ``text`` (``low`` is its lower case)."""
    for rule in rules:
        if not any(n in low for n in rule.needles):
            continue
        for m in _anchored(rule, text, low) if rule.anchors else _unanchored(rule, text):
            g = next((i for i in range(1, (rule.pattern.groups or 0) + 1) if m.group(i) is not None), 0)
            value = m.group(g)
            if rule.skip_plain:
                if _KEY_AFTER.match(text, m.end(g)):
                    continue  # `credentials: aws_secret_access_key = v`: the value is the next key
                if plain_value(value) or (
                    rule.skip_keys is not None and rule.skip_keys.search(text, m.start(), m.start(g))
                ):
                    continue
            yield m.start(g), m.end(g), rule.category, value, rule.id


def _unanchored(rule: SecretRule, text: str) -> Iterable[re.Match[str]]:
    return rule.pattern.finditer(text)


def holds_secret(value: str) -> bool:
    """Whether a value (an environment variable's, a config value) holds a secret of any shape these
    rules know: a value whose name does not say it is secret is masked all the same (audit 3 PW04)."""
    return next(iter(secret_hits(value, value.lower())), None) is not None
