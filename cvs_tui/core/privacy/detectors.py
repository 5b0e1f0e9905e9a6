"""Find and scrub private facts in exported artefacts: hosts, addresses, users, paths, buckets, tokens, jobs.

Two sources of private values:
- a denylist built from the run context (cluster hosts and addresses, users, config `paths`, container
  volume sources, container names, the HF token's value held in memory only) plus caller terms;
- generic detectors (IPv4/IPv6, MAC, emails, cloud URIs, home and cluster-filesystem paths, token formats,
  scheduler and pod names).

The checker reports where a value is and its category, never the value. The scrubber replaces each value
with a placeholder (`<host-1>`, `<ip-2>`, `<user>`, `<home>`, `<bucket-1>`, `<token>`, `<email-1>`,
`<job-1>`) that stays the same for the same value across every file of one `Scrubber`, then re-checks its
output. `card` mode adds the stricter rules for validation cards (no URLs, no absolute paths, no loopback).
"""

from __future__ import annotations

import html
import ipaddress
import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from cvs_tui.core.errors import UserError

Mode = Literal["log", "card"]

# Placeholder family per category; a family without a number ("user", "home", "token") is one placeholder.
_FAMILY: dict[str, str] = {
    "host": "host",
    "ip": "ip",
    "mac": "mac",
    "user": "user",
    "home": "home",
    "path": "path",
    "container": "container",
    "bucket": "bucket",
    "email": "email",
    "token": "token",
    "job": "job",
    "term": "private",
}
_SINGLE = {"home", "token"}  # one placeholder for every value: nothing to cross-reference
# Account names every machine has: not private, and too common as words ("root_cause_node") to scrub.
SYSTEM_USERS = frozenset({"root", "admin", "user", "ubuntu", "nobody", "runner", "centos", "ec2-user"})
# Host sides of volumes that are system locations, not private storage.
_SYSTEM_PREFIXES = (
    "/dev",
    "/usr",
    "/lib",
    "/lib64",
    "/sys",
    "/proc",
    "/etc",
    "/opt",
    "/bin",
    "/sbin",
    "/run",
)
_LOCAL_HOSTS = {"localhost", "local", "127.0.0.1", "::1"}
_PLACEHOLDER = re.compile(
    r"<(?:host|ip|mac|user|home|path|container|bucket|email|token|job|private)(?:-\d+)?>"
)
_ALNUM = "A-Za-z0-9"


@dataclass(frozen=True)
class DenyTerm:
    """One private value from the run context or the caller. ``group`` ties aliases (short host name and
    FQDN) to one placeholder."""

    value: str
    category: str
    group: str = ""


@dataclass(frozen=True)
class PrivacyContext:
    """The denylist for one export. Build it with ``build_context``; ``terms`` never leave memory."""

    terms: tuple[DenyTerm, ...] = ()

    def merged(self, other: PrivacyContext) -> PrivacyContext:
        seen = {t.value.lower() for t in self.terms}
        return PrivacyContext(self.terms + tuple(t for t in other.terms if t.value.lower() not in seen))

    def __repr__(self) -> str:  # the values are private: never in a repr, log or traceback
        return f"PrivacyContext({len(self.terms)} terms)"


@dataclass(frozen=True)
class Finding:
    line: int  # 1-based
    col: int  # 1-based
    category: str
    term_no: int | None = None  # 1-based index into the context's terms, for denylist hits

    def describe(self) -> str:
        if self.term_no is not None:
            return f"{self.category} (matched private term #{self.term_no})"
        return self.category


@dataclass(frozen=True)
class _Hit:
    start: int
    end: int
    category: str
    value: str
    term_no: int | None = None
    group: str = ""


# ---------------------------------------------------------------------------------------------------------
# context
# ---------------------------------------------------------------------------------------------------------
def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text.strip("[]"))
    except ValueError:
        return False
    return True


