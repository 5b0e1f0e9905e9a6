"""Transports against real processes: the local shell, and OpenSSH sshd on loopback nodes (.ci/infra.sh)."""

from __future__ import annotations

import asyncio
import os
import shlex
import time
from pathlib import Path

import pytest
from _runner_infra import infra, kill_ssh_connection, needs_infra, remove_scratch, scratch_dir, ssh

from cvs_tui.core.runner.nodes.local import LocalTransport
from cvs_tui.core.runner.nodes.ssh import SSHTransport
from cvs_tui.core.transport import CommandError, CommandTimeout, ConnectError, HostKeyError, connect_all

HOSTILE = 'it\'s "q" $(touch /tmp/pwned-cvs) `id`; echo x\nline2 \\ $HOME'


# ---------------------------------------------------------------------------------------------------------
# local
# ---------------------------------------------------------------------------------------------------------
async def test_local_run_exit_codes_and_output() -> None:
    t = LocalTransport()
    r = await t.run("echo out; echo err >&2; exit 7")
    assert r == (7, "out\n", "err\n")
    rc, out, _ = await t.run("cat", input=b"piped")
    assert (rc, out) == (0, "piped")


async def test_local_timeout_kills_the_whole_command(tmp_path: Path) -> None:
    marker = tmp_path / "survived"
    t = LocalTransport()
    start = time.monotonic()
    with pytest.raises(CommandTimeout):
        await t.run(f"(sleep 1.5; touch {marker}) & sleep 30", timeout=0.3)
    assert time.monotonic() - start < 5
    await asyncio.sleep(2)
    assert not marker.exists(), "a child of the timed-out command kept running"


async def test_local_files_and_offsets(tmp_path: Path) -> None:
    t = LocalTransport()
    p = str(tmp_path / "sub" / "f.bin")
    await t.write_file(p, b"0123456789", 0o600)
    assert os.stat(p).st_mode & 0o777 == 0o600
    assert await t.read_file(p) == b"0123456789"
    assert await t.read_file(p, 4, 3) == b"456"
    assert await t.file_size(p) == 10
    assert await t.file_size(str(tmp_path / "none")) is None
    with pytest.raises(FileNotFoundError):
        await t.read_file(str(tmp_path / "none"))


async def test_local_stream_and_failure() -> None:
    t = LocalTransport()
    got = b"".join([c async for c in t.stream("for i in 1 2 3; do echo $i; done")])
    assert got == b"1\n2\n3\n"
    with pytest.raises(CommandError) as ei:
        async for _ in t.stream("echo partial; echo boom >&2; exit 4"):
            pass
    assert ei.value.rc == 4 and "boom" in str(ei.value)


