"""MaxText / orbax / absl line forms -> typed events.

Every regex works on one *normalised* record: newlines and carriage returns already turned into spaces,
so a log and its flattened copy read the same. Numbers may print as ``nan``/``inf``.

Long because it is one grammar driven by tables: the checkpoint-line table (``CK_PATTERNS``) alone is 170
lines, and every form shares the number and header patterns defined at the top.
"""

from __future__ import annotations

import ast
import math
import re
from collections.abc import Callable
from datetime import UTC, datetime

from cvs_tui.core.events import (
    CheckpointAction,
    CheckpointEvent,
    DevicesEvent,
    EvalDialect,
    EvalEvent,
    EvalStartEvent,
    ExitCodeEvent,
    LogEvent,
    MemoryEstimateEvent,
    MemStatsEvent,
    NonFiniteAbortEvent,
    ParamsEvent,
    ProcessCountEvent,
    ProfilerMarkEvent,
    StepEvent,
    StepKind,
    SystemInfoEvent,
    TflopsPerStepEvent,
)

NUM = rb"[-+]?(?:\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?|nan|NaN|-?inf|-?Infinity)"

# ---------------------------------------------------------------------------------------------------------
# Record headers. Each is recognised only where it follows whitespace or starts the stream. The glog,
# TF/XLA and python-logging forms are found by one scan keyed on a ':' of their timestamp (a literal
# first character keeps Python's regex engine on its fast path); the lookbehinds check what precedes it.
# Lengths are bounded so that a header never needs more than HEADER_MAX bytes to be recognised.
# ---------------------------------------------------------------------------------------------------------
HEADER_MAX = 400
_SRC = rb"[^\s:\]]{1,200}:\d{1,10}"
_PYLOG_TAIL = rb"\d\d:\d\d,\d{3}:"
TIMED_HEADER = re.compile(
    # anchored on the ':' after the hour, which all three forms share; most ':' fail the lookahead
    rb":(?=\d\d:\d)(?:"
    rb"(?<=(?<!\S)([IWEF])\d{4} \d\d:)\d\d:\d{1,12}\.\d{1,9} {1,20}\d{1,20} " + _SRC + rb"\] "  # absl/glog
    rb"|(?<=(?<!\S)(\d)\d{3}-\d\d-\d\d \d\d:)\d\d:\d\d\.\d{1,9}: [IWEF] " + _SRC + rb"\] "  # TF/XLA
    rb"|(?<=(?<!\S)(I)NFO:\d{4}-\d\d-\d\d \d\d:)"
    + _PYLOG_TAIL  # python logging, one per level width
    + rb"|(?<=(?<!\S)([ED])(?:RROR|EBUG):\d{4}-\d\d-\d\d \d\d:)"
    + _PYLOG_TAIL
    + rb"|(?<=(?<!\S)(W)ARNING:\d{4}-\d\d-\d\d \d\d:)"
    + _PYLOG_TAIL
    + rb"|(?<=(?<!\S)(C)RITICAL:\d{4}-\d\d-\d\d \d\d:)"
    + _PYLOG_TAIL
    + rb")"
)
# Headers without a timestamp: (literal that gates the scan, regex run when it is present).
LITERAL_HEADERS: tuple[tuple[bytes, re.Pattern[bytes]], ...] = (
    (b"XPK ", re.compile(rb"XPK (?:Start|End): ")),
    (b"EXIT_CODE=", re.compile(rb"EXIT_CODE=-?\d")),
    (b"Per ", re.compile(rb"Per (?:train|prefill) step")),
    (b"Traceback (", re.compile(rb"Traceback \(most recent call last\):")),
)
# A step line printed without a log header (print-style MaxText) starts its own record, so thousands of
# them never pile up into one record past RECORD_CAP. It does not where the last non-blank byte before it
# ends a log header (`] `, python logging's `: `) or the rampup tag (`, ` / `] `): there it is a message.
# Blanks are skipped for at most BARE_STEP_LOOKBACK bytes (well inside HEADER_MAX, which the splitter
# keeps before any place a header may start): past that, the step line starts a record.
BARE_STEP_HEADERS: tuple[bytes, ...] = (b"completed step: ", b"[Rampup Batch Size Phase]")
BARE_STEP_NOT_AFTER = frozenset(b"]:,")
BARE_STEP_LOOKBACK = 64