def _path_term(path: str) -> str | None:
    """A private path worth denylisting: absolute, not the root or a system location, no placeholder."""
    p = path.strip().rstrip("/")
    if not p.startswith("/") or "{" in p or p.count("/") < 1 or len(p) < 3:
        return None
    if any(p == s or p.startswith(s + "/") for s in _SYSTEM_PREFIXES) or p in ("/tmp", "/home", "/workspace"):
        return None
    return p


def read_terms_file(path: str | os.PathLike[str]) -> list[str]:
    """Caller terms, one per line; blank lines and `#` comments are skipped."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise UserError(f"--denylist: cannot read {p} ({exc.strerror or exc}); pass a text file") from None
    except UnicodeDecodeError:
        raise UserError(f"--denylist: {p} is not UTF-8 text; one term per line") from None
    return [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.strip().startswith("#")]


def _token_value(token_file: str | None) -> str | None:
    if not token_file or "{" in token_file:
        return None
    try:
        value = Path(os.path.expanduser(token_file)).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return value if len(value) >= 8 else None


class _Terms:
    def __init__(self) -> None:
        self.items: list[DenyTerm] = []
        self._seen: set[str] = set()

    def add(self, value: Any, category: str, group: str = "") -> None:
        if not isinstance(value, str):
            return
        v = value.strip()
        if len(v) < 2 or v.lower() in self._seen or _PLACEHOLDER.fullmatch(v):
            return
        if category == "user" and v.lower() in SYSTEM_USERS:
            return
        if category == "host":
            if v.lower() in _LOCAL_HOSTS:
                return
            if _is_ip(v):
                category = "ip"
        self._seen.add(v.lower())
        self.items.append(DenyTerm(v, category, group or v.lower()))

    def host(self, name: Any) -> None:
        if not isinstance(name, str) or not name.strip():
            return
        h = name.strip().strip("[]")
        self.add(h, "host")
        short = h.split(".", 1)[0]
        if "." in h and not _is_ip(h) and len(short) >= 3:
            self.add(short, "host", group=h.lower())  # the short name gets the FQDN's placeholder


def build_context(
    *,
    loaded: Any = None,
    cluster: Any = None,
    plan: Mapping[str, Any] | None = None,
    results: Any = None,
    deny_terms: Sequence[str] = (),
    denylist_files: Sequence[str | os.PathLike[str]] = (),
    environ: Mapping[str, str] | None = None,
) -> PrivacyContext:
    """The denylist for an export from whatever run context is at hand.

    ``loaded`` (LoadedConfig): `paths`, volume sources, container name, the HF token file's value.
    ``cluster`` (Cluster): hosts, users, key/known-hosts paths. ``plan`` (a plan.json dict): the same facts
    as a live run recorded them. ``results`` (Results): hosts. ``environ``: the local user, $HOME and token
    variables (default os.environ; pass {} to leave the local machine out). Caller terms come first, so
    their numbers in findings match the order they were given.
    """
    env = os.environ if environ is None else environ
    t = _Terms()
    for term in deny_terms:
        t.add(term, "term")
    for f in denylist_files:
        for term in read_terms_file(f):
            t.add(term, "term")
    token_files: list[str] = []
    if cluster is not None:
        t.add(getattr(cluster, "user", None), "user")
        for node in getattr(cluster, "nodes", []):
            if not getattr(node, "local", False):
                t.host(node.host)
            t.add(getattr(node, "user", None), "user")
            t.add(_path_term(getattr(node, "key_file", None) or ""), "path")
        t.add(_path_term(getattr(cluster, "known_hosts", None) or ""), "path")
    if plan is not None:
        t.add(plan.get("user"), "user")
        for node in plan.get("nodes") or []:
            if isinstance(node, Mapping):
                t.host(node.get("host"))
                t.add(node.get("user"), "user")
        coord = plan.get("coordinator")
        if isinstance(coord, str):
            t.host(coord)
        paths = plan.get("paths") or {}
        if isinstance(paths, Mapping):
            for v in paths.values():
                t.add(_path_term(v) if isinstance(v, str) else None, "path")
            token_files.append(str(paths.get("hf_token_file") or ""))
        t.add(plan.get("container_name"), "container")
        args = plan.get("container_args") or {}
        if isinstance(args, Mapping):
            _volume_terms(args.get("volumes"), t)
    if loaded is not None:
        cfg = loaded.config
        for v in cfg.paths.as_dict().values():
            t.add(_path_term(v), "path")
        token_files.append(cfg.paths.hf_token_file)
        t.add(cfg.container.name, "container")
        _volume_terms(cfg.container.runtime.args.get("volumes"), t)
        t.add(_path_term(str(Path(loaded.path).parent)), "path")
    if results is not None:
        for h in getattr(results, "hosts", []) or []:
            if isinstance(h, str) and not h.endswith(
                ".log"
            ):  # analyze without a plan names hosts by log file
                t.host(h)
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HUGGINGFACE_TOKEN"):
        if len(env.get(name, "")) >= 8:
            t.add(env[name], "token")
    if env:
        t.add(env.get("USER") or env.get("LOGNAME"), "user")
        t.add(_path_term(env.get("HOME", "")), "home")
    for tf in token_files:
        t.add(_token_value(tf), "token")  # compared in memory only; never written anywhere
    return PrivacyContext(tuple(t.items))


def _volume_terms(volumes: Any, t: _Terms) -> None:
    if isinstance(volumes, str):
        volumes = [volumes]
    for v in volumes or []:
        if isinstance(v, str) and ":" in v:
            t.add(_path_term(v.split(":", 1)[0]), "path")


def context_from_run_folder(
    run_dir: str | os.PathLike[str], *, environ: Mapping[str, str] | None = None
) -> PrivacyContext:
    """The denylist a run folder carries itself: plan.json's nodes, user, paths and container facts, and
    results.json's hosts."""
    d = Path(run_dir)
    plan = _read_json(d / "plan.json")
    results = _read_json(d / "results.json")
    ctx = build_context(plan=plan if isinstance(plan, dict) else None, environ=environ)
    if isinstance(results, dict):
        t = _Terms()
        for h in results.get("hosts") or []:
            if isinstance(h, str) and not h.endswith(".log"):
                t.host(h)
        ctx = ctx.merged(PrivacyContext(tuple(t.items)))
    return ctx


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return None


