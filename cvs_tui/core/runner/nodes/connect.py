"""The transport for a cluster node: local for ``localhost``/``local`` hosts, else SSH."""

from __future__ import annotations

from typing import Any, Protocol

from cvs_tui.core.runner.nodes.local import LocalTransport
from cvs_tui.core.runner.nodes.ssh import SSHTransport
from cvs_tui.core.transport import (
    Transport,
)


class NodeLike(Protocol):
    """The fields of ``cvs_tui.core.cluster.Node`` a transport needs."""

    host: str
    rank: int
    user: str | None
    port: int | None
    key_file: str | None
    local: bool


def transport_for(
    node: NodeLike,
    *,
    user: str | None = None,
    known_hosts: str | None = None,
    verify_host_keys: bool = True,
    env_vars: dict[str, str] | None = None,
    password: str | None = None,
    **ssh_options: Any,
) -> Transport:
    """The transport for one node: local for ``localhost``/``local`` hosts, else SSH.

    ``env_vars`` (the cluster file's) are exported before every command; ``password`` is SSH password
    authentication, tried after any key.
    """
    if node.local:
        return LocalTransport(name=f"{node.host}#{node.rank}", env_vars=env_vars)
    return SSHTransport(
        node.host,
        port=node.port,
        user=node.user or user,
        key_file=node.key_file,
        known_hosts=known_hosts,
        verify_host_keys=verify_host_keys,
        env_vars=env_vars,
        password=password,
        **ssh_options,
    )
