"""Find and scrub private facts in exported artefacts: hosts, addresses, users, paths, buckets, tokens,
jobs, keys.

Two sources of private values:
- a denylist built from the run context (cluster hosts and addresses, users, config `paths`, container
  volume sources, container names, secret values from the environment and token files, held in memory
  only) plus caller terms (`context`);
- generic detectors (`detectors`): IPv4/IPv6, MAC, emails, cloud URIs, home and cluster-filesystem paths,
  token formats, whole private key blocks, host and domain names (`hosts` decides which dotted names are
  hosts and which public names stay), Slurm node lists and variables, Kubernetes/JobSet pod names.

The checker (`check`) reports where a value is and its category, never the value. The scrubber
(`scrubber`) replaces each value with a placeholder (`<host-1>`, `<ip-2>`, `<user>`, `<home>`,
`<bucket-1>`, `<token>`, `<private-key>`, `<email-1>`, `<job-1>`) that stays the same for the same value
across every file of one `Scrubber`, then re-checks its output. `card` mode adds the stricter rules for
validation cards (no URLs, no absolute paths, no loopback). Every pattern is linear in its input.
"""

from cvs_tui.core.privacy.check import find_private, find_suspects
from cvs_tui.core.privacy.context import (
    SYSTEM_USERS,
    DenyTerm,
    PrivacyContext,
    build_context,
    context_from_run_folder,
    read_cluster_hosts,
    read_terms_file,
)
from cvs_tui.core.privacy.detectors import Finding, Mode
from cvs_tui.core.privacy.scrubber import (
    HOSTS_NOT_KNOWN,
    Scrubber,
    ScrubReport,
    check_files,
    check_suspects,
    decode_bytes,
    read_text_lossless,
    scrub_files,
    scrub_run_folder,
)

__all__ = [
    "HOSTS_NOT_KNOWN",
    "SYSTEM_USERS",
    "DenyTerm",
    "Finding",
    "Mode",
    "PrivacyContext",
    "ScrubReport",
    "Scrubber",
    "build_context",
    "check_files",
    "check_suspects",
    "context_from_run_folder",
    "decode_bytes",
    "find_private",
    "find_suspects",
    "read_cluster_hosts",
    "read_terms_file",
    "read_text_lossless",
    "scrub_files",
    "scrub_run_folder",
]