# ---------------------------------------------------------------------------------------------------------
# detectors
# ---------------------------------------------------------------------------------------------------------
_IPV4 = re.compile(r"(?<![\w.])(\d{1,3}(?:\.\d{1,3}){3})(?![\w.]*\d)(?!\.\w)")
_IPV6 = re.compile(
    r"\[([0-9A-Fa-f:.]{2,45})\]|(?<![\w:.])([0-9A-Fa-f]{0,4}(?::[0-9A-Fa-f]{0,4}){2,7}(?:\.\d+){0,3})(?![\w:])"
)
_MAC = re.compile(r"(?<![\w:-])((?:[0-9A-Fa-f]{2}[:-]){5}[0-9A-Fa-f]{2})(?![\w:-])")
_EMAIL = re.compile(r"(?<![\w.%+-])([A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,})")
_CLOUD = re.compile(r"\b((?:gs|s3|s3a|s3n|az|abfss?|wasbs?|hdfs|oss|r2)://[^\s/'\"<>`)\]}]+)", re.I)
_URL_CRED = re.compile(r"\b[a-z][a-z0-9+.-]*://([^\s/@'\"<>]+:[^\s/@'\"<>]+)@", re.I)
_HOME = re.compile(r"(?<![\w.~-])((?:/home|/Users)/[^/\s'\"<>:;,)\]}]+|/root)(?![\w.-])")
_CLUSTER_FS = re.compile(r"(?<![\w.~-])(/(?:lustre|gpfs|scratch|mnt|data|nfs)/[^/\s'\"<>:;,)\]}]+)")
_TOKENS = re.compile(
    r"(hf_[A-Za-z0-9]{30,}|gh[pousr]_[A-Za-z0-9]{36,}|github_pat_\w{20,}|AKIA[0-9A-Z]{16}|xox[abprs]-[\w-]{10,}"
    r"|eyJ[\w-]{8,}\.[\w-]{8,}\.[\w-]{8,}|-----BEGIN [A-Z ]*PRIVATE KEY-----)"
)
_BEARER = re.compile(r"\bBearer\s+([A-Za-z0-9._~+/=-]{8,})")
_SECRET_ASSIGN = re.compile(
    r"(?i)\b[\w-]*(?:token(?!iz)|api[_-]?key|secret|password|passwd)['\"]?\s*[:=]\s*['\"]?([^\s'\",;}]+)"
)
_SLURM = re.compile(r"\bSLURM_[A-Z_]+=(\S+)")
_JOB_ID = re.compile(r"(?i)\bjob[_ -]?id\b['\"]?\s*[:=#]?\s*['\"]?(\d{3,})")
_SCHED_FLAG = re.compile(r"--(?:nodelist|partition|account|reservation|qos)[= ]+(\S+)")
_POD = re.compile(
    r"\b([a-z0-9][a-z0-9-]*-slice-job-\d+-\d+(?:-[a-z0-9]{5})?)\b|\b([a-z0-9-]+-[0-9a-f]{9,10}-[a-z0-9]{5})\b"
)
# card mode only: a card holds no wiring at all
_CARD_RULES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"\b[a-z][a-z0-9+.-]*://", re.I), "url"),
    (re.compile(r"(?<![\w.~])/[A-Za-z0-9_.-]+/[^\s'\"]*"), "absolute path"),
    (re.compile(r"~/"), "home path"),
    (re.compile(r"\.\./"), "relative parent path"),
    (re.compile(r"(?i)\bcluster\b"), "cluster word"),
    (re.compile(r"(?i)\b(?:ssh|scp|sftp)\b"), "remote shell"),
    (re.compile(r"\$\{?[A-Za-z_][A-Za-z0-9_]*"), "variable reference"),
    (re.compile(r"\b[\w.-]+@[\w.-]+:"), "user@host"),
    (re.compile(r"(?i)\b(?:HF_TOKEN|ACCESS_TOKEN|API_KEY|PASSWORD|SECRET)\s*[:=]"), "credential"),
    (
        re.compile(
            r"\b[a-z0-9-]+(?:\.[a-z0-9-]+)*\.(?:com|net|org|io|ai|dev|cloud|internal|local|lan|corp)(?::\d+)?/",
            re.I,
        ),
        "registry reference",
    ),
)


