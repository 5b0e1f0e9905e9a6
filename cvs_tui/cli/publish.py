"""`--public` for `run`, `analyze` and `report`: a scrubbed copy of every artefact, ready to share.

The run folder keeps the originals (nothing is lost); `<run folder>/public/` gets the same files with
hosts, addresses, users, home and cluster paths, buckets and tokens replaced by stable placeholders, and
is re-checked: any leftover makes the command fail.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cvs_tui.core.cluster import Cluster
    from cvs_tui.core.config.loader import LoadedConfig
    from cvs_tui.core.results import Results

PUBLIC_DIR = "public"


def publish(
    run_dir: Path,
    args: argparse.Namespace,
    *,
    loaded: LoadedConfig | None = None,
    cluster: Cluster | None = None,
    results: Results | None = None,
) -> bool:
    """Write ``run_dir/public``; True when it is clean (or --public was not given)."""
    if not getattr(args, "public", False):
        return True
    from cvs_tui.core.privacy import build_context, scrub_run_folder

    ctx = build_context(
        loaded=loaded,
        cluster=cluster,
        results=results,
        deny_terms=args.deny_term,
        denylist_files=args.denylist,
    )
    dest = run_dir / PUBLIC_DIR
    with tempfile.TemporaryDirectory(dir=run_dir) as tmp:
        work = Path(tmp) / "copy"
        shutil.copytree(run_dir, work, ignore=shutil.ignore_patterns(PUBLIC_DIR, Path(tmp).name))
        report = scrub_run_folder(work, ctx)
        if dest.exists():
            shutil.rmtree(dest)
        work.rename(dest)
    n = sum(report.replaced.values())
    print(f"public copy: {dest} ({n} private value(s) replaced)")
    for line in report.leftovers:
        # the re-check ran in the scratch copy, since renamed: name the file where it now is (L17)
        line = line.replace(str(work), str(dest), 1)
        print(f"cvs-tui: private value left in the public copy: {line}", file=sys.stderr)
    return report.clean
