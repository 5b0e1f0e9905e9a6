"""Generic detectors for private values in log and report text, and the checker built on them.

Every pattern here runs in linear time on any input: a pattern that could start at every word boundary
of a long run (`a-a-a-…`, a base64url blob) is anchored to the start of the run with a look-behind and
its repeats are capped (audit #13; `benchmarks/privacy_redos.py` measures it). Each hit may carry values
to *learn*: a detected FQDN teaches its short name, a Slurm node list its expanded names, `/home/<u>` the
user `<u>`, a JobSet pod its JobSet name, so the same value is found wherever else it appears.
"""

from __future__ import annotations

import bisect
import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from cvs_tui.core.privacy import hosts, secret_rules
from cvs_tui.core.privacy.context import LOCAL_HOSTS, PLACEHOLDER, SYSTEM_USERS

Mode = Literal["log", "card"]
Learn = tuple[tuple[str, str, str], ...]  # (value, category, group)


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
class Hit:
    start: int
    end: int
    category: str
    value: str
    term_no: int | None = None
    group: str = ""
    learn: Learn = ()


_ALNUM = "A-Za-z0-9"
# the look-behind follows the first digit so the pattern starts with a digit (the engine skips to one)
_IPV4 = re.compile(r"(\d(?<![\w.]\d)\d{0,2}(?:\.\d{1,3}){3})(?![\w.]*\d)(?!\.\w)")
# in a file name `10.20.30.40.log` the address is followed by an extension: no look-ahead for one
IPV4_IN_NAME = re.compile(r"(?<![\d.])(\d{1,3}(?:\.\d{1,3}){3})(?!\.?\d)")
_IPV6 = re.compile(
    r"\[([0-9A-Fa-f:.]{2,45})\]|(?<![\w:.])([0-9A-Fa-f]{0,4}(?::[0-9A-Fa-f]{0,4}){2,7}(?:\.\d+){0,3})(?![\w:])"
)
_MAC = re.compile(r"(?<![\w:-])((?:[0-9A-Fa-f]{2}[:-]){5}[0-9A-Fa-f]{2})(?![\w:-])")
_EMAIL = re.compile(r"(?<![\w.%+-])([A-Za-z0-9._%+-]{1,64}@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,})")
_CLOUD = re.compile(r"\b((?:gs|s3|s3a|s3n|az|abfss?|wasbs?|hdfs|oss|r2)://[^\s/'\"<>`)\]}]+)", re.I)
# a bucket addressed by path on the public storage endpoints (the host itself stays readable)
_BUCKET_PATH = re.compile(
    r"(?<![\w.-])(?:storage\.googleapis\.com|storage\.cloud\.google\.com|s3[\w.-]{0,30}\.amazonaws\.com)"
    r"/([a-z0-9][a-z0-9._-]{1,220})",
    re.I,
)
_URL_CRED = re.compile(r"(?<![a-z0-9+.-])[a-z][a-z0-9+.-]{0,30}://([^\s/@'\"<>]{1,256}:[^\s/@'\"<>]+)@", re.I)
_HOME = re.compile(r"(?<![\w.~-])((?:/home|/Users)/([^/\s'\"<>:;,)\]}]+)|/root)(?![\w.-])")
# `C:\\Users\\carol`, also JSON-escaped (`C:\\\\Users\\\\carol`) and with forward slashes
_WIN_HOME = re.compile(
    r"(?i)(?<![\w])([A-Z]:(?:\\{1,2}|/)(?:Users|Documents and Settings)(?:\\{1,2}|/)"
    r"([^\\/\s'\"<>:;,|*?]{1,64}))"
)
_CLUSTER_FS = re.compile(r"(?<![\w.~-])(/(?:lustre|gpfs|scratch|mnt|data|nfs)/[^/\s'\"<>:;,)\]}]+)")
_PEM_BEGIN = re.compile(
    r"-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----|PuTTY-User-Key-File-\d{1,2}: [\w.@-]{1,64}"
)
_PEM_END = re.compile(r"-----END [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----")
# the line breaks a key body can come with: real ones, JSON and HTML escapes, and the end of one JSON string
# and the start of the next (a key whose lines are separate strings, as in an error record's context)
_PEM_BREAK = r'(?:\r?\n|\\{1,4}r\\{1,4}n|\\{1,4}n|<br\s*/?>|&#10;|\\{0,3}"[ \t]{0,8},\s{0,64}\\{0,3}")'
# no END line: the lines after BEGIN while they look like key material
_PEM_LINE = re.compile(
    _PEM_BREAK + r"(?:[A-Za-z-]{1,40}: [^\n\\<\"]{0,200}|[A-Za-z0-9+/=]{4,200}(?![^\s\\<&\"])(?!\"\s{0,8}:))"
)
_PEM_BREAKS = re.compile(_PEM_BREAK)
_PEM_HEADER = re.compile(r"(?m)^[ \t]*[A-Za-z-]{1,40}: [^\n\"]{0,200}$")
_KEY_WORD = re.compile(r"(?<![A-Za-z0-9+/=])[A-Za-z0-9+/=]{20,}")
_PEM_MATERIAL = re.compile(r"[A-Za-z0-9+/=\s]*")
_SLURM = re.compile(r"\b(SLURMD?_[A-Z_]{1,40})=([^\s'\",;}\]]+)")
_JOB_ID = re.compile(
    r"(?i)\bjob[_ -]?id\b['\"]?[^\S\n]{0,4}[:=#]?[^\S\n]{0,4}['\"]?(\d{3,})"
    r"|\b(?:batch |slurm )?job[^\S\n]{1,4}#?(\d{4,})\b"
    r"|\bslurm-(\d{3,})(?:_\d+)?\.(?:out|err|log)\b|\bStepId=(\d{3,})"
)
_SCHED_FLAG = re.compile(
    r"--(?:nodelist|partition|account|reservation|qos|workload|jobset|namespace|job-name)[= ]+([^\s'\"]+)"
)
_K8S_NAME = re.compile(
    r"(?i)(?<![A-Za-z0-9])(?:jobset-name|job-name|job_name|jobset_name|workload_name|replicatedjob-name"
    r"|pod-name|pod_name)['\"]?[^\S\n]{0,4}[:=][^\S\n]{0,4}['\"]?([a-z0-9][a-z0-9.-]{1,252})"
)
# JobSet pods (`<jobset>-slice-job-0-1`, `<jobset>-workers-0-3-x7k2p`), Deployment pods
# (`<name>-<hash>-<5>`) and Job pods (`<name>-<5>`): start of a name run only, repeats capped
_POD = re.compile(
    r"(?<![a-z0-9-])(([a-z0-9][a-z0-9-]{0,62}?)-(?:slice-job|job|worker|workers)-\d{1,4}-\d{1,5}"
    r"(?:-[a-z0-9]{5})?)(?![a-z0-9-])"
    r"|(?<![a-z0-9-])([a-z0-9][a-z0-9-]{0,62}?-[0-9a-z]{8,10}-[bcdfghjklmnpqrstvwxz2456789]{5})(?![a-z0-9-])"
    r"|(?<![a-z0-9-])([a-z0-9][a-z0-9-]{0,62}?-[bcdfghjklmnpqrstvwxz2456789]{5})(?![a-z0-9-])"
)
# StatefulSet pods and the pods of the training operators (PyTorchJob, MPIJob, TFJob, RayCluster)
_REPLICA_POD = re.compile(
    r"(?<![a-z0-9-])(([a-z0-9][a-z0-9-]{1,62}?)-(?:worker|workers|master|chief|ps|evaluator|launcher|head"
    r"|trainer|replica|server|leader|follower)-\d{1,5})(?![a-z0-9-])"
)
# a Kubernetes namespace given as `-n NAME`, `--namespace NAME` or `namespace: NAME`
_NAMESPACE = re.compile(
    r"(?<![\w-])(?:-n|--namespace)(?:[ \t]{1,4}|=)([a-z0-9][a-z0-9-]{0,62})(?![\w.-])"
    r"|(?<![\w-])(?i:namespace)['\"]?[ \t]{0,4}[:=][ \t]{0,4}['\"]?([a-z0-9][a-z0-9-]{0,62})(?![\w.-])"
)
_PUBLIC_NAMESPACES = frozenset({"default", "kube-system", "kube-public", "kube-node-lease"})
# an InfiniBand node/port/system GUID (`0x506b4b0300c8d1e2`, `506b:4b03:00c8:d1e2`): as unique as a MAC
_GUID = re.compile(
    r"(?i)guid[^\n0-9a-f]{0,16}(0x[0-9a-f]{16}|[0-9a-f]{4}(?::[0-9a-f]{4}){3})(?![\w:])"
    r"|(?<![\w:])([0-9a-f]{4}:[0-9a-f]{4}:[0-9a-f]{4}:[0-9a-f]{4})(?![\w:])"
)
_GKE_NODE = re.compile(r"(?<![a-z0-9-])(gke-[a-z0-9-]{1,80}?-[0-9a-f]{8}-[a-z0-9]{4})(?![a-z0-9-])")
_DOMAIN = re.compile(
    r"(?<![\w.@-])([A-Za-z0-9][A-Za-z0-9-]{0,62}(?:\.[A-Za-z0-9-]{1,63}){1,126})(?![\w-]|\.[\w-])"
)
# NCCL prefixes every line with `host:pid:tid [rank]`
_NCCL = re.compile(r"(?<![\w.:-])([A-Za-z][A-Za-z0-9_.-]{0,252}):\d{1,9}:\d{1,9} \[\d{1,5}\]")
_HOST_ASSIGN = re.compile(
    r"(?i)(?<![A-Za-z0-9])(addr|address|host|hostname|nodename|node_name|node|coordinator|head_node)"
    r"['\"]?[^\S\n]{0,4}[:=][^\S\n]{0,4}['\"]?([A-Za-z][A-Za-z0-9_.-]{0,252})"
)
_USER_ASSIGN = re.compile(
    r"(?i)(?<![A-Za-z0-9])(?:user|username|user_name|logname|login)['\"]?[^\S\n]{0,4}[:=][^\S\n]{0,4}['\"]?"
    r"([a-z_][a-z0-9_.-]{1,31})(?![\w.-])"
)
_SUSPECT = re.compile(
    r"(?<![\w.@/<-])([A-Za-z][A-Za-z0-9]{0,62}(?:-[A-Za-z0-9]{1,62}){0,8})(?![\w@>-]|\.[\w-])"
)
_WORDS = frozenset(
    [
        "none",
        "null",
        "true",
        "false",
        "unknown",
        "default",
        "any",
        "auto",
        "self",
        "str",
        "int",
        "float",
        "bool",
        "list",
        "dict",
        "unix",
        "tcp",
        "udp",
        "all",
        "localhost",
        "local",
        "n/a",
        "na",
    ]
)
_EXPLICIT_HOST_KEYS = frozenset({"addr", "address", "host", "hostname", "nodename", "node_name"})
_MAIL_ROLES = frozenset(
    [
        "noreply",
        "no-reply",
        "support",
        "admin",
        "info",
        "root",
        "security",
        "help",
        "team",
        "contact",
        "dev",
        "devnull",
        "postmaster",
    ]
)