def _ipv4_hits(text: str, mode: Mode) -> Iterable[_Hit]:
    for m in _IPV4.finditer(text):
        v = m.group(1)
        try:
            addr = ipaddress.IPv4Address(v)
        except ValueError:
            continue
        before = text[max(0, m.start() - 8) : m.start()].lower()
        # 0.x.y.z is never a host address; it is what a version like jax 0.12.0.1 looks like
        if v.startswith("0.") or before.endswith(("v", "==", "version ", "version=", "version: ")):
            continue
        if mode == "log" and (addr.is_loopback or addr.is_unspecified):
            continue
        yield _Hit(m.start(1), m.end(1), "ip", v)


def _ipv6_hits(text: str, mode: Mode) -> Iterable[_Hit]:
    for m in _IPV6.finditer(text):
        g = 1 if m.group(1) is not None else 2
        v = m.group(g)
        if v.count(":") < 2:
            continue
        try:
            addr = ipaddress.IPv6Address(v)
        except ValueError:
            continue
        if v == "::" and g == 2:
            continue  # a bare `::` is C++ scope syntax in native logs
        if mode == "log" and (addr.is_loopback or addr.is_unspecified):
            continue
        yield _Hit(m.start(g), m.end(g), "ip", v)


def _group_hits(rx: re.Pattern[str], text: str, category: str) -> Iterable[_Hit]:
    for m in rx.finditer(text):
        g = next((i for i in range(1, (rx.groups or 0) + 1) if m.group(i) is not None), 0)
        value = m.group(g)
        if category == "token" and rx is _SECRET_ASSIGN:
            low = value.lower()
            if (
                _PLACEHOLDER.fullmatch(value)
                or low in ("none", "null", "true", "false", "***", "")
                or (value.replace(".", "").isdigit())
            ):
                continue
            if value.startswith("<") or set(value) <= {"*"}:
                continue
        yield _Hit(m.start(g), m.end(g), category, value)


