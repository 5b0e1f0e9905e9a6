"""What counts as a host or domain name in a log, and which public names stay readable.

A dotted token is a host when DNS could resolve it and a log would not print it otherwise:
- its last label is a private suffix (`.local`, `.internal`, `.svc`, `.corp`, `.lan`, `.example`, ...),
  so every `*.svc.cluster.local` service name is one;
- or its last label is a common public top-level domain (`.com`, `.net`, `.io`, `.ai`, country codes);
- or it is followed by `:<port>` (a JobSet pod's `<jobset>-slice-job-0-0.<jobset>:8482` ends in the
  private job name itself, with no suffix at all);
- or it carries a Kubernetes JobSet pod name.
It is not a host when a label holds `_` (Python module paths such as `maxtext.trainers.pre_train.train`),
when its last label is a file extension (`metric_logger.py:265`, `config.yml`) or a number (versions,
addresses), or when it starts with a Python module name that logs print (`jax.numpy`, `absl.app`).

Public names that stay (every label of them is public knowledge, and dropping them makes logs useless):
- `huggingface.co`, `hf.co`: model and tokenizer downloads; the org/model path after them is public too;
- `github.com`, `githubusercontent.com`, `github.io`, `pypi.org`, `pythonhosted.org`, `python.org`:
  source and package downloads in set-up output;
- `docker.io`, `docker.com`, `ghcr.io`, `nvcr.io`, `quay.io`: public image registries (private ones
  such as `<region>-docker.pkg.dev/<project>` are scrubbed);
- `googleapis.com` as a service name only (`storage.googleapis.com`, `oauth2.googleapis.com`): a bucket
  under it (`<bucket>.storage.googleapis.com`, `storage.googleapis.com/<bucket>`) is scrubbed;
- `metadata.google.internal`: the same metadata server on every GCE VM;
- `google.com`, `k8s.io`, `x-k8s.io`, `kubernetes.io`: API groups and label keys (`jobset.sigs.k8s.io`);
- `amd.com`, `nvidia.com`, `jax.dev`, `openxla.org`, `tensorflow.org`, `pytorch.org`, `readthedocs.io`,
  `readthedocs.org`, `ubuntu.com`, `debian.org`, `anaconda.org`, `anaconda.com`, `conda-forge.org`:
  vendor, framework and distribution sites named in warnings and install output;
- `w3.org`, `purl.org`, `creativecommons.org`, `matplotlib.org`: the XML namespaces and metadata of
  the SVG charts in report.html (`http://www.w3.org/2000/svg`, Dublin Core, the plotting library).
"""

from __future__ import annotations

import re

PUBLIC_DOMAINS = frozenset(
    {
        "huggingface.co",
        "hf.co",
        "github.com",
        "githubusercontent.com",
        "github.io",
        "pypi.org",
        "pythonhosted.org",
        "python.org",
        "docker.io",
        "docker.com",
        "ghcr.io",
        "nvcr.io",
        "quay.io",
        "google.com",
        "k8s.io",
        "x-k8s.io",
        "kubernetes.io",
        "amd.com",
        "nvidia.com",
        "jax.dev",
        "openxla.org",
        "tensorflow.org",
        "pytorch.org",
        "readthedocs.io",
        "readthedocs.org",
        "ubuntu.com",
        "debian.org",
        "anaconda.org",
        "anaconda.com",
        "conda-forge.org",
        "w3.org",
        "purl.org",
        "creativecommons.org",
        "matplotlib.org",
    }
)
PUBLIC_HOSTS = frozenset({"metadata.google.internal"})
PRIVATE_SUFFIXES = frozenset(
    {
        "local",
        "internal",
        "intranet",
        "lan",
        "corp",
        "home",
        "localdomain",
        "private",
        "priv",
        "svc",
        "cluster",
        "example",
        "test",
        "invalid",
        "arpa",
        "localhost",
    }
)
# Generic and country top-level domains that are not also file extensions or Python attribute names
# (`.py`, `.sh`, `.md`, `.pl`, `.rs`, `.so`, `.in`, `.int`, `.info`, `.app` are left out on purpose).
PUBLIC_TLDS = frozenset(
    [
        "com",
        "net",
        "org",
        "edu",
        "gov",
        "mil",
        "io",
        "ai",
        "co",
        "dev",
        "cloud",
        "tech",
        "xyz",
        "online",
        "site",
        "me",
        "us",
        "uk",
        "de",
        "fr",
        "jp",
        "cn",
        "kr",
        "ca",
        "au",
        "nl",
        "se",
        "ch",
        "eu",
        "ru",
        "br",
        "tw",
        "sg",
        "hk",
        "il",
        "fi",
        "dk",
        "es",
        "pt",
        "cz",
        "ie",
        "nz",
        "za",
        "ar",
        "mx",
        "cl",
    ]
)
FILE_EXTENSIONS = frozenset(
    [
        "py",
        "pyc",
        "pyi",
        "pyx",
        "so",
        "sh",
        "bash",
        "md",
        "txt",
        "log",
        "out",
        "err",
        "json",
        "jsonl",
        "yaml",
        "yml",
        "toml",
        "ini",
        "cfg",
        "conf",
        "csv",
        "tsv",
        "html",
        "htm",
        "xml",
        "svg",
        "png",
        "jpg",
        "jpeg",
        "gif",
        "pdf",
        "c",
        "cc",
        "cpp",
        "cu",
        "h",
        "hpp",
        "rs",
        "go",
        "js",
        "ts",
        "java",
        "proto",
        "pb",
        "npy",
        "npz",
        "ckpt",
        "pt",
        "bin",
        "safetensors",
        "gz",
        "tgz",
        "xz",
        "zst",
        "bz2",
        "zip",
        "tar",
        "whl",
        "lock",
        "env",
        "j2",
        "tcss",
        "css",
        "rst",
        "ipynb",
    ]
)
# Endings no Python attribute path has: a name ending so is a host even when its first label is a module's
# (`os.a0.com`).
_DOMAIN_ONLY = frozenset(["com", "net", "org", "edu", "gov", "mil"])
# First labels of dotted names that are Python modules, not hosts, when a log prints them.
MODULE_ROOTS = frozenset(
    [
        "jax",
        "jaxlib",
        "jnp",
        "np",
        "numpy",
        "tf",
        "tensorflow",
        "torch",
        "os",
        "sys",
        "self",
        "cls",
        "absl",
        "flax",
        "optax",
        "orbax",
        "maxtext",
        "logging",
        "json",
        "re",
        "math",
        "pathlib",
        "typing",
        "collections",
        "grain",
        "etils",
        "transformers",
        "datasets",
        "tokenizers",
        "sentencepiece",
        "asyncio",
        "subprocess",
        "threading",
        "multiprocessing",
        "concurrent",
        "functools",
        "itertools",
        "builtins",
        "importlib",
        "pytest",
        "cvs_tui",
        "textual",
        "rich",
    ]
)
_LABEL = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\Z")
# A Slurm node list: `gpu-node[01-04,07]`, `nid[001-128]`
NODELIST = re.compile(
    r"(?<![\w.\[-])([A-Za-z][A-Za-z0-9-]{0,62}\[(\d{1,6}(?:-\d{1,6})?(?:,\d{1,6}(?:-\d{1,6})?){0,63})\]"
    r"([A-Za-z0-9-]{0,30}))(?![\w\[])"
)