def _ipv4_hits(text: str, mode: Mode) -> Iterable[Hit]:
    for m in _IPV4.finditer(text):
        v = m.group(1)
        before = text[max(0, m.start() - 8) : m.start()].lower()
        # 0.x.y.z is never a host address; it is what a version like jax 0.12.0.1 looks like
        if v.startswith("0.") or before.endswith(("v", "==", "version ", "version=", "version: ")):
            continue
        try:
            addr = ipaddress.IPv4Address(v)
        except ValueError:
            continue
        if mode == "log" and (addr.is_loopback or addr.is_unspecified):
            continue
        yield Hit(m.start(1), m.end(1), "ip", v)


def _ipv6_hits(text: str, mode: Mode) -> Iterable[Hit]:
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
        yield Hit(m.start(g), m.end(g), "ip", v)


def _group_hits(rx: re.Pattern[str], text: str, category: str) -> Iterable[Hit]:
    for m in rx.finditer(text):
        g = next((i for i in range(1, (rx.groups or 0) + 1) if m.group(i) is not None), 0)
        yield Hit(m.start(g), m.end(g), category, m.group(g))


def _pem_body(body: str) -> bool:
    """``body`` (what lies between BEGIN and END) is key material only: base64 lines, header lines and
    line breaks. Anything else (JSON keys, log text) means the END belongs to some other text (M4)."""
    flat = _PEM_HEADER.sub("", _PEM_BREAKS.sub("\n", body))
    return _PEM_MATERIAL.fullmatch(flat) is not None and all(len(w) >= 4 for w in flat.split())