def _term_regex(term: DenyTerm) -> re.Pattern[str]:
    flags = 0 if term.category == "token" else re.IGNORECASE
    return re.compile(rf"(?<![{_ALNUM}]){re.escape(term.value)}(?![{_ALNUM}])", flags)


class _Detector:
    def __init__(self, context: PrivacyContext) -> None:
        self.context = context
        self._terms = [(i + 1, t, _term_regex(t)) for i, t in enumerate(context.terms)]

    def hits(self, text: str, mode: Mode = "log") -> list[_Hit]:
        found: list[_Hit] = []
        for no, term, rx in self._terms:
            found += [
                _Hit(m.start(), m.end(), term.category, term.value, no, term.group) for m in rx.finditer(text)
            ]
        found += _ipv4_hits(text, mode)
        found += _ipv6_hits(text, mode)
        for rx, cat in (
            (_MAC, "mac"),
            (_EMAIL, "email"),
            (_CLOUD, "bucket"),
            (_URL_CRED, "token"),
            (_HOME, "home"),
            (_CLUSTER_FS, "path"),
            (_TOKENS, "token"),
            (_BEARER, "token"),
            (_SECRET_ASSIGN, "token"),
            (_SLURM, "job"),
            (_JOB_ID, "job"),
            (_SCHED_FLAG, "job"),
            (_POD, "job"),
        ):
            found += _group_hits(rx, text, cat)
        # placeholders are never private (a scrubbed file must re-check clean)
        spans = [(m.start(), m.end()) for m in _PLACEHOLDER.finditer(text)]
        if spans:
            found = [h for h in found if not any(s <= h.start and h.end <= e for s, e in spans)]
        return _resolve_overlaps(found)


def _resolve_overlaps(hits: list[_Hit]) -> list[_Hit]:
    """Earliest start wins; at the same start the longest; denylist terms beat detectors on ties."""
    hits.sort(key=lambda h: (h.start, -(h.end - h.start), h.term_no is None))
    out: list[_Hit] = []
    end = -1
    for h in hits:
        if h.start >= end:
            out.append(h)
            end = h.end
    return out


def _line_starts(text: str) -> list[int]:
    starts = [0]
    starts += [m.end() for m in re.finditer(r"\n", text)]
    return starts


def _position(starts: list[int], offset: int) -> tuple[int, int]:
    import bisect

    i = bisect.bisect_right(starts, offset) - 1
    return i + 1, offset - starts[i] + 1


def find_private(text: str, context: PrivacyContext | None = None, *, mode: Mode = "log") -> list[Finding]:
    """Every private value in ``text`` as (line, col, category); the values themselves are not returned."""
    det = _Detector(context or PrivacyContext())
    starts = _line_starts(text)
    out = [Finding(*_position(starts, h.start), h.category, h.term_no) for h in det.hits(text, mode)]
    if mode == "card":
        taken = {(f.line, f.col) for f in out}
        for rx, cat in _CARD_RULES:
            for m in rx.finditer(text):
                line, col = _position(starts, m.start())
                if (line, col) not in taken:
                    out.append(Finding(line, col, cat))
                    taken.add((line, col))
        out.sort(key=lambda f: (f.line, f.col))
    return out