# F-level (fatal) headers; group 1 starts at the header's first byte.
F_GLOG = re.compile(rb"(F)\d{4} \d\d:\d\d:\d{1,12}\.\d{1,9} {1,20}\d{1,20} " + _SRC + rb"\] ")
F_TF = re.compile(rb": F (?<=(\d)\d{3}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{6}: F )" + _SRC + rb"\] ")

# Full header, matched at a record start to read level, source and timestamp.
HEADER_AT = re.compile(
    rb"(?:(?P<glvl>[IWEF])\d{4} \d\d:\d\d:\d{1,12}\.\d{1,9} {1,20}\d{1,20} (?P<gsrc>" + _SRC + rb")\] )"
    rb"|(?:(?P<tdate>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{1,9}): (?P<tlvl>[IWEF]) (?P<tsrc>" + _SRC + rb")\] )"
    rb"|(?:(?P<plvl>INFO|WARNING|ERROR|CRITICAL|DEBUG):(?P<pdate>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}):"
    rb"(?P<psrc>[^:\s]{1,200}:\d{1,10}):)"
)


def header_info(rec: bytes) -> tuple[str | None, str | None, float | None]:
    """(level letter, source `file:NNN`, epoch seconds or None) of a record's header."""
    m = HEADER_AT.match(rec)
    if m is None:
        return None, None, None
    if m.group("glvl"):
        return m.group("glvl").decode(), source_of(m.group("gsrc")), None  # glog prints no year
    if m.group("tlvl"):
        return (
            m.group("tlvl").decode(),
            source_of(m.group("tsrc")),
            _stamp(m.group("tdate"), "%Y-%m-%d %H:%M:%S.%f"),
        )
    return (
        m.group("plvl")[:1].decode(),
        source_of(m.group("psrc")),
        _stamp(m.group("pdate").replace(b",", b"."), "%Y-%m-%d %H:%M:%S.%f"),
    )


_SRC_CACHE: dict[bytes, str] = {}


def source_of(raw: bytes) -> str:
    """A header's `file:NNN` as text (cached: a log repeats a few hundred sources)."""
    s = _SRC_CACHE.get(raw)
    if s is None:
        s = raw.decode("utf-8", "replace")
        if len(_SRC_CACHE) < 4096:
            _SRC_CACHE[raw] = s
    return s


def _stamp(raw: bytes, fmt: str) -> float | None:
    """Header times carry no zone; they are read as UTC (the launcher's containers run in UTC)."""
    try:
        text = raw.decode("ascii")
        head, _, frac = text.partition(".")
        dt = datetime.strptime(head, fmt.split(".")[0]).replace(tzinfo=UTC)
        return dt.timestamp() + (float("0." + frac) if frac else 0.0)
    except (ValueError, UnicodeDecodeError):
        return None


def _f(raw: bytes | None) -> float | None:
    if raw is None:
        return None
    try:
        return float(raw)
    except ValueError:
        return None


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")


