"""Where the CPU of `analyze` goes on one node log: cProfile of ``offline.digest_log_file`` (parse the log
and reduce it to its digest, what each analyze worker runs), top entries by own time and by cumulative
time, and the CPU time of the parser alone on the same log for comparison.

    python benchmarks/profile_digest.py [--mb 100] [--log LOG] [--top 25]

The log is built as ``analyze_big.py`` builds it (a real MaxText log's step lines, renumbered) unless
``--log`` names one. Compare two code trees by running it with PYTHONPATH set to each.

Figures (2 cores shared with other jobs, load 2-22; least of interleaved runs), one 100 MB log, 447 k
steps: before the line clock and the step columns moved into the byte scanner, parse + digest under
cProfile CPU 4.5 s (the clock 1.9 s of it, building the columns 1.0 s), unprofiled 2.5 s; after, 1.9 s
profiled (the clock 0.09 s, the columns 0.05 s), 1.4 s unprofiled, against the parser alone 1.0-1.1 s.
Peak RSS while digesting 152 -> 148 MB. With the columns and the clock in files judged a chunk at a
time: parse + digest unprofiled 1.55 -> 1.64 s (the digest alone 0.24-0.28 s), peak RSS 151 -> 69 MB.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from analyze_big import DEFAULT_FIXTURE, write_node_log


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=float, default=100.0)
    ap.add_argument("--log", type=Path, help="profile this log instead of a generated one")
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args()

    from cvs_tui.core.judge.metrics import RunContext
    from cvs_tui.core.sources.offline import digest_log_file, parse_log_file

    with tempfile.TemporaryDirectory(prefix="profile-digest-") as tmp:
        log = args.log
        if log is None:
            log = Path(tmp) / "node0.log"
            steps = write_node_log(log, DEFAULT_FIXTURE, int(args.mb * 1e6))
            print(f"profile_digest: {log.stat().st_size / 1e6:.1f} MB, {steps} steps")
        ctx = RunContext(num_nodes=1, gpus_per_node=1)
        prof = cProfile.Profile()
        t = time.process_time()
        prof.enable()
        digest_log_file(0, log, None, ctx, "node0", Path(tmp) / "node0")
        prof.disable()
        cpu = time.process_time() - t
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # before the parser alone runs
        plain = []
        for k in range(3):  # unprofiled, least of three (imports done by now)
            t = time.process_time()
            digest_log_file(0, log, None, ctx, "node0", Path(tmp) / f"plain{k}")
            plain.append(time.process_time() - t)
        t = time.process_time()
        parse_log_file(log, None)
        parse_cpu = time.process_time() - t
        mb = log.stat().st_size / 1e6
        print(f"  parser alone: CPU {parse_cpu:.2f} s ({mb / parse_cpu:.1f} MB/s)")
        print(f"  digest_log_file (parse + digest), profiled: CPU {cpu:.2f} s ({mb / cpu:.1f} MB/s)")
        print(f"  digest_log_file unprofiled: CPU {min(plain):.2f} s ({mb / min(plain):.1f} MB/s)")
        print(f"  peak RSS while digesting: {rss:.0f} MB")
        for key in ("tottime", "cumulative") if args.top > 0 else ():
            out = io.StringIO()
            pstats.Stats(prof, stream=out).sort_stats(key).print_stats(args.top)
            text = out.getvalue()
            print(text[text.index("   ncalls") :].rstrip())
    return 0


if __name__ == "__main__":
    sys.exit(main())