def read_text_lossless(path: Path) -> tuple[str, bool]:
    """(text, is_utf8): binary files are read as latin-1 so every byte can still be searched."""
    data = path.read_bytes()
    try:
        return data.decode("utf-8"), True
    except UnicodeDecodeError:
        return data.decode("latin-1"), False


def check_files(
    paths: Sequence[str | os.PathLike[str]], context: PrivacyContext | None = None, *, mode: Mode = "log"
) -> list[str]:
    """`file:line:col category` for every private value in ``paths`` (folders are walked)."""
    lines: list[str] = []
    for f in _expand(paths):
        try:
            text, _ = read_text_lossless(f)
        except OSError as exc:
            raise UserError(f"{f}: cannot read ({exc.strerror or exc})") from None
        lines += [f"{f}:{x.line}:{x.col} {x.describe()}" for x in find_private(text, context, mode=mode)]
    return lines


def _expand(paths: Sequence[str | os.PathLike[str]]) -> list[Path]:
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            out += sorted(x for x in p.rglob("*") if x.is_file() and not x.is_symlink())
        elif p.is_file():
            out.append(p)
        else:
            raise UserError(f"{p}: no such file or folder")
    return out


# ---------------------------------------------------------------------------------------------------------
# scrubber
# ---------------------------------------------------------------------------------------------------------
@dataclass
class ScrubReport:
    """What one scrub did. ``leftovers`` are `file:line:col category` lines the re-check still found (the
    export is not clean when any exist); ``files`` maps each input to the file written."""

    files: dict[str, str] = field(default_factory=dict)
    replaced: dict[str, int] = field(default_factory=dict)  # category -> count
    leftovers: list[str] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return not self.leftovers


class Scrubber:
    """Replaces private values with placeholders, the same placeholder for the same value across every
    text given to this instance. The value -> placeholder table stays in memory."""

    def __init__(self, context: PrivacyContext | None = None) -> None:
        self.context = context or PrivacyContext()
        self._detector = _Detector(self.context)
        self._table: dict[tuple[str, str], str] = {}
        self._counts: dict[str, int] = {}
        self.replaced: dict[str, int] = {}

    def placeholder(self, category: str, value: str, group: str = "") -> str:
        family = _FAMILY.get(category, "private")
        key = (family, (group or value).lower() if family != "token" else value)
        if key not in self._table:
            if family in _SINGLE:
                self._table[key] = f"<{family}>"
            elif family == "user":
                n = self._counts.get(family, 0) + 1
                self._counts[family] = n
                self._table[key] = "<user>" if n == 1 else f"<user-{n}>"
            else:
                n = self._counts.get(family, 0) + 1
                self._counts[family] = n
                self._table[key] = f"<{family}-{n}>"
        return self._table[key]

    def scrub_text(self, text: str, *, markup: bool = False) -> str:
        """``text`` with every private value replaced; ``markup`` escapes the placeholder for HTML/XML.

        Replacing a value can expose a new match at its edge (`host::b` leaves `>::b`, an IPv6 address),
        so passes repeat until nothing is found (a few at most)."""
        for _ in range(8):
            out = self._scrub_once(text, markup)
            if out == text:
                break
            text = out
        return text

    def _scrub_once(self, text: str, markup: bool) -> str:
        parts: list[str] = []
        pos = 0
        for h in self._detector.hits(text, "log"):
            ph = self.placeholder(h.category, h.value, h.group)
            parts += [text[pos : h.start], html.escape(ph) if markup else ph]
            pos = h.end
            self.replaced[h.category] = self.replaced.get(h.category, 0) + 1
        parts.append(text[pos:])
        return "".join(parts)

    def check_text(self, text: str) -> list[Finding]:
        return find_private(text, self.context, mode="log")


_MARKUP_SUFFIXES = {".html", ".htm", ".xml", ".svg"}