def _pem_hits(text: str) -> Iterable[Hit]:
    """The whole private key block, BEGIN to END when only key material lies between them; otherwise
    BEGIN and the key lines after it (so a BEGIN and an END in different JSON strings never take the
    JSON between them)."""
    marks = [m.span() for m in _PEM_END.finditer(text)] if "-----END" in text else []
    ends = [e for _, e in marks]
    pos = 0
    while (m := _PEM_BEGIN.search(text, pos)) is not None:
        i = bisect.bisect_left(ends, m.end() + 1)
        end = m.end()
        near = i < len(ends) and ends[i] - m.end() <= 65536 and not m.group().startswith("PuTTY")
        if near and _pem_body(text[m.end() : marks[i][0]]):
            end = ends[i]
        if end == m.end():
            for _ in range(4096):
                line = _PEM_LINE.match(text, end)
                if line is None:
                    break
                end = line.end()
        body = text[m.start() : end]
        # each key line is learned: a line of the same key elsewhere (no BEGIN before it) is found too
        learn = tuple(
            (w, "token", w) for w in _KEY_WORD.findall(_PEM_BREAKS.sub("\n", body[len(m.group()) :]))
        )
        yield Hit(m.start(), end, "key", body, learn=learn)
        pos = end


def _domain_hits(text: str) -> Iterable[Hit]:
    for m in _DOMAIN.finditer(text):
        name = m.group(1)
        port = text[m.end() : m.end() + 1] == ":" and text[m.end() + 1 : m.end() + 3].isdigit()
        if port and not any(c.isdigit() or c == "-" for c in name):
            port = False  # `train.main:45` is a function and a line number, `worker-0.svc:8476` a host
        if hosts.host_kind(name, port) != "host":
            continue
        short = name.split(".", 1)[0]
        js = short.rsplit("-slice-job-", 1)[0] if "-slice-job-" in short else ""
        # every DNS name of one JobSet pod (`pod.svc`, `pod.svc.default.svc.cluster.local`): one placeholder
        group = short.lower() if js else name.lower()
        learn: list[tuple[str, str, str]] = []
        if len(short) >= 3 and any(c.isdigit() or c == "-" for c in short):
            learn.append((short, "host", group))  # the bare node name gets the FQDN's placeholder
        if js and any(c.isdigit() or c == "-" for c in js):
            learn.append((js, "job", js))
        yield Hit(m.start(1), m.end(1), "host", name, group=group, learn=tuple(learn))


