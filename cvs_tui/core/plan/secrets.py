"""Every secret value a plan carries: what must be masked wherever node output is shown or written."""

from __future__ import annotations

import os
from typing import Any

from cvs_tui.core.config.model import is_secret_entry, is_secret_name
from cvs_tui.core.plan.model import Plan


def _secret_leaves(node: Any, named: bool = False) -> list[str]:
    """String leaves under a secret-named key, and any leaf shaped like a secret (audit 3 PW04)."""
    if isinstance(node, dict):
        return [v for k, x in node.items() for v in _secret_leaves(x, named or is_secret_name(str(k)))]
    if isinstance(node, list):
        return [v for x in node for v in _secret_leaves(x, named)]
    return [node] if isinstance(node, str) and node and (named or is_secret_entry("", node)) else []


def secret_values(plan: Plan) -> list[str]:
    """Every secret value the plan carries (values of secret-named env vars, cluster env_vars and
    maxtext_config keys) and the token file's content when it is readable here: what must be masked
    wherever node output is shown or written (audit #11b)."""
    out = _secret_leaves(plan.cluster_env)
    if plan.ssh_password is not None:  # the SSH password a node may echo (L14)
        out.append(plan.ssh_password.get_secret_value())
    for r in plan.runs:
        out += _secret_leaves(r.env) + _secret_leaves(r.maxtext_config)
        for env in r.node_env:
            out += _secret_leaves(env)
    token_file = plan.paths.get("hf_token_file")
    if token_file:
        try:
            with open(os.path.expanduser(token_file), encoding="utf-8", errors="replace") as fh:
                out.append(fh.read(4096).strip())
        except OSError:
            pass  # on the nodes only, or not there: nothing to mask from here
    return [v for v in out if v]