# ---------------------------------------------------------------------------------------------------------
# Train steps: found by one scan of the whole chunk (they are most of a log).
# ---------------------------------------------------------------------------------------------------------
# A step line is `completed step: N, seconds: S` and then any `, key: value` pairs, in any order: MaxText
# vintages differ in which fields they print (2023: `TFLOP/s`, 2024: no Tokens/s/device, no total_weights;
# rampup steps omit the rates), harnesses insert their own (`MFU: 8.32%`) and newer MaxText appends
# lm_loss, perplexity, moe_lb_loss, ... The known keys fill the step's fields (step_fields); any of them may
# be missing, the loss too (a harness or a README may cut the line before it). Values are taken loosely
# (anything up to the next comma or blank, at most 64 bytes) and checked by float(): a known field float()
# rejects drops the step, an unknown one is left out.
_V = rb"([^,\s]{1,64})"
STEP_KEY = rb"[A-Za-z_][A-Za-z0-9_/ ]{0,63}"
STEP = re.compile(
    rb"completed step: (\d{1,12}), seconds: " + _V + rb"((?:, " + STEP_KEY + rb": [^,\s]{1,64})*)"
)
# key -> the StepEvent field it fills; the first of a key in a line wins
STEP_FIELDS: dict[bytes, str] = {
    b"loss": "loss",
    b"TFLOP/s/device": "tflops",
    b"TFLOP/s": "tflops",  # MaxText 2023: per device, before the suffix was added
    b"Tokens/s/device": "tokens",
    b"total_weights": "total_weights",
    b"live slice count": "live_slices",
}
StepFields = tuple[float | None, float | None, float | None, float | None, int | None, dict[str, float]]


def step_fields(raw: bytes) -> StepFields | None:
    """The `, key: value` pairs of a step line (as the step regex matched them) -> (loss, TFLOP/s, tokens/s,
    total_weights, live slices, extras), None for a field the line lacks; None when a known field is not
    a number (not a step line after all). An extra's value may end in `%` (`MFU: 8.32%`); one that is not
    a number is left out."""
    found: dict[str, float | int] = {}
    extras: dict[str, float] = {}
    if raw:
        for part in raw[2:].split(b", "):
            k, _, v = part.partition(b": ")
            name = STEP_FIELDS.get(k)
            if name is not None:
                if name in found:
                    continue
                if name == "live_slices":
                    if not (len(v) <= 9 and v.isdigit()):
                        return None
                    found[name] = int(v)
                    continue
                try:
                    found[name] = float(v)
                except ValueError:
                    return None
                continue
            key = _step_key(k)
            if key in extras:
                continue
            if len(v) > 1 and v.endswith(b"%"):
                v = v[:-1]
            try:
                extras[key] = float(v)
            except ValueError:
                continue
    sl = found.get("live_slices")
    return (
        _opt(found.get("loss")),
        _opt(found.get("tflops")),
        _opt(found.get("tokens")),
        _opt(found.get("total_weights")),
        None if sl is None else int(sl),
        extras,
    )


def _opt(v: float | int | None) -> float | None:
    return None if v is None else float(v)


RAMPUP_TAG = (b"[Rampup Batch Size Phase], ", b"[Rampup Batch Size Phase] ")
PROF_STEP = re.compile(
    rb"completed profiler activation/deactivation step: (\d{1,12}), total_weights: (" + NUM + rb"), "
    rb"loss: (" + NUM + rb")((?:, [A-Za-z_]{1,64}: " + NUM + rb")*)"
)
_KEY_CACHE: dict[bytes, str] = {}


def _step_key(k: bytes) -> str:
    key = _KEY_CACHE.get(k)
    if key is None:
        key = k.decode("ascii")
        if len(_KEY_CACHE) < 4096:
            _KEY_CACHE[k] = key
    return key


def step_extras(raw: bytes) -> dict[str, float]:
    """`, key: value, key: value` (already validated by the step regex) -> {key: value}."""
    out: dict[str, float] = {}
    for part in raw[2:].split(b", "):
        k, _, v = part.partition(b": ")
        out[_step_key(k)] = float(v)
    return out


def profiler_steps(rec: bytes, line: int, source: str | None, stamp: float | None) -> list[LogEvent]:
    out: list[LogEvent] = []
    for m in PROF_STEP.finditer(rec):
        out.append(
            StepEvent(
                step=int(m.group(1)),
                loss=float(m.group(3)),
                line=line,
                kind=StepKind.PROFILER,
                total_weights=float(m.group(2)),
                extras=step_extras(m.group(4)) if m.group(4) else {},
                timestamp=stamp,
                source=source,
            )
        )
    return out