def _nodelist_hits(text: str) -> Iterable[Hit]:
    for m in hosts.NODELIST.finditer(text):
        whole, ranges, suffix = m.group(1), m.group(2), m.group(3)
        prefix = whole[: whole.index("[")]
        if not hosts.nodelist_is_hosts(prefix, ranges):
            continue
        names = hosts.expand_nodelist(prefix, ranges, suffix)
        yield Hit(m.start(1), m.end(1), "host", whole, learn=tuple((n, "host", n.lower()) for n in names))


def _pod_hits(text: str) -> Iterable[Hit]:
    for m in _POD.finditer(text):
        if m.group(1) is not None:
            js = m.group(2)
            learn = ((js, "job", js),) if len(js) >= 3 and any(c.isdigit() or c == "-" for c in js) else ()
            yield Hit(m.start(1), m.end(1), "job", m.group(1), learn=learn)
            continue
        g = 3 if m.group(3) is not None else 4
        name = m.group(g)
        tail = name.rsplit("-", 2)
        # a generated suffix has a digit (Job pods) or follows a hash with a digit (Deployment pods)
        if g == 3 and not any(c.isdigit() for c in tail[-2]):
            continue
        if g == 4 and not (any(c.isdigit() for c in tail[-1]) and any(c.isalpha() for c in tail[-1])):
            continue
        yield Hit(m.start(g), m.end(g), "job", name)


def _slurm_hits(text: str) -> Iterable[Hit]:
    for m in _SLURM.finditer(text):
        name, value = m.group(1), m.group(2)
        learn: list[tuple[str, str, str]] = []
        if "USER" in name or "ACCOUNT" in name:
            learn.append((value, "user" if "USER" in name else "job", value.lower()))
        elif "NODE" in name or "HOST" in name or "LIST" in name:
            for part in re.split(r",(?![^\[]*\])", value):
                nl = hosts.NODELIST.fullmatch(part)
                if nl:
                    pre = nl.group(1)[: nl.group(1).index("[")]
                    learn += [
                        (n, "host", n.lower()) for n in hosts.expand_nodelist(pre, nl.group(2), nl.group(3))
                    ]
                elif len(part) >= 3 and not part.isdigit():
                    learn.append((part, "host", part.lower()))
        elif "JOB_NAME" in name or (("JOB_ID" in name or "JOBID" in name) and len(value) >= 4):
            learn.append((value, "job", value.lower()))
        yield Hit(m.start(2), m.end(2), "job", value, learn=tuple(learn))


