"""rdma: on a distributed GPU config, the NCCL/Gloo interfaces and HCAs named in the env exist."""

from __future__ import annotations

import shlex

from cvs_tui.core.events import StageState
from cvs_tui.core.runner.stages.base import Stage, StageContext, on_all, skip_if_disabled


class Rdma(Stage):
    name = "rdma"

    async def run(self, ctx: StageContext) -> str | None:
        # a failure here is reported, not fatal: the runs show what it means
        if skip_if_disabled(ctx, self.name):
            return None
        ctx.stage(self.name, StageState.RUNNING)
        env = ctx.plan.runs[0].env if ctx.plan.runs else {}
        checks = [
            _exists_check(f"/sys/class/net/{name}", f"{var}: interface {name} not found")
            for var in ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME")
            for name in _iface_list(env.get(var, ""))
        ]
        checks += [
            _exists_check(f"/sys/class/infiniband/{hca}", f"NCCL_IB_HCA: device {hca} not found")
            for hca in _iface_list(env.get("NCCL_IB_HCA", ""))
        ]
        if not checks:
            ctx.stage(self.name, StageState.PASSED, "no device names to check")
            return None
        bad = await on_all(ctx, "; ".join(checks), ctx.opt.command_timeout_s)
        if bad:
            ctx.stage(self.name, StageState.FAILED, "; ".join(bad))
        else:
            ctx.stage(self.name, StageState.PASSED, "configured interfaces and HCAs present on every node")
        return None


def _exists_check(path: str, message: str) -> str:
    return f"test -e {shlex.quote(path)} || {{ echo {shlex.quote(message)} >&2; exit 1; }}"


def _iface_list(value: str) -> list[str]:
    """Device names from an NCCL-style list: `^` / `=` prefixes and `:port` suffixes dropped."""
    out = []
    for part in value.lstrip("^=").split(","):
        name = part.strip().split(":")[0]
        if name:
            out.append(name)
    return out
