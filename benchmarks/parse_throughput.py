"""Parser throughput on generated MaxText node logs.

    python benchmarks/parse_throughput.py [--sizes 10,100,1000] [--chunk-kib 1024] [--no-flat] [--pure]
        [--reference]

For each size (MB) a realistic log is generated into a temporary file (never held in memory): a config
dump preamble, then steps (mostly `completed step` lines, a few absl warnings between them), an orbax
checkpoint block every 100 steps and an eval block every 250 steps, with periodic benign E-level lines.
The file is fed to ``NodeLogParser`` in chunks, as a live run or ``analyze`` does, and the table shows
MB/s (wall clock and process CPU time), lines/s, events and the peak RSS of the process that parsed
(each measurement runs in a fresh process). The same log
with every newline turned into a space (the flattened form) is measured too. ``--reference`` adds a
per-line reference parser (upstream CVS's documented algorithm) run on the same file, so the figures can
be compared on a machine whose load varies; its events column shows the steps it recovered ("st").
``--pure`` adds the parser's own pure-Python path (what runs where the C scanner is not built; same events).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import re
import resource
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from cvs_tui.core.parse import NodeLogParser, accel

_HDR = "I1130 {h:02d}:{m:02d}:{s:02d}.{us:06d} 140692907891584 "
_STEP = (
    "metric_logger.py:265] completed step: {n}, seconds: {sec:.3f}, TFLOP/s/device: {tf:.3f}, "
    "Tokens/s/device: {tok:.3f}, total_weights: 65536, loss: {loss:.3f}, lm_loss: {loss:.3f}, "
    "perplexity: {ppl:.3f}"
)
_NOISE = (
    "W1130 {t} 140692907891584 x2num.py:13] NaN or Inf found in input tensor.",
    "I1130 {t}   12788 pjrt_client.cc:587] PjRt-IFRT device count: total=8, addressable=8",
    "I1130 {t} 140692907891584 metric_logger.py:393] To see full metrics 'tensorboard --logdir=/out/run/tb/'",
    "E0000 00:00:1796020268.672784   30889 cuda_dnn.cc:8579] Unable to register cuDNN factory: Attempting to "
    "register factory for plugin cuDNN when one has already been registered",
)
_CKPT = [
    "I1130 {t} 140692907891584 checkpointing.py:1310] Waiting for step {n} to finish before checkpoint...",
    "I1130 {t} 140692907891584 checkpointing.py:1314] Waited 0.0068 seconds for step {n} to finish before "
    "starting checkpointing.",
    "I1130 {t} 140692907891584 checkpoint_manager.py:1527] [process=0] Saving checkpoint at step {n}",
    "I1130 {t} 140692907891584 event_tracking.py:76] [process=0] [async] Started save checkpoint @ "
    "/out/run/checkpoints/{n}.",
]
_CKPT_NOISE = [
    "I1130 {t} 140692907891584 base_pytree_checkpoint_handler.py:501] Created BasePyTreeCheckpointHandler: "
    "use_ocdbt=True, use_zarr3=True, pytree_metadata_options=PyTreeMetadataOptions(support_rich_types=False)",
    "I1130 {t} 140690965124800 atomicity.py:140] Creating tmp directory /out/run/checkpoints/{n}.orbax-"
    "checkpoint-tmp",
    "I1130 {t} 140692907891584 async_io_engine.py:127] [process=0] /jax/orbax/write/blocking_gbytes_per_sec: "
    "331.661 MiB/s (total size: 9.0 MiB) (time elapsed: 0.0271 s) (global)",
    "I1130 {t} 140690872805056 checkpoint_manager.py:2211] [process=0][thread=save_finalize][step={n}] "
    "CheckpointManager Save Finalize is done on all hosts.",
]
_CKPT_END = [
    "I1130 {t} 140692907891584 event_tracking.py:171] [process=0] [async] Finished blocking save in 0.03 "
    "seconds. Continuing save @ /out/run/checkpoints/{n}.",
    "I1130 {t} 140692907891584 standard_logger.py:34] {{'step': {n}, 'event_type': 'save', 'directory': "
    "'/out/run/checkpoints', 'reached_preemption': False, 'synchronous': False, "
    "'wait_for_prev_duration_secs': 0.0001, 'checkpointer_blocking_duration_secs': 0.0289, "
    "'checkpoint_manager_blocking_duration_secs': 0.0349}}",
    "I1130 {t} 140690897983168 event_tracking.py:184] [process=0] [async] Finished save (blocking + "
    "background) in 0.12 seconds @ /out/run/checkpoints/{n}",
    "I1130 {t} 140692907891584 checkpointing.py:598] Saved a checkpoint at step {n}.",
]
_EVAL = [
    "I1130 {t} 140692907891584 train.py:917] Starting eval after train step {n}",
    "I1130 {t} 140692907891584 metric_logger.py:328] Completed eval step: 0, seconds: 0.005, running "
    "loss={loss:.3f}, running perplexity=1810.470, running total_weights=256.0",
    "I1130 {t} 140692907891584 metric_logger.py:302] Completed eval after train step {n}, loss={loss:.3f}, "
    "perplexity=1810.470, total_weights=512.0, avg_z_loss=0.000",
]


def _log_lines(rng: random.Random) -> Iterator[str]:
    clock = 0.0

    def t() -> str:
        nonlocal clock
        clock += 0.001
        s = int(clock)
        return f"{(s // 3600) % 24:02d}:{(s // 60) % 60:02d}:{s % 60:02d}.{int((clock - s) * 1e6):06d}"

    for k in range(865):
        yield f"I1130 {t()} 140692907891584 pyconfig.py:591] Config param key_{k}: value_{k}"
    yield f"I1130 {t()} 140692907891584 max_utils.py:835] System Information: Jax Version: 0.12.0.1"
    yield (
        "Per train step:\n Total TFLOPs: 13.59 \n"
        " split as 93.93% learnable weight flops and 6.07% attention flops"
    )
    n = 0
    loss = 11.0
    while True:
        loss = max(1.0, loss * 0.9995)
        yield _HDR.format(h=0, m=0, s=0, us=n % 1_000_000).replace("00:00:00", t()[:8]) + _STEP.format(
            n=n,
            sec=0.15 + rng.random() * 0.01,
            tf=92 + rng.random(),
            tok=13900 + rng.random() * 10,
            loss=loss,
            ppl=2.718**loss,
        )
        if rng.random() < 0.08:
            yield rng.choice(_NOISE).format(t=t())
        if n and n % 100 == 0:
            for line in _CKPT:
                yield line.format(t=t(), n=n)
            for _ in range(12):
                for line in _CKPT_NOISE:
                    yield line.format(t=t(), n=n)
            for line in _CKPT_END:
                yield line.format(t=t(), n=n)
        if n and n % 250 == 0:
            for line in _EVAL:
                yield line.format(t=t(), n=n, loss=loss)
        n += 1


def generate(path: Path, size_mb: int, *, flat: bool = False, seed: int = 7) -> int:
    """Write about ``size_mb`` MB of log to ``path``; returns the number of lines written."""
    target = size_mb * 1_000_000
    sep = " " if flat else "\n"
    written = lines = 0
    buf: list[str] = []
    with path.open("w", encoding="utf-8") as fh:
        for line in _log_lines(random.Random(seed)):
            text = line.replace("\n", sep) + sep
            buf.append(text)
            written += len(text)
            lines += 1 + line.count("\n")
            if len(buf) >= 4096:
                fh.write("".join(buf))
                buf.clear()
            if written >= target:
                break
        fh.write("".join(buf))
    return lines


def measure(path: Path, chunk: int, native: bool | None = None) -> tuple[float, float, int, int]:
    """(wall seconds, CPU seconds, events, lines_seen) for one pass of the parser over ``path``."""
    parser = NodeLogParser(native=native)
    events = 0
    t0 = time.perf_counter()
    c0 = time.process_time()
    with path.open("rb", buffering=0) as fh:
        while data := fh.read(chunk):
            events += len(parser.feed(data))
    events += len(parser.finish())
    return time.perf_counter() - t0, time.process_time() - c0, events, parser.lines_seen


# A per-line reference: upstream CVS's documented parse (step/metric regexes per line, the `\beval`
# heuristic, lazy checkpoint regexes over the whole text). Its error patterns run elsewhere (while
# polling), so they are left out here, which flatters the reference. It is here only to put the figures
# above in context on the same machine at the same moment.
_REF_STEP = re.compile(r"completed step:\s*(\d+)")
_REF_METRIC = re.compile(r"(\S+?):\s*([\d.eE+\-]+)")
_REF_EVAL = re.compile(r"\beval", re.I)
_REF_EVAL_SKIP = re.compile(r"config param|pyconfig", re.I)
_REF_EVAL_LOSS = re.compile(r"eval[_ ]?loss[:=]?\s*([\d.eE+\-]+)|\bloss[:=]?\s*([\d.eE+\-]+)", re.I)
_REF_SAVE = re.compile(r"[Ff]inished save in\s*([\d.]+)\s*second")
_REF_LOAD = re.compile(r"/jax/orbax/read\b.*?time elapsed:\s*([\d.]+)\s*s")


def measure_reference(path: Path) -> tuple[float, float, int]:
    """(wall seconds, CPU seconds, steps) for the per-line reference over ``path`` (held in memory)."""
    t0 = time.perf_counter()
    c0 = time.process_time()
    text = path.read_text(encoding="utf-8", errors="replace")
    steps = 0
    for line in text.splitlines():
        m = _REF_STEP.search(line)
        if m and "profiler" not in line.lower():
            metrics = {}
            for k, v in _REF_METRIC.findall(line):
                try:
                    metrics[k] = float(v)
                except ValueError:
                    pass
            steps += 1
        if _REF_EVAL.search(line) and not _REF_EVAL_SKIP.search(line):
            _REF_EVAL_LOSS.search(line)
    _REF_SAVE.findall(text)
    _REF_LOAD.findall(text)
    return time.perf_counter() - t0, time.process_time() - c0, steps


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _isolated(fn: Callable[..., tuple], *args: object) -> tuple:
    """Run ``fn`` in a fresh interpreter (as ``cvs-tui analyze`` is); returns its result plus that process's
    peak RSS (MB). A forked child would pay copy-on-write faults on the generator's heap instead."""
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(1, maxtasksperchild=1) as pool:
        return pool.apply(_with_rss, (fn, *args))