# ---------------------------------------------------------------------------------------------------------
# Everything else: anchored handlers run on the records that contain their anchor literal.
# ---------------------------------------------------------------------------------------------------------
TFLOPS = re.compile(
    rb"Per train step:\s+Total TFLOPs: (" + NUM + rb")\s+split as (" + NUM + rb")% learnable weight flops"
    rb"\s+and (" + NUM + rb")% attention flops"
)
TFLOPS_TOTAL_ONLY = re.compile(rb"Per train step:\s+Total TFLOPs: (" + NUM + rb")")
SYS = re.compile(rb"System Information: (Jax Version|Jaxlib Version|Jax Backend): (.*)$", re.S)
_SYS_KEYS = {b"Jax Version": "jax", b"Jaxlib Version": "jaxlib", b"Jax Backend": "backend"}
NDEV = re.compile(rb"Num_devices: (\d+), shape \(([\d, ]*)\)")
NPARAM = re.compile(rb"number parameters: (" + NUM + rb") billion")
MEMEST = re.compile(
    rb"Total (?:estimated )?memory size: (" + NUM + rb") GB"
    rb"(?:, (?:estimated )?[Oo]utput size: (" + NUM + rb") GB)?"
    rb"(?:, (?:estimated )?[Tt]emp size: (" + NUM + rb") GB)?"
    rb"(?:, (?:estimated )?[Aa]rgument size: (" + NUM + rb") GB)?"
    rb"(?:, (?:[Ee]stimated )?[Hh]ost temp size: (" + NUM + rb") GB)?"
)
MEMLBL = re.compile(rb"Memstats: (.{1,300}?):(?: |$)")
MEMUSE = re.compile(
    rb"Using \(GB\) ("
    + NUM
    + rb") / ("
    + NUM
    + rb") \(("
    + NUM
    + rb")%\) on (\S.{0,300}?) ?(?=Using \(GB\)|$)"
)
EVAL_START = re.compile(rb"Starting eval after train step (\d+)")
EVAL_NEW = re.compile(
    rb"Completed eval after train step (\d+), loss=(" + NUM + rb")(?:, perplexity=(" + NUM + rb"))?"
)
EVAL_RUN = re.compile(
    rb"Completed eval step: (\d+), seconds: " + NUM + rb", running loss=(" + NUM + rb")"
    rb"(?:, running perplexity=(" + NUM + rb"))?"
)
EVAL_MID = re.compile(
    rb"eval metrics after step: (\d+), loss=(" + NUM + rb")(?:, perplexity=(" + NUM + rb"))?"
)
EVAL_OLD = re.compile(
    rb"average loss after step=(\d+): eval_step_count=\d+, eval_loss=(?:np\.float\d+\()?(" + NUM + rb")"
)
ABORT = re.compile(rb"Aborting training due to (NaN|Inf) loss")
EXIT = re.compile(rb"(?<!\S)EXIT_CODE=(-?\d{1,9})")


def is_exit_line(line: str) -> bool:
    """The launcher's last line of a log (``EXIT_CODE=N``): nothing more will be written to it. Read
    from the raw line, since its record is only parsed once the next one starts (there is none)."""
    return "EXIT_CODE=" in line and EXIT.search(line.encode("utf-8", "replace")) is not None