def is_public(name: str) -> bool:
    """A public service name that stays readable (see the module docstring for each one's reason)."""
    n = name.lower().rstrip(".")
    if n in PUBLIC_HOSTS:
        return True
    if n == "googleapis.com" or (n.endswith(".googleapis.com") and n.count(".") == 2):
        return True  # a service; `<bucket>.storage.googleapis.com` has one label more and is private
    return any(n == d or n.endswith("." + d) for d in PUBLIC_DOMAINS)


def host_kind(name: str, port_follows: bool) -> str | None:
    """ "host" when ``name`` (a dotted token) is a private host or domain name, "public" for an
    allow-listed public one, None when it is not a host name at all (module path, file, version)."""
    if len(name) > 253:
        return None
    labels = name.lower().rstrip(".").split(".")
    if len(labels) < 2 or not all(_LABEL.match(label) for label in labels):
        return None
    tld = labels[-1]
    if tld.isdigit() or tld in FILE_EXTENSIONS:
        return None
    if is_public(name):
        return "public"
    if tld in PRIVATE_SUFFIXES or "-slice-job-" in labels[0]:
        return "host"
    if (labels[0] in MODULE_ROOTS or name.split(".", 1)[0] in MODULE_ROOTS) and tld not in _DOMAIN_ONLY:
        return None
    if tld in PUBLIC_TLDS or port_follows:
        return "host"
    return None


def expand_nodelist(prefix: str, ranges: str, suffix: str, *, limit: int = 4096) -> list[str]:
    """`gpu-node`, `01-03,07`, `` -> gpu-node01, gpu-node02, gpu-node03, gpu-node07 (zero padding kept).
    At most ``limit`` names: a list longer than any real cluster is not expanded further."""
    out: list[str] = []
    for part in ranges.split(","):
        lo, _, hi = part.partition("-")
        width = len(lo) if lo.startswith("0") else 0
        a, b = int(lo), int(hi or lo)
        for i in range(a, min(b, a + limit) + 1):
            out.append(f"{prefix}{i:0{width}d}{suffix}")
            if len(out) >= limit:
                return out
    return out


def nodelist_is_hosts(prefix: str, ranges: str) -> bool:
    """A bracket list is a Slurm node list, not `x[0]` indexing: it has a range, or a comma list after a
    host-like prefix (with a digit or a hyphen)."""
    return "-" in ranges or ("," in ranges and any(c.isdigit() or c == "-" for c in prefix))


# Words that make a single-label name look like a machine (`gpu-node17`, `mi300-rack4-07`, `nid00123`).
HOST_WORDS = frozenset(
    [
        "node",
        "nodes",
        "gpu",
        "gpus",
        "host",
        "rack",
        "compute",
        "worker",
        "workers",
        "login",
        "nid",
        "cn",
        "srv",
        "server",
        "dgx",
        "hgx",
        "blade",
        "smc",
        "bmc",
        "head",
        "master",
        "slave",
        "mgmt",
        "cpu",
        "cnode",
        "gnode",
    ]
)


def looks_like_host(token: str) -> bool:
    """A single-label token shaped like a machine name: a suspect when hosts are not known."""
    t = token.lower()
    parts = t.split("-")
    if len(t) < 4 or len(t) > 63 or not any(c.isdigit() for c in t):
        return False
    words = {re.sub(r"\d+$", "", p) for p in parts}
    if words & HOST_WORDS:
        return len(parts) > 1 or sum(c.isdigit() for c in t) >= 2
    return len(parts) >= 3 and sum(any(c.isdigit() for c in p) for p in parts) >= 2
