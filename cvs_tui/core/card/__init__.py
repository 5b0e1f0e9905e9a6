"""Validation cards: build one from results (``build``), check one (``rules``), the format (``schema``).

docs/card.md describes the format and the mapping from runs to items.
"""

from __future__ import annotations

from cvs_tui.core.card.build import build_card, rederive_problems, validate_card_text
from cvs_tui.core.card.facts import (
    CardSource,
    load_card_source,
    resolve_hardware,
    with_config,
)
from cvs_tui.core.card.rules import card_rules, parse_card
from cvs_tui.core.card.schema import PERFORMANCE_DISCLAIMER, Card, card_to_yaml, load_card_yaml

__all__ = [
    "PERFORMANCE_DISCLAIMER",
    "Card",
    "CardSource",
    "build_card",
    "card_rules",
    "card_to_yaml",
    "load_card_source",
    "load_card_yaml",
    "parse_card",
    "rederive_problems",
    "resolve_hardware",
    "validate_card_text",
    "with_config",
]