# checkpoints (MaxText's own lines, orbax's manager, orbax event tracking old and new, standard_logger)
_PATH = rb"(\S+?)\.?(?= |$)"
# (anchor literal, regex, action, dialect, group layout: s=step, t=seconds, p=path, in group order)
CK_PATTERNS: tuple[tuple[bytes, re.Pattern[bytes], CheckpointAction, str, str], ...] = (
    (
        b"to finish before checkpoint",
        re.compile(rb"Waiting for step (\d+) to finish before checkpoint"),
        CheckpointAction.SAVE_WAIT,
        "maxtext",
        "s",
    ),
    (
        b"to finish before starting checkpointing",
        re.compile(rb"Waited (" + NUM + rb") seconds for step (\d+) to finish before starting checkpointing"),
        CheckpointAction.SAVE_WAIT,
        "maxtext",
        "ts",
    ),
    (
        b"saving checkpoint at step",
        re.compile(rb"Saving checkpoint at step (\d+)"),
        CheckpointAction.SAVE_START,
        "orbax",
        "s",
    ),
    (
        b"asynchronous checkpoint save",
        re.compile(rb"Started an asynchronous checkpoint save for step (\d+)"),
        CheckpointAction.SAVE_START,
        "maxtext",
        "s",
    ),
    (
        b"saved a checkpoint at step",
        re.compile(rb"Saved a checkpoint at step (\d+)"),
        CheckpointAction.SAVE_DONE,
        "maxtext",
        "s",
    ),
    (
        b"already exists, skipping save",
        re.compile(rb"Checkpoint for step (\d+) already exists, skipping save"),
        CheckpointAction.SAVE_SKIPPED,
        "maxtext",
        "s",
    ),
    (
        b"finished blocking save in",
        re.compile(
            rb"\[(?:async|sync)\] Finished blocking save in ("
            + NUM
            + rb") seconds\. Continuing save @ "
            + _PATH
        ),
        CheckpointAction.SAVE_BLOCKING_DONE,
        "orbax-new",
        "tp",
    ),
    (
        b"finished save",
        re.compile(
            rb"\[(?:async|sync)\] Finished save(?: \(blocking \+ background\))? in ("
            + NUM
            + rb") seconds @ "
            + _PATH
        ),
        CheckpointAction.SAVE_DONE,
        "orbax-new",
        "tp",
    ),
    (
        b"finished load in",
        re.compile(rb"\[(?:async|sync)\] Finished load in (" + NUM + rb") seconds @ " + _PATH),
        CheckpointAction.RESTORE_DONE,
        "orbax-new",
        "tp",
    ),
    (
        b"finished blocking save. time taken",
        re.compile(
            rb"Finished blocking save\. Time taken: (" + NUM + rb")s\. Continuing background save to " + _PATH
        ),
        CheckpointAction.SAVE_BLOCKING_DONE,
        "orbax-old",
        "tp",
    ),
    (
        b"finished async_save",
        re.compile(
            rb"Finished async_save \(blocking \+ background\)\. Time taken: ("
            + NUM
            + rb")s\. directory="
            + _PATH
        ),
        CheckpointAction.SAVE_DONE,
        "orbax-old",
        "tp",
    ),
    (
        b"finished restoring checkpoint in",
        re.compile(rb"Finished restoring checkpoint in (" + NUM + rb") seconds from " + _PATH),
        CheckpointAction.RESTORE_DONE,
        "orbax-old",
        "tp",
    ),
    (
        b"waiting for previous save",
        re.compile(rb"Waiting for previous save to complete took (" + NUM + rb") seconds"),
        CheckpointAction.WAIT_PREVIOUS,
        "orbax",
        "t",
    ),
    (
        b"restoring checkpoint from",
        # orbax Checkpointer.restore (old and new); "Finished restoring checkpoint from" has a lower-case r
        re.compile(rb"Restoring checkpoint from " + _PATH),
        CheckpointAction.RESTORE_START,
        "orbax",
        "p",
    ),
    (
        b"/read/",
        # orbax's read metrics, one per restore and host (`/jax/checkpoint/read/gbytes_per_sec: ... (time
        # elapsed: X s) (global)`, `/jax/orbax/read/worker/io/requested throughput: ... (per-host)`): the
        # restore's read time where orbax prints no "Finished ... load" line
        re.compile(
            rb"/jax/(?:orbax|checkpoint)/read/[\w/]{1,200}(?: throughput)?: \S{1,40}(?: \w{1,10})?/s "
            rb"\(total (?:size|gbytes): [^()]{1,60}\) \(time elapsed: (" + NUM + rb") s\)"
        ),
        CheckpointAction.RESTORE_DONE,
        "orbax-metrics",
        "t",
    ),
    (
        b"restoring from this run",
        re.compile(rb"restoring from this run's directory step (\d+)"),
        CheckpointAction.RESTORE_START,
        "maxtext",
        "s",
    ),
    (
        b"loading full state from path",
        re.compile(rb"Loading full state from path: " + _PATH),
        CheckpointAction.RESTORE_START,
        "maxtext",
        "p",
    ),
    (
        b"restoring params from",
        re.compile(rb"restoring params from " + _PATH),
        CheckpointAction.RESTORE_START,
        "maxtext",
        "p",
    ),
    (
        b"no existing checkpoints found",
        re.compile(rb"No existing checkpoints found, not restoring checkpoint"),
        CheckpointAction.NO_CHECKPOINT,
        "maxtext",
        "",
    ),
    (
        b"checkpointing disabled",
        re.compile(rb"Checkpointing disabled, not creating checkpoint manager"),
        CheckpointAction.DISABLED,
        "maxtext",
        "",
    ),
)
STDLOG = re.compile(rb"(\{'step': \d+, 'event_type': '\w+'.*\})\s*$", re.S)
_STEP_IN_PATH = re.compile(r"/(\d+)/?$")


