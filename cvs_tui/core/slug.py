"""A run key as a file-name-safe slug (``BS=2,SL=128`` -> ``BS_2_SL_128``): run folders, logs, configs.

Its own module so that readers of a run folder (attach, the TUI) need not import the config models.
"""

from __future__ import annotations

import re


def slugify(key: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", key).strip("_")
