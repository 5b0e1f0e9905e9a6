"""Cluster files (CVS node_dict or a nodes list), `--nodes`, and the local default."""

from __future__ import annotations

import getpass
import json
from pathlib import Path
from typing import Any

import pytest

from cvs_tui.core.cluster import cluster_from_nodes_arg, load_cluster, local_cluster
from cvs_tui.core.errors import UserError


def write(tmp_path: Path, data: dict[str, Any]) -> Path:
    p = tmp_path / "cluster.json"
    p.write_text(json.dumps(data))
    return p


def problems(fn: Any, *a: Any) -> list[str]:
    with pytest.raises(UserError) as exc:
        fn(*a)
    return exc.value.problems


@pytest.fixture
def key(tmp_path: Path) -> Path:
    k = tmp_path / "id_test"
    k.write_text("not really a key")
    return k


def test_cvs_node_dict(tmp_path: Path, key: Path) -> None:
    data = {
        "_comment": "x",
        "username": "alice",
        "priv_key_file": str(key),
        "head_node_dict": {"mgmt_ip": "10.0.0.1"},
        "node_dict": {"10.0.0.1": {"bmc_ip": "NA", "vpc_ip": "10.1.0.1"}, "10.0.0.2": {"port": 2222}},
    }
    c = load_cluster(write(tmp_path, data))
    assert c.user == "alice" and c.verify_host_keys is True and c.known_hosts is None
    assert [(n.host, n.rank, n.user, n.port, n.local) for n in c.nodes] == [
        ("10.0.0.1", 0, "alice", None, False),
        ("10.0.0.2", 1, "alice", 2222, False),
    ]
    assert all(n.key_file == str(key) for n in c.nodes)
    assert c.coordinator_ip == "10.0.0.1"


def test_nodes_list_with_user_port_and_objects(tmp_path: Path) -> None:
    kh = tmp_path / "known_hosts"
    kh.write_text("")
    data = {
        "nodes": ["h1", "bob@h2:2200", {"host": "h3", "port": 2201, "username": "carol"}],
        "port": 22,
        "known_hosts": "known_hosts",
        "verify_host_keys": False,
    }
    c = load_cluster(write(tmp_path, data))
    assert [(n.host, n.user, n.port) for n in c.nodes] == [
        ("h1", getpass.getuser(), 22),
        ("h2", "bob", 2200),
        ("h3", "carol", 2201),
    ]
    assert c.known_hosts == str(kh) and c.verify_host_keys is False


def test_user_id_in_cluster_file_is_the_os_user(tmp_path: Path) -> None:
    c = load_cluster(write(tmp_path, {"username": "{user-id}", "nodes": ["h1"]}))
    assert c.user == getpass.getuser() and c.nodes[0].user == getpass.getuser()


def test_changeme_anywhere_is_an_error(tmp_path: Path) -> None:
    lines = problems(
        load_cluster, write(tmp_path, {"username": "<changeme>", "node_dict": {"h1 <changeme>": {}}})
    )
    assert any(line.startswith("cluster.json: username: still tagged <changeme>") for line in lines)
    assert any("key still tagged" in line for line in lines)


def test_cluster_problems_all_at_once(tmp_path: Path) -> None:
    data = {
        "usrname": "x",
        "priv_key_file": "/no/such/key",
        "port": 70000,
        "verify_host_keys": "yes",
        "node_dict": {"h1": {"prot": 22}, "h1:22": {}},
    }
    lines = problems(load_cluster, write(tmp_path, data))
    text = "\n".join(lines)
    assert "usrname: unknown key 'usrname' (did you mean 'username'?)" in text
    assert "priv_key_file: SSH private key '/no/such/key' not found" in text
    assert "port: not a TCP port: 70000" in text
    assert "verify_host_keys: must be true or false" in text
    assert "node_dict.h1.prot: unknown key 'prot' (did you mean 'port'?)" in text
    assert len(lines) == 5
    assert all(line.startswith("cluster.json: ") for line in lines)


def test_duplicate_remote_hosts_and_mixing_local(tmp_path: Path) -> None:
    (line,) = problems(load_cluster, write(tmp_path, {"nodes": ["h1", "h1"]}))
    assert "listed twice" in line
    (line,) = problems(load_cluster, write(tmp_path, {"nodes": ["localhost", "h1"]}))
    assert "mixes local and remote" in line


def test_missing_nodes_and_bad_json(tmp_path: Path) -> None:
    (line,) = problems(load_cluster, write(tmp_path, {"username": "a"}))
    assert line.startswith("cluster.json: node_dict: required key is missing")
    (line,) = problems(load_cluster, write(tmp_path, {"nodes": []}))
    assert "no nodes" in line
    p = tmp_path / "broken.json"
    p.write_text("{")
    (line,) = problems(load_cluster, p)
    assert "invalid JSON" in line
    (line,) = problems(load_cluster, tmp_path / "absent.json")
    assert "not found" in line


def test_nodes_arg() -> None:
    c = cluster_from_nodes_arg("h1, eve@h2:2022")
    assert [(n.host, n.rank, n.user, n.port) for n in c.nodes] == [
        ("h1", 0, getpass.getuser(), None),
        ("h2", 1, "eve", 2022),
    ]
    assert c.source == "--nodes"
    (line,) = problems(cluster_from_nodes_arg, "h1,,h2")
    assert line.startswith("--nodes: empty host name")
    (line,) = problems(cluster_from_nodes_arg, "h1:99999")
    assert "bad port" in line


def test_local_hosts_may_repeat() -> None:
    c = cluster_from_nodes_arg("localhost,localhost")
    assert [(n.rank, n.local, n.user) for n in c.nodes] == [(0, True, None), (1, True, None)]
    assert c.coordinator_ip == "127.0.0.1" and c.is_local


def test_local_cluster_default() -> None:
    c = local_cluster()
    assert len(c.nodes) == 1 and c.nodes[0].local and c.source == "local" and c.user == getpass.getuser()
    assert len(local_cluster(3).nodes) == 3


def test_node_dict_user_per_node_reaches_the_ssh_transport(tmp_path: Path, key: Path) -> None:
    """A node_dict entry's own `username` is the SSH login for that node; the others use the root one."""
    from cvs_tui.core.plan import PlannedNode
    from cvs_tui.core.runner.nodes.connect import transport_for
    from cvs_tui.core.runner.nodes.ssh import SSHTransport

    data = {
        "username": "alice",
        "priv_key_file": str(key),
        "node_dict": {"10.0.0.1": {}, "10.0.0.2": {"username": "bob"}},
    }
    c = load_cluster(write(tmp_path, data))
    assert [n.user for n in c.nodes] == ["alice", "bob"]
    # as the plan carries them (plan.py builds PlannedNode from each cluster Node)
    planned = [
        PlannedNode(host=n.host, rank=n.rank, local=n.local, user=n.user, port=n.port, key_file=n.key_file)
        for n in c.nodes
    ]
    ts = [transport_for(n, user=c.user, verify_host_keys=False) for n in planned]
    assert all(isinstance(t, SSHTransport) for t in ts)
    # what asyncssh is given as the login
    assert [t._options()["username"] for t in ts if isinstance(t, SSHTransport)] == ["alice", "bob"]