def _path_step(path: str | None) -> int | None:
    if not path:
        return None
    m = _STEP_IN_PATH.search(path)
    return int(m.group(1)) if m else None


def _checkpoint_rule(k: int) -> Callable[[bytes, int], list[LogEvent]]:
    _anchor, regex, action, dialect, layout = CK_PATTERNS[k]

    def handler(rec: bytes, line: int) -> list[LogEvent]:
        out: list[LogEvent] = []
        stamp = header_info(rec)[2]
        for m in regex.finditer(rec):
            step = seconds = None
            path: str | None = None
            for i, kind in enumerate(layout, start=1):
                g = m.group(i)
                if kind == "s":
                    step = int(g)
                elif kind == "t":
                    seconds = _f(g)
                else:
                    path = _text(g)
            if step is None and path is not None:
                step = _path_step(path)
            out.append(
                CheckpointEvent(
                    action, line, step=step, seconds=seconds, dialect=dialect, path=path, timestamp=stamp
                )
            )
        return out

    return handler


_FLAT_ITEM = rb"'(\w+)': ('[^'\\]*'|-?(?:0|[1-9]\d*)(?:\.\d*)?(?:e[-+]?\d+)?|True|False|None)"
_FLAT_DICT = re.compile(rb"\{(?:" + _FLAT_ITEM + rb"(?:, (?=')|\}$))*+\Z")
_FLAT_PAIR = re.compile(_FLAT_ITEM)
_FLAT_CONST: dict[bytes, object] = {b"True": True, b"False": False, b"None": None}


def _flat_dict(text: bytes) -> dict[str, object] | None:
    """A dict of plain scalars, as ast.literal_eval reads it but some 50x faster (orbax logs one per
    checkpoint); None for anything else (nesting, escapes), which literal_eval then reads."""
    if text == b"{}":
        return {}
    if _FLAT_DICT.match(text) is None:
        return None
    out: dict[str, object] = {}
    for m in _FLAT_PAIR.finditer(text):
        key, raw = m.group(1).decode("utf-8", "replace"), m.group(2)
        if raw[:1] == b"'":
            out[key] = raw[1:-1].decode("utf-8", "replace")
        elif raw in _FLAT_CONST:
            out[key] = _FLAT_CONST[raw]
        elif (raw.isdigit() or (raw[:1] == b"-" and raw[1:].isdigit())) and len(raw) <= 19:
            out[key] = int(raw)  # longer digit runs: float below (int() refuses past 4300 digits)
        else:
            out[key] = float(raw)
    return out