def _assign_hits(text: str) -> Iterable[Hit]:
    """`host=gpu-node17`, `MASTER_ADDR=…`, `Hostname: …`, `user=alice`, NCCL's `host:pid:tid`."""
    for m in _HOST_ASSIGN.finditer(text):
        key, v = m.group(1).lower(), m.group(2).rstrip(".")
        low = v.lower()
        if low in _WORDS or low in LOCAL_HOSTS or low.rsplit(".", 1)[-1] in hosts.FILE_EXTENSIONS:
            continue
        if hosts.is_public(v) or ("." in v and hosts.host_kind(v, False) is None and "_" in v):
            continue
        hostlike = any(c.isdigit() or c in "-." for c in v)
        if not hostlike and (key not in _EXPLICIT_HOST_KEYS or len(v) < 3):
            continue
        learn = ((v, "host", low),) if hostlike else ()
        yield Hit(m.start(2), m.start(2) + len(v), "host", v, group=low, learn=learn)
    for m in _NCCL.finditer(text):
        v = m.group(1)
        if v.lower() not in LOCAL_HOSTS:
            yield Hit(m.start(1), m.end(1), "host", v, group=v.lower(), learn=((v, "host", v.lower()),))
    for m in _USER_ASSIGN.finditer(text):
        v = m.group(1)
        if v.lower() not in SYSTEM_USERS and v.lower() not in _WORDS:
            yield Hit(m.start(1), m.end(1), "user", v, learn=((v, "user", v.lower()),))
    for m in _K8S_NAME.finditer(text):
        v = m.group(1).rstrip(".")
        yield Hit(m.start(1), m.start(1) + len(v), "job", v, learn=((v, "job", v.lower()),))


def _email_hits(text: str) -> Iterable[Hit]:
    for m in _EMAIL.finditer(text):
        local = m.group(1).split("@", 1)[0]
        low = local.lower()
        learn: Learn = ()
        if re.fullmatch(r"[a-z][a-z0-9_]{2,31}", low) and low not in _MAIL_ROLES | SYSTEM_USERS:
            learn = ((local, "user", low),)  # `alice@corp…`: the same login elsewhere is the user
        yield Hit(m.start(1), m.end(1), "email", m.group(1), learn=learn)


def _home_hits(text: str) -> Iterable[Hit]:
    for rx in (_HOME, _WIN_HOME):
        for m in rx.finditer(text):
            user = m.group(2)
            learn: Learn = ()
            if (
                user
                and user.lower() not in SYSTEM_USERS
                and len(user) >= 2
                and not PLACEHOLDER.fullmatch(user)
            ):
                learn = ((user, "user", user.lower()),)
            yield Hit(m.start(1), m.end(1), "home", m.group(1), learn=learn)


def secret_hits(
    text: str, low: str, rules: Iterable[secret_rules.SecretRule] = secret_rules.RULES
) -> Iterable[Hit]:
    """Secrets of every shape in `secret_rules.toml`. A secret of 8 characters or more is learned as a
    token, so the same value is found bare anywhere else (`KEY=v` in one line, `v` in the next)."""
    for start, end, category, value, _rule in secret_rules.secret_hits(text, low, rules):
        learn: Learn = ((value, "token", value),) if len(value) >= 8 and category == "token" else ()
        yield Hit(start, end, category, value, learn=learn)


def _replica_pod_hits(text: str) -> Iterable[Hit]:
    """StatefulSet and training-operator pods (`<name>-worker-12`, `<job>-master-0`): the pod, and its
    set name learned."""
    for m in _REPLICA_POD.finditer(text):
        name = m.group(2)
        if len(name) < 3 or not any(c.isdigit() or c == "-" for c in name):
            continue
        yield Hit(m.start(1), m.end(1), "job", m.group(1), learn=((name, "job", name.lower()),))


def _namespace_hits(text: str) -> Iterable[Hit]:
    for m in _NAMESPACE.finditer(text):
        g = 1 if m.group(1) is not None else 2
        v = m.group(g)
        if v.isdigit() or v in _PUBLIC_NAMESPACES or not any(c.isalpha() for c in v):
            continue
        yield Hit(m.start(g), m.end(g), "job", v, learn=((v, "job", v.lower()),) if len(v) >= 3 else ())


def _guid_hits(text: str) -> Iterable[Hit]:
    for m in _GUID.finditer(text):
        g = 1 if m.group(1) is not None else 2
        yield Hit(m.start(g), m.end(g), "mac", m.group(g))


# (pattern, category, needles): a pattern runs only when one of its needles is in the lowered text, so a
# long line that cannot hold a match costs one substring search instead of a scan
_GROUP_RULES: tuple[tuple[re.Pattern[str], str, tuple[str, ...]], ...] = (
    (_MAC, "mac", (":", "-")),
    (_CLOUD, "bucket", ("://",)),
    (_BUCKET_PATH, "bucket", ("amazonaws.com/", "storage.")),
    (_URL_CRED, "token", ("://",)),
    (_CLUSTER_FS, "path", ("/",)),
    (_JOB_ID, "job", ("job", "slurm-", "stepid")),
    (_SCHED_FLAG, "job", ("--",)),
    (_GKE_NODE, "host", ("gke-",)),
)