def _with_rss(fn: Callable[..., tuple], *args: object) -> tuple:
    return (*fn(*args), _peak_rss_mb())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="10,100", help="comma-separated log sizes in MB (default 10,100)")
    ap.add_argument("--chunk-kib", type=int, default=1024, help="feed chunk size in KiB (default 1024)")
    ap.add_argument("--no-flat", action="store_true", help="skip the flattened-log runs")
    ap.add_argument("--tmp", default=None, help="folder for the generated logs (default: system temp)")
    ap.add_argument(
        "--reference", action="store_true", help="also time a per-line reference parser on logs up to 100 MB"
    )
    ap.add_argument(
        "--pure", action="store_true", help="also time the parser's pure-Python path on logs up to 100 MB"
    )
    args = ap.parse_args(argv)
    sizes = [int(x) for x in args.sizes.split(",") if x.strip()]
    chunk = args.chunk_kib * 1024
    print(
        f"python {sys.version.split()[0]}, chunk {args.chunk_kib} KiB, baseline RSS {_peak_rss_mb():.0f} MB"
    )
    print(
        f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; 'cpu' columns use process CPU time;"
        f" parser: {accel.describe()}"
    )
    print(
        f"{'log':<16}{'MB':>8}{'wall s':>8}{'MB/s':>8}{'cpu s':>8}{'cpu MB/s':>10}{'lines/s':>11}"
        f"{'events':>12}{'peak RSS MB':>13}"
    )
    with tempfile.TemporaryDirectory(dir=args.tmp) as tmp:
        for size in sizes:
            for flat in (False, True) if not args.no_flat else (False,):
                path = Path(tmp) / f"node{size}{'_flat' if flat else ''}.log"
                lines = generate(path, size, flat=flat)
                nbytes = path.stat().st_size
                secs, cpu, events, _seen, rss = _isolated(measure, path, chunk)
                name = f"{size} MB{' flattened' if flat else ''}"
                print(
                    f"{name:<16}{nbytes / 1e6:>8.1f}{secs:>8.2f}{nbytes / 1e6 / secs:>8.1f}{cpu:>8.2f}"
                    f"{nbytes / 1e6 / cpu:>10.1f}{lines / cpu:>11,.0f}{events:>12,}{rss:>13.0f}",
                    flush=True,
                )
                if args.pure and size <= 100:
                    psecs, pcpu, pevents, _pseen, prss = _isolated(measure, path, chunk, False)
                    print(
                        f"{'  pure Python':<16}{nbytes / 1e6:>8.1f}{psecs:>8.2f}{nbytes / 1e6 / psecs:>8.1f}"
                        f"{pcpu:>8.2f}{nbytes / 1e6 / pcpu:>10.1f}{lines / pcpu:>11,.0f}{pevents:>12,}"
                        f"{prss:>13.0f}",
                        flush=True,
                    )
                if args.reference and size <= 100:
                    rsecs, rcpu, steps, rrss = _isolated(measure_reference, path)
                    print(
                        f"{'  per-line ref':<16}{nbytes / 1e6:>8.1f}{rsecs:>8.2f}{nbytes / 1e6 / rsecs:>8.1f}"
                        f"{rcpu:>8.2f}{nbytes / 1e6 / rcpu:>10.1f}{lines / rcpu:>11,.0f}{f'{steps:,} st':>12}"
                        f"{rrss:>13.0f}",
                        flush=True,
                    )
                os.unlink(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