def _scrub_one(scrubber: Scrubber, src: Path, dest: Path, report: ScrubReport) -> None:
    text, utf8 = read_text_lossless(src)
    dest.parent.mkdir(parents=True, exist_ok=True)
    if not utf8:  # a binary file cannot be rewritten safely: copy it and let the re-check judge it
        if src != dest:
            shutil.copyfile(src, dest)
        return
    out = scrubber.scrub_text(text, markup=src.suffix.lower() in _MARKUP_SUFFIXES)
    if src == dest and out == text:
        return
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
            fh.write(out)
        if src.exists():
            os.chmod(tmp, src.stat().st_mode & 0o777)
        os.replace(tmp, dest)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def scrub_files(
    paths: Sequence[str | os.PathLike[str]],
    context: PrivacyContext | None = None,
    *,
    out_dir: str | os.PathLike[str] | None = None,
    in_place: bool = False,
    scrubber: Scrubber | None = None,
) -> ScrubReport:
    """Scrub files and folders into ``out_dir`` (a folder argument keeps its name and layout there; file
    names are scrubbed too) or in place, then re-check every output. One placeholder table for all."""
    if (out_dir is None) == (not in_place):
        raise UserError("scrub: pass exactly one of --out DIR or --in-place")
    sc = scrubber or Scrubber(context)
    report = ScrubReport()
    jobs: list[tuple[Path, Path]] = []
    for p in map(Path, paths):
        if not p.exists():
            raise UserError(f"{p}: no such file or folder")
        files = _expand([p])
        base = p if p.is_dir() else p.parent
        for f in files:
            rel = f.relative_to(base)
            if in_place:
                dest_rel = Path(*[sc.scrub_text(part) for part in rel.parts])
                jobs.append((f, base / dest_rel))
            else:
                top = [sc.scrub_text(p.name)] if p.is_dir() else []
                dest_rel = Path(*top, *[sc.scrub_text(part) for part in rel.parts])
                jobs.append((f, Path(out_dir) / dest_rel))  # type: ignore[arg-type]
    if out_dir is not None:
        dests = [d.resolve() for _, d in jobs]
        if len(set(dests)) != len(dests):
            raise UserError(
                f"--out {out_dir}: two inputs would be written to the same file; scrub them apart"
            )
        for src, dest in jobs:
            if dest.resolve() == src.resolve():
                raise UserError(f"--out {out_dir}: would overwrite its input {src}; use --in-place for that")
    for src, dest in jobs:
        _scrub_one(sc, src, dest, report)
        if in_place and dest != src:
            src.unlink()
            _drop_empty_parents(src.parent, stop=[Path(p) for p in paths])
        report.files[str(src)] = str(dest)
    report.replaced = dict(sc.replaced)
    report.leftovers = check_files([d for _, d in jobs], sc.context)
    return report


def _drop_empty_parents(folder: Path, stop: list[Path]) -> None:
    """Remove folders a rename emptied (their names may be private), up to the folders given."""
    stops = {p.resolve() for p in stop}
    while folder.resolve() not in stops and folder.is_dir() and not any(folder.iterdir()):
        folder.rmdir()
        folder = folder.parent


def scrub_run_folder(run_dir: Path, context: PrivacyContext) -> ScrubReport:
    """Scrub every artefact of a run folder in place (results.json, events.jsonl, plan.json, report.html,
    junit.xml, summary.md, logs/**) with one placeholder table, file names included, and re-check the
    result. ``context`` is merged with what the folder itself records (plan.json, results.json hosts).
    The caller fails the export when ``report.clean`` is False."""
    d = Path(run_dir)
    if not d.is_dir():
        raise UserError(f"{d}: not a run folder")
    ctx = context.merged(context_from_run_folder(d, environ={}))
    return scrub_files([d], ctx, in_place=True)


__all__ = [
    "DenyTerm",
    "Finding",
    "PrivacyContext",
    "ScrubReport",
    "Scrubber",
    "build_context",
    "check_files",
    "context_from_run_folder",
    "find_private",
    "read_terms_file",
    "scrub_files",
    "scrub_run_folder",
]
