"""Where the shipped configs live: inside the wheel, or the repository's `configs/` folder."""

from __future__ import annotations

from pathlib import Path

import cvs_tui

THRESHOLD_SUFFIX = "_threshold.json"


def shipped_configs_dir() -> Path:
    """`cvs_tui/_shipped_configs` in an installed wheel, else `configs/` next to the package."""
    pkg = Path(cvs_tui.__file__).resolve().parent
    wheel = pkg / "_shipped_configs"
    return wheel if wheel.is_dir() else pkg.parent / "configs"


def list_shipped() -> list[tuple[str, Path]]:
    """(name, path) for every shipped config: `configs/*.json` then `configs/local/*.json` as `local/...`."""
    root = shipped_configs_dir()
    out: list[tuple[str, Path]] = []
    for prefix, folder in (("", root), ("local/", root / "local")):
        if not folder.is_dir():
            continue
        for p in sorted(folder.glob("*.json")):
            if not p.name.endswith(THRESHOLD_SUFFIX):
                out.append((prefix + p.stem, p))
    return out


def find_shipped(name: str) -> Path | None:
    """A shipped config by name: `stem`, `stem.json`, `local/stem` (also without the `local/`)."""
    wanted = name.removesuffix(".json")
    items = list_shipped()
    for n, p in items:
        if n == wanted:
            return p
    for n, p in items:
        if n.removeprefix("local/") == wanted:
            return p
    return None


def sibling_thresholds(config: Path, threshold_json: str | None) -> list[Path]:
    """Threshold files that belong to a config: the one it names, plus each platform variant.

    `mi3xx_<rest>.json` owns `mi300x_<rest>_threshold.json` and `mi325x_<rest>_threshold.json` (a
    generic `xx` prefix covers the platforms it names), but not `mi35x_<rest>_threshold.json` when
    `mi35x_<rest>.json` exists: that platform has its own config.
    """
    found: list[Path] = []
    if threshold_json:
        named = config.parent / threshold_json.replace("<changeme>", "").strip()
        if named.is_file():
            found.append(named)
    prefix, _, rest = config.stem.partition("_")
    if not rest:
        return found
    stem_prefix = prefix.rstrip("x") if "xx" in prefix else prefix
    for p in sorted(config.parent.glob(f"*_{rest}{THRESHOLD_SUFFIX}")):
        platform = p.name.split("_", 1)[0]
        own_config = config.parent / f"{platform}_{rest}.json"
        mine = platform == prefix or (platform.startswith(stem_prefix) and not own_config.is_file())
        if mine and p not in found:
            found.append(p)
    return found
