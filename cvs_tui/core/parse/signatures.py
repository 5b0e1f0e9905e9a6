"""Error signatures: the default (replaceable) set, always-on fatal signatures and benign lines.

Every pattern is matched case-insensitively against one record at a time (as upstream CVS does, per
line). Scanning a whole log with dozens of case-insensitive regexes is slow in Python's engine, so each
pattern is reduced to *necessary literals*: one of them must occur (case-folded) in any text the pattern
matches. A record is only searched with the real regex when the folded record holds such a literal, and
the literals themselves are found with ``bytes.find`` on a lower-cased copy of the chunk.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

try:  # Python 3.11+ keeps the regex parser here
    from re import _constants as _sre_c  # type: ignore[attr-defined]
    from re import _parser as _sre_parse  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - older layouts
    import sre_constants as _sre_c
    import sre_parse as _sre_parse

from cvs_tui.core.events import Severity

# Upstream CVS's `_TRAINING_ERR_PATTERNS` (name -> regex), used when a config has no `error_patterns`.
DEFAULT_ERROR_PATTERNS: dict[str, str] = {
    "NCCL ERROR": r"NCCL ERROR|NCCL timeout|local work queue catastrophic error",
    "GPU HW ERROR": r"HW Exception by GPU|GPU Hang|Uncorrectable error|GPU Reset",
    "AssertionError": (
        r"AssertionError|ValueError:|JaxStackTrace|During handling of the above exception"
        r"|triggered the following exception"
    ),
    "rocm Err": (
        r"FAILED_PRECONDITION: No visible GPU devices|failed call to hipInit: HIP_ERROR_NoDevice"
        r"|librocm reported version is: NOT_FOUND"
    ),
    "python err": r"ModuleNotFoundError: No module named|Fatal Python error:",
    "tensorflow": r"tensorflow.CoordinationServiceError|tensorflow.BarrierError|CoordinationServiceError",
    "resource": r"RESOURCE_EXHAUSTED: Out of memory|failed: RESOURCE_EXHAUSTED",
    "segfault": r"Segmentation fault|SIGSEGV|signal 11|core dumped",
    # Beyond upstream: failures upstream's set misses (see the log-format research, error table).
    "jax runtime error": r"(?:Xla|Jax)RuntimeError: [A-Z_]+:|Execution of replica \d+ failed: [A-Z_]+:",
    "out of memory": r"Ran out of memory in memory space|Out of memory while trying to allocate",
    "nccl op failed": (
        r"[NR]CCL operation \w+\([^)]*\) failed"
        r"|nccl(?:UnhandledCudaError|SystemError|InternalError|InvalidArgument|InvalidUsage|RemoteError)"
    ),
    "gpu fault": (
        r"Memory access fault by GPU node-\d+|aborting with error ?: ?HSA_STATUS_\w+"
        r"|callbackQueue aborting with status|\bhipError\w+|HIP error: "
    ),
    "coordination service": (
        r"heartbeat timeout|has been set to ERROR in coordination service"
        r"|DEADLINE_EXCEEDED: Barrier timed out|Polled an error from coordination service"
        r"|stopped sending heartbeats|cluster registration failed"
    ),
    "checkpoint failed": (
        r"Training stopped: Checkpointing failed|Save Finalize thread \(save_finalize\) failed"
        r"|(?:\[Errno \d+\]|ENOLCK|No locks available).{0,300}?manifest\.ocdbt\.__lock"
    ),
    "tpu failure": (
        r"detected TPU session error|Detected failure SLICE_FAILURE_\w+"
        r"|A program or fatal error occurred, all pending programs will fail"
    ),
}

# Always applied, whatever the config says; their hits are fatal.
ALWAYS_ON_PATTERNS: dict[str, str] = {
    "python traceback": r"Traceback \(most recent call last\):",
    "fatal python error": r"Fatal Python error:",
    "segmentation fault": r"Segmentation fault",
    "distributed service fatal": (
        r"Terminating process because the (?:JAX\s+distributed|coordination)\s+service\s+detected\s+fatal"
        r"\s+errors"
    ),
    "collective termination timeout": r"Termination timeout for `.*?` of \d+ seconds exceeded",
    "nan/inf abort": r"Aborting training due to (?:NaN|Inf) loss|FloatingPointError: invalid value",
    "maxtext config error": r"MAXTEXT CONFIG ERROR",
}

# Lines that look like errors but are not: shown as warnings, and they veto default/config hits in the
# same record (a cuInit failure on a host without CUDA must not fail a run).
BENIGN_PATTERNS: dict[str, str] = {
    "cuInit failure": r"failed call to cuInit",
    "cuda factory registration": r"Unable to register cu(?:FFT|DNN|BLAS) factory",
    "computation placer": r"computation placer already registered",
    "rocm smi metrics": r"rsmi_dev_gpu_metrics_info_get failed|Could not determine PCIe bandwidth",
    "thread unstuck": r"This thread is unstuck",
    "thread may be stuck": r"This thread has been waiting for .{0,300}? and may be stuck",
}

# Literals shorter than this filter too little to be worth a scan; such a pattern is searched fully.
_MIN_LITERAL = 3


@dataclass(frozen=True, slots=True)
class Signature:
    name: str
    regex: re.Pattern[bytes]
    severity: Severity
    origin: str  # builtin | config | always | benign
    # any one of these (lower-cased) must occur in a matching record; None = no usable literal
    literals: tuple[bytes, ...] | None


def compile_signatures(error_patterns: dict[str, str] | None) -> list[Signature]:
    """The signatures a parser applies: defaults (or the config's set), always-on and benign.

    A pattern that does not compile is skipped: reporting it is the config loader's job.
    """
    try:
        key = None if error_patterns is None else tuple(error_patterns.items())
        return list(_compiled(key))
    except TypeError:  # unhashable values: compile without the cache
        return list(_compile_all(error_patterns))


@lru_cache(maxsize=32)
def _compiled(key: tuple[tuple[str, str], ...] | None) -> tuple[Signature, ...]:
    return _compile_all(None if key is None else dict(key))


def _compile_all(error_patterns: dict[str, str] | None) -> tuple[Signature, ...]:
    out: list[Signature] = []
    replaceable = DEFAULT_ERROR_PATTERNS if error_patterns is None else error_patterns
    origin = "builtin" if error_patterns is None else "config"
    groups: list[tuple[dict[str, str], Severity, str]] = [
        (replaceable, Severity.FATAL, origin),
        (ALWAYS_ON_PATTERNS, Severity.FATAL, "always"),
        (BENIGN_PATTERNS, Severity.WARNING, "benign"),
    ]
    for patterns, severity, org in groups:
        for name, pattern in patterns.items():
            # a config's set holds the built-in patterns it runs beside: those keep their origin
            builtin = org == "config" and DEFAULT_ERROR_PATTERNS.get(str(name)) == pattern
            sig = _compile_one(str(name), pattern, severity, "builtin" if builtin else org)
            if sig is not None:
                out.append(sig)
    return tuple(out)


def _compile_one(name: str, pattern: object, severity: Severity, origin: str) -> Signature | None:
    if not isinstance(pattern, str) or not pattern:
        return None
    try:
        raw = pattern.encode("utf-8")
        regex = re.compile(raw, re.IGNORECASE)
        literals = necessary_literals(raw)
    except (re.error, ValueError, OverflowError, RecursionError, UnicodeError):
        return None
    return Signature(name, regex, severity, origin, literals)


def necessary_literals(pattern: bytes) -> tuple[bytes, ...] | None:
    """Lower-cased literals one of which every match of ``pattern`` contains, or None if unknown."""
    tree = _sre_parse.parse(pattern, 0)
    alts = _seq_literals(list(tree))
    if not alts or min(len(a) for a in alts) < _MIN_LITERAL:
        return None
    return tuple(sorted(set(alts)))


def _seq_literals(items: list) -> list[bytes] | None:
    """Best necessary-literal alternative set for a sequence of regex nodes (None when none)."""
    best: list[bytes] | None = None
    run = bytearray()

    def consider(cand: list[bytes] | None) -> None:
        nonlocal best
        if cand and (best is None or min(map(len, cand)) > min(map(len, best))):
            best = cand

    for op, av in items:
        if op is _sre_c.LITERAL:
            run.append(av & 0xFF if av < 256 else 0x3F)
            if av >= 256:  # not representable in a bytes pattern; end the run
                consider([bytes(run[:-1]).lower()] if len(run) > 1 else None)
                run.clear()
            continue
        consider([bytes(run).lower()] if run else None)
        run.clear()
        if op is _sre_c.SUBPATTERN:
            consider(_seq_literals(list(av[-1])))
        elif op is _sre_c.BRANCH:
            alts: list[bytes] = []
            for branch in av[1]:
                sub = _seq_literals(list(branch))
                if not sub:
                    alts = []
                    break
                alts.extend(sub)
            consider(alts or None)
        elif op in (_sre_c.MAX_REPEAT, _sre_c.MIN_REPEAT, getattr(_sre_c, "POSSESSIVE_REPEAT", None)):
            lo, _hi, body = av
            if lo >= 1:
                consider(_seq_literals(list(body)))
        elif op is getattr(_sre_c, "ATOMIC_GROUP", None):
            consider(_seq_literals(list(av)))
        # anything else (IN, ANY, AT, ASSERT, GROUPREF, ...) just breaks the literal run
    consider([bytes(run).lower()] if run else None)
    return best
