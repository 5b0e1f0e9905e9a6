"""The placeholders a scrub writes (`<host-1>`, `<token>`, ...): never private themselves. A module of its
own, so the secret rules (which the config layer reads to mask values) need nothing else of privacy."""

from __future__ import annotations

import re

PLACEHOLDER = re.compile(
    r"<(?:host|ip|mac|user|home|path|container|bucket|email|token|job|private|private-key)(?:-\d+)?>"
)
