"""Error hits grouped into incidents: hits a few lines apart on one node are one event with one label.

One out-of-memory failure matches five signatures on two lines (`gpu fault`, `resource`, `jax runtime
error`, `out of memory`, `python traceback`). Shown as five rows, the first label wins by accident. Here
they become one incident, labelled by the most specific signature, with the others kept as tags and the
hits (and so the lines) behind it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cvs_tui.core.events import ErrorHit, Severity
from cvs_tui.core.state import ErrorRow

GROUP_LINES = 5  # a hit within this many lines of the incident's last hit on the same node joins it

# Most telling first. A signature not listed ranks between these and GENERIC (a config's own pattern
# names something specific); generic ones only label an incident when nothing else matched.
SPECIFIC: tuple[str, ...] = (
    "out of memory",
    "resource",
    "nan/inf abort",
    "maxtext config error",
    "NCCL ERROR",
    "nccl op failed",
    "collective termination timeout",
    "GPU HW ERROR",
    "segfault",
    "segmentation fault",
    "fatal python error",
    "coordination service",
    "distributed service fatal",
    "tensorflow",
)
GENERIC: tuple[str, ...] = (
    "gpu fault",
    "rocm Err",
    "jax runtime error",
    "AssertionError",
    "python err",
    "python traceback",
)
_OOM_WORDS = ("out of memory", "outofmemory", "resource_exhausted")


def label_rank(name: str, text: str) -> int:
    """Lower is more telling. A generic hit whose text says out-of-memory ranks as `out of memory`."""
    if name in SPECIFIC:
        return SPECIFIC.index(name)
    folded = text.lower()
    if any(w in folded for w in _OOM_WORDS):
        return 0
    if name in GENERIC:
        return 100 + GENERIC.index(name)
    return 50


def label_of(name: str, text: str) -> str:
    if name not in SPECIFIC and any(w in text.lower() for w in _OOM_WORDS):
        return "out of memory"
    return name


@dataclass
class Incident:
    run: str
    node: int
    hits: list[ErrorRow] = field(default_factory=list)

    @property
    def first_line(self) -> int:
        return min(r.hit.line for r in self.hits)

    @property
    def last_line(self) -> int:
        return max(r.hit.line for r in self.hits)

    @property
    def severity(self) -> Severity:
        fatal = any(r.hit.severity is Severity.FATAL for r in self.hits)
        return Severity.FATAL if fatal else Severity.WARNING

    @property
    def lead(self) -> ErrorRow:
        """The hit that names the incident: the most telling signature, the earliest on a tie."""
        return min(
            self.hits,
            key=lambda r: (
                r.hit.severity is not Severity.FATAL,
                label_rank(r.hit.name, r.hit.text),
                r.hit.line,
                r.seq,
            ),
        )

    @property
    def hit(self) -> ErrorHit:
        """The lead hit (its line is where Enter jumps)."""
        return self.lead.hit

    @property
    def label(self) -> str:
        lead = self.lead.hit
        return label_of(lead.name, lead.text)

    @property
    def tags(self) -> list[str]:
        """The other signatures that matched, each once, most telling first."""
        label = self.label
        seen: dict[str, int] = {}
        for r in self.hits:
            if r.hit.name != label and r.hit.name != self.lead.hit.name:
                seen.setdefault(r.hit.name, label_rank(r.hit.name, r.hit.text))
        return sorted(seen, key=lambda n: seen[n])

    @property
    def lines(self) -> str:
        a, b = self.first_line, self.last_line
        return str(a) if a == b else f"{a}-{b}"


def group_incidents(rows: list[ErrorRow], gap: int = GROUP_LINES) -> list[Incident]:
    """Incidents in order of their first hit's arrival; fatal incidents first."""
    open_: dict[tuple[str, int], Incident] = {}
    out: list[Incident] = []
    for row in sorted(rows, key=lambda r: r.seq):
        key = (row.run, row.node)
        inc = open_.get(key)
        if inc is None or row.hit.line - inc.last_line > gap or row.hit.line < inc.first_line - gap:
            inc = Incident(row.run, row.node)
            open_[key] = inc
            out.append(inc)
        inc.hits.append(row)
    return sorted(out, key=lambda i: i.severity is not Severity.FATAL)
