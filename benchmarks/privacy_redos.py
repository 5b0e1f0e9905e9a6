"""Time the privacy checker and scrubber on long hostile lines (audit #13: quadratic regexes).

    python benchmarks/privacy_redos.py [--sizes 64K,1M] [--timeout 60] [--what check,scrub]

Each case runs in a fresh process with a wall-clock limit; a case that runs past it prints `>LIMIT s`.
Inputs, one line each:
- ``hyphen``: `a-a-a-…` (every `a` is a word boundary: what made `_SECRET_ASSIGN` and `_POD` quadratic);
- ``b64url``: random base64url characters (`[A-Za-z0-9_-]`), as a token or a blob in a log;
- ``dotted``: `a.a.a.…` (a never-ending domain or module path);
- ``eyj``: `eyJ` repeated (a JWT prefix with no dots).
``check`` is ``find_private`` (what `check-private`, `card` and the scrubber's re-check run), ``scrub``
is ``Scrubber.scrub_text`` (what `scrub` and `run --public` run).
"""

from __future__ import annotations

import argparse
import multiprocessing
import random
import time

_KINDS = ("hyphen", "b64url", "dotted", "eyj")


def _size(text: str) -> int:
    t = text.strip().upper()
    mult = {"K": 1024, "M": 1024 * 1024}.get(t[-1:], 1)
    return int(t.rstrip("KM")) * mult


def make_line(kind: str, size: int) -> str:
    if kind == "hyphen":
        return ("a-" * (size // 2 + 1))[:size]
    if kind == "dotted":
        return ("a." * (size // 2 + 1))[:size]
    if kind == "eyj":
        return ("eyJ" * (size // 3 + 1))[:size]
    rnd = random.Random(7)
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-"
    return "".join(rnd.choice(alphabet) for _ in range(size))


def _case(what: str, kind: str, size: int, q: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    from cvs_tui.core.privacy import Scrubber, find_private

    line = make_line(kind, size) + "\n"
    t0 = time.perf_counter()
    if what == "check":
        find_private(line)
    else:
        Scrubber().scrub_text(line)
    q.put(time.perf_counter() - t0)


def run_case(what: str, kind: str, size: int, timeout: float) -> float | None:
    q: multiprocessing.Queue = multiprocessing.Queue()  # type: ignore[type-arg]
    p = multiprocessing.Process(target=_case, args=(what, kind, size, q))
    p.start()
    p.join(timeout)
    if p.is_alive():
        p.kill()
        p.join()
        return None
    return q.get() if not q.empty() else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="64K,1M", help="comma-separated sizes, K/M suffixes (default 64K,1M)")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds per case (default 60)")
    ap.add_argument("--what", default="check,scrub", help="check, scrub or both (default both)")
    ap.add_argument("--kinds", default=",".join(_KINDS), help=f"inputs (default {','.join(_KINDS)})")
    args = ap.parse_args()
    print(f"{'what':6} {'input':7} {'size':>8} {'seconds':>10}")
    for what in args.what.split(","):
        for kind in args.kinds.split(","):
            for s in args.sizes.split(","):
                secs = run_case(what, kind, _size(s), args.timeout)
                shown = f">{args.timeout:g}" if secs is None else f"{secs:.3f}"
                print(f"{what:6} {kind:7} {s:>8} {shown:>10}", flush=True)


if __name__ == "__main__":
    main()