# ---------------------------------------------------------------------------------------------------------
# SSH (real OpenSSH sshd on 127.0.0.2/127.0.0.3)
# ---------------------------------------------------------------------------------------------------------
class TestSSH:
    pytestmark = needs_infra

    async def test_concurrent_nodes_and_channels(self) -> None:
        ts = [ssh(h) for h in infra().nodes]
        try:
            assert await connect_all(ts, timeout=10) == [None] * len(ts)
            # 30 concurrent commands per node over one connection each (more than OpenSSH's 10 sessions).
            results = await asyncio.gather(*(t.run(f"echo {i}; exit {i % 5}") for t in ts for i in range(30)))
            for k, r in enumerate(results):
                i = k % 30
                assert r.rc == i % 5 and r.out == f"{i}\n"
            assert all(t.generation == 1 for t in ts), "a connection was re-opened instead of reused"
        finally:
            await asyncio.gather(*(t.close() for t in ts))

    async def test_files_binary_and_hostile_names(self) -> None:
        t = ssh()
        d = scratch_dir("files")
        try:
            path = f"{d}/a dir/it's $(x);.bin"
            data = bytes(range(256)) * 1000 + HOSTILE.encode()
            await t.write_file(path, data, 0o640)
            assert await t.read_file(path) == data
            assert await t.read_file(path, 1000, 10) == data[1000:1010]
            assert await t.file_size(path) == len(data)
            assert (await t.run(f"stat -c %a {shlex.quote(path)}")).out.strip() == "640"
            with pytest.raises(FileNotFoundError):
                await t.read_file(f"{d}/missing")
            assert not os.path.exists("/tmp/pwned-cvs")
        finally:
            remove_scratch(d)
            await t.close()

    async def test_stream_lines_as_written(self) -> None:
        t = ssh()
        try:
            got = []
            async for chunk in t.stream("for i in 1 2 3 4 5; do echo n$i; sleep 0.05; done"):
                got.append(chunk)
            assert b"".join(got) == b"".join(f"n{i}\n".encode() for i in range(1, 6))
            assert len(got) >= 3, "output was not streamed but collected at the end"
        finally:
            await t.close()

    async def test_command_timeout_stops_the_remote_command(self) -> None:
        t = ssh()
        d = scratch_dir("timeout")
        try:
            await t.run(f"mkdir -p {d}")
            start = time.monotonic()
            with pytest.raises(CommandTimeout):
                await t.run(f"sleep 1.5 && touch {d}/survived", timeout=0.3)
            assert time.monotonic() - start < 5
            await asyncio.sleep(2)
            assert (await t.run(f"test -e {d}/survived")).rc == 1
            assert (await t.run("echo still-usable")).out == "still-usable\n"
        finally:
            remove_scratch(d)
            await t.close()

    async def test_wrong_host_key_is_rejected(self) -> None:
        t = ssh(known_hosts=infra().wrong_known_hosts)
        with pytest.raises(HostKeyError) as ei:
            await t.connect()
        assert infra().nodes[0] in str(ei.value) and "known_hosts" in str(ei.value)

    async def test_unknown_host_key_is_rejected_by_default(self, tmp_path: Path) -> None:
        empty = tmp_path / "known_hosts"
        empty.write_text("")
        with pytest.raises(HostKeyError):
            await ssh(known_hosts=str(empty)).connect()

    async def test_explicit_opt_out_skips_host_key_check(self) -> None:
        t = ssh(known_hosts=infra().wrong_known_hosts, verify_host_keys=False)
        try:
            assert (await t.run("echo ok")).out == "ok\n"
        finally:
            await t.close()

    async def test_ssh_config_alias(self, tmp_path: Path) -> None:
        i = infra()
        cfg = tmp_path / "ssh_config"
        cfg.write_text(
            f"Host cvs-node-a\n  HostName {i.nodes[1]}\n  Port {i.port}\n"
            f"  User {i.user}\n  IdentityFile {i.key}\n"
        )
        t = SSHTransport("cvs-node-a", known_hosts=i.known_hosts, ssh_config=[str(cfg)])
        try:
            r = await t.run("echo $SSH_CONNECTION")
            assert r.rc == 0 and f"{i.nodes[1]} {i.port}" in r.out
        finally:
            await t.close()

    async def test_unreachable_node_fails_fast_with_its_name(self) -> None:
        t = ssh("127.0.0.9", connect_timeout=3)
        start = time.monotonic()
        with pytest.raises(ConnectError) as ei:
            await t.connect()
        assert "127.0.0.9" in str(ei.value)
        assert time.monotonic() - start < 5

    async def test_reconnects_after_the_connection_is_killed(self) -> None:
        t = ssh()
        try:
            await t.connect()
            kill_ssh_connection(t)
            await asyncio.sleep(0.2)
            assert (await t.run("echo back")).out == "back\n"
            assert t.generation == 2
        finally:
            await t.close()

    async def test_forward_docker_socket(self) -> None:
        t = ssh()
        try:
            local = await t.forward_unix_socket(infra().remote_docker_sock)
            reader, writer = await asyncio.open_unix_connection(local)
            writer.write(b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n")
            await writer.drain()
            head = await reader.read(100)
            writer.close()
            assert head.startswith(b"HTTP/1.0 200") or head.startswith(b"HTTP/1.1 200")
            assert oct(os.stat(os.path.dirname(local)).st_mode & 0o777) == "0o700"
        finally:
            await t.close()