def standard_logger(rec: bytes, line: int) -> list[LogEvent]:
    """orbax's `standard_logger.py` dict line, read with ast.literal_eval (safe: literals only)."""
    m = STDLOG.search(rec)
    if m is None:
        return []
    d = _flat_dict(m.group(1))
    if d is None:
        try:
            d = ast.literal_eval(m.group(1).decode("utf-8", "replace"))
        except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
            return []
    if not isinstance(d, dict):
        return []
    kind = d.get("event_type")
    step = s if isinstance(s := d.get("step"), int) else None
    path = p if isinstance(p := d.get("directory"), str) else None

    def num(key: str) -> float | None:
        v = d.get(key)
        if not isinstance(v, int | float) or isinstance(v, bool):
            return None
        try:
            return float(v)
        except OverflowError:  # an integer past a double's range reads as strtod reads it: infinite
            return math.inf if v > 0 else -math.inf

    if kind == "save":
        secs = num("checkpoint_manager_blocking_duration_secs")
        if secs is None:
            secs = num("checkpointer_blocking_duration_secs")
        action = CheckpointAction.SAVE_BLOCKING_DONE
    elif kind == "restore":
        secs = num("checkpointer_duration_secs")
        action = CheckpointAction.RESTORE_DONE
    else:
        return []
    stamp = header_info(rec)[2]
    return [
        CheckpointEvent(
            action, line, step=step, seconds=secs, dialect="standard_logger", path=path, timestamp=stamp
        )
    ]


def tflops(rec: bytes, line: int) -> list[LogEvent]:
    m = TFLOPS.search(rec)
    if m is not None:
        return [TflopsPerStepEvent(float(m.group(1)), _f(m.group(2)), _f(m.group(3)), line)]
    m = TFLOPS_TOTAL_ONLY.search(rec)
    return [TflopsPerStepEvent(float(m.group(1)), None, None, line)] if m else []


def sysinfo(rec: bytes, line: int) -> list[LogEvent]:
    m = SYS.search(rec)
    if m is None:
        return []
    value = _text(m.group(2)).strip()
    return [SystemInfoEvent(_SYS_KEYS[m.group(1)], " ".join(value.split()), line)]


def devices(rec: bytes, line: int) -> list[LogEvent]:
    m = NDEV.search(rec)
    if m is None:
        return []
    shape = tuple(int(x) for x in m.group(2).replace(b" ", b"").split(b",") if x)
    return [DevicesEvent(int(m.group(1)), shape, line)]


_NSYS_CAPTURE = re.compile(rb"Capture range (started|ended) in the application")


def profiler_marks(rec: bytes, line: int) -> list[LogEvent]:
    """nsys's capture-range lines (MaxText's own profiler boundaries are profiler steps)."""
    return [
        ProfilerMarkEvent(f"nsys capture {m.group(1).decode()}", line) for m in _NSYS_CAPTURE.finditer(rec)
    ]


PROCESS_ANCHORS = (b"[process=", b"tasks that reached the barrier: ")
_PROC_INDEX = re.compile(rb"\[process=(\d{1,6})\]")
_PROC_BARRIER = re.compile(rb"tasks that reached the barrier: \d{1,6}/(\d{1,6})")


class ProcessCount:
    """The job's process count from one rank's lines (ProcessCountEvent), logged only when it rises: orbax
    tags hundreds of lines with the same `[process=K]`."""

    def __init__(self) -> None:
        self.at_least = 0
        self.exact = 0

    def __call__(self, rec: bytes, line: int) -> list[LogEvent]:
        out: list[LogEvent] = []
        m = _PROC_BARRIER.search(rec)
        if m is not None and int(m.group(1)) > self.exact:
            self.exact = int(m.group(1))
            out.append(ProcessCountEvent(self.exact, True, line))
        if not self.exact:
            k = max((int(x) for x in _PROC_INDEX.findall(rec)), default=-1)
            if k + 1 > max(self.at_least, 1):
                self.at_least = k + 1
                out.append(ProcessCountEvent(self.at_least, False, line))
        return out


def params(rec: bytes, line: int) -> list[LogEvent]:
    m = NPARAM.search(rec)
    return [ParamsEvent(float(m.group(1)), line)] if m else []


def memory_estimate(rec: bytes, line: int) -> list[LogEvent]:
    m = MEMEST.search(rec)
    if m is None:
        return []
    g = m.group
    return [MemoryEstimateEvent(float(g(1)), _f(g(2)), _f(g(3)), _f(g(4)), _f(g(5)), line=line)]


def evals(rec: bytes, line: int) -> list[LogEvent]:
    out: list[LogEvent] = []
    stamp = header_info(rec)[2]
    for m in EVAL_START.finditer(rec):
        out.append(EvalStartEvent(int(m.group(1)), line, timestamp=stamp))
    for regex, dialect in (
        (EVAL_NEW, EvalDialect.CURRENT),
        (EVAL_RUN, EvalDialect.RUNNING),
        (EVAL_MID, EvalDialect.MID),
    ):
        for m in regex.finditer(rec):
            out.append(
                EvalEvent(
                    int(m.group(1)),
                    float(m.group(2)),
                    dialect,
                    line,
                    perplexity=_f(m.group(3)),
                    timestamp=stamp,
                )
            )
    for m in EVAL_OLD.finditer(rec):
        out.append(EvalEvent(int(m.group(1)), float(m.group(2)), EvalDialect.OLD, line, timestamp=stamp))
    return out


def abort(rec: bytes, line: int) -> list[LogEvent]:
    m = ABORT.search(rec)
    return [NonFiniteAbortEvent(m.group(1).decode().lower(), line)] if m else []


def exit_code(rec: bytes, line: int) -> list[LogEvent]:
    return [ExitCodeEvent(int(m.group(1)), line) for m in EXIT.finditer(rec)]


class MemStats:
    """Memstats spans records: a `Memstats: <label>:` record, then one `Using (GB)` record per device."""

    def __init__(self) -> None:
        self.label = ""

    def __call__(self, rec: bytes, line: int) -> list[LogEvent]:
        out: list[LogEvent] = []
        lbl = MEMLBL.search(rec)
        if lbl is not None:
            self.label = " ".join(_text(lbl.group(1)).split())
        for m in MEMUSE.finditer(rec, lbl.end() if lbl else 0):
            out.append(
                MemStatsEvent(
                    self.label, float(m.group(1)), float(m.group(2)), _text(m.group(4)).strip(), line
                )
            )
        return out


Handler = Callable[[bytes, int], list[LogEvent]]

# (anchor literals, lower-case; handler). A record whose folded text holds an anchor is handed to the
# handler once, and the handler's regexes decide. A record's events come in this order (after its steps).
# `None` marks the handlers that need the parser: profiler steps (the record header), Memstats (a label
# record, then one record per device) and the process count (logged when it rises).
RULES: tuple[tuple[tuple[bytes, ...], Handler | None], ...] = (
    ((b"completed profiler",), None),
    ((b"system information: ",), sysinfo),
    ((b"num_devices: ",), devices),
    (PROCESS_ANCHORS, None),
    ((b"capture range ",), profiler_marks),
    ((b"number parameters: ",), params),
    ((b"memory size: ",), memory_estimate),
    ((b"memstats", b"using (gb) "), None),
    ((b"per train step",), tflops),
    ((b"eval",), evals),
    *(((anchor,), _checkpoint_rule(k)) for k, (anchor, *_rest) in enumerate(CK_PATTERNS)),
    ((b"'event_type': ",), standard_logger),
    ((b"aborting training due to",), abort),
    ((b"exit_code=",), exit_code),
)
