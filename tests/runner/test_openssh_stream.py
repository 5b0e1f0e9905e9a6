"""Log streams through the OpenSSH client (core/runner/nodes/openssh.py) against the real test sshd nodes.

What they hold: the ``ssh`` command says what the asyncssh connection says (port, user, only the given
key, the same known_hosts with strict checking, the opt-out, one ssh_config), nothing else; a followed
log comes through ``ssh`` byte for byte, across a killed connection, and stopping leaves no ``ssh``
behind; a node ``ssh`` cannot reach while asyncssh can is followed on asyncssh, with a warning, and
nothing is lost; a password or several config files keep the stream on asyncssh.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import shlex
import stat
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from _runner_infra import infra, infra_only, kill_ssh_connection, remove_scratch, scratch_dir, ssh

from cvs_tui.core.runner.nodes.openssh import openssh_argv
from cvs_tui.core.runner.nodes.ssh import SSHTransport
from cvs_tui.core.runner.nodes.tail import LogTailer


def _lines(start: int, count: int) -> bytes:
    return b"".join(f"line {i:06d} {'y' * (i % 40)}\n".encode() for i in range(start, start + count))


async def _follow_all(tailer: LogTailer, path: str, writes: list[bytes], pause: float = 0.05) -> bytes:
    """Follow ``path`` while ``writes`` are appended one by one; stop once every byte arrived."""
    got = bytearray()

    async def write() -> None:
        for w in writes:
            with open(path, "ab") as f:
                f.write(w)
            await asyncio.sleep(pause)

    writer = asyncio.create_task(write())
    total = sum(len(w) for w in writes)
    async with asyncio.timeout(60):
        async for chunk in tailer.chunks():
            got.extend(chunk)
            if len(got) >= total:
                tailer.stop()
    await writer
    return bytes(got)


@contextlib.asynccontextmanager
async def _node_log(tag: str, **kw: object) -> AsyncIterator[tuple[SSHTransport, str, LogTailer]]:
    """A test node's transport, an empty log in the nodes' scratch and its tailer (0.05 s budget)."""
    t = ssh(**kw)
    d = scratch_dir(tag)
    try:
        await t.run(f"mkdir -p {d} && chmod 777 {d}")
        path = f"{d}/node0.log"
        open(path, "wb").close()
        yield t, path, LogTailer(t, path, coalesce=0.05)
    finally:
        remove_scratch(d)
        await t.close()


def test_the_ssh_command_says_what_the_connection_says(tmp_path: Path) -> None:
    t = SSHTransport(
        "node-a",
        port=2200,
        user="alice",
        key_file="/keys/id_x",
        known_hosts=str(tmp_path / "kh"),
        ssh_config=[str(tmp_path / "cfg")],
        connect_timeout=7.4,
        keepalive_interval=15,
        keepalive_count_max=3,
    )
    (tmp_path / "kh").write_text("")
    argv = openssh_argv(t, "exec tail -F -- '/a b'", "/usr/bin/ssh")
    assert argv is not None
    assert argv[0] == "/usr/bin/ssh" and argv[-3:] == ["--", "node-a", "exec tail -F -- '/a b'"]
    pairs = {argv[i + 1] for i, a in enumerate(argv) if a == "-o"}
    assert {
        "BatchMode=yes",
        "ConnectTimeout=7",
        "ServerAliveInterval=15",
        "ServerAliveCountMax=3",
        "StrictHostKeyChecking=yes",
        f"UserKnownHostsFile={tmp_path / 'kh'}",
        "IdentitiesOnly=yes",
        "ControlMaster=no",
    } <= pairs
    flags = dict(itertools.pairwise(argv))
    assert flags["-p"] == "2200" and flags["-l"] == "alice" and flags["-i"] == "/keys/id_x"
    assert flags["-F"] == str(tmp_path / "cfg")

    off = SSHTransport("node-a", verify_host_keys=False)
    argv = openssh_argv(off, "true", "/usr/bin/ssh")
    assert (
        argv is not None and "StrictHostKeyChecking=no" in argv and f"UserKnownHostsFile={os.devnull}" in argv
    )
    assert "-p" not in argv and "-l" not in argv and "-i" not in argv  # left to ~/.ssh/config, as asyncssh

    missing = SSHTransport("node-a", known_hosts=str(tmp_path / "absent"))
    argv = openssh_argv(missing, "true", "/usr/bin/ssh")
    assert argv is not None and "StrictHostKeyChecking=yes" in argv  # a missing given file trusts nothing

    assert openssh_argv(SSHTransport("n", password="pw"), "true", "/usr/bin/ssh") is None
    assert openssh_argv(SSHTransport("n", ssh_config=["/a", "/b"]), "true", "/usr/bin/ssh") is None
    assert openssh_argv(SSHTransport("n"), "true", None) is None  # no ssh binary


@infra_only
async def test_a_log_comes_through_ssh_byte_for_byte_and_stop_leaves_no_ssh() -> None:
    async with _node_log("ossh") as (t, path, tailer):
        writes = [_lines(i * 200, 200) for i in range(15)]
        got = await _follow_all(tailer, path, writes)
        assert got == Path(path).read_bytes() == b"".join(writes)
        assert t.follow_client == "ssh"
        assert t.stream_pids == set()  # stopped: its ssh was ended and reaped
        await asyncio.sleep(0.5)
        out = await t.run(f"pgrep -f -- {shlex.quote('[t]ail .*' + path)} || true")
        assert out.out.strip() == ""  # and no tail is left on the node


@infra_only
async def test_a_killed_ssh_connection_resumes_at_its_offset() -> None:
    async with _node_log("ossh-kill") as (t, path, tailer):
        got = bytearray()
        killed = 0
        writes = [_lines(i * 100, 100) for i in range(40)]
        total = sum(len(w) for w in writes)

        async def write() -> None:
            for w in writes:
                with open(path, "ab") as f:
                    f.write(w)
                await asyncio.sleep(0.05)

        writer = asyncio.create_task(write())
        async with asyncio.timeout(90):
            async for chunk in tailer.chunks():
                got.extend(chunk)
                if killed < 2 and len(got) > (killed + 1) * 40000 and t.stream_pids:
                    assert kill_ssh_connection(t)
                    killed += 1
                if len(got) >= total:
                    tailer.stop()
        await writer
        assert killed == 2 and tailer.reconnects >= 2
        assert bytes(got) == Path(path).read_bytes() == b"".join(writes)
        assert t.follow_client == "ssh"  # a drop after bytes came is the node's, not ssh's


@infra_only
async def test_where_ssh_cannot_reach_the_node_asyncssh_follows_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A stand-in ``ssh`` first on PATH that fails as a client that cannot authenticate does (exit 255,
    a message on stderr): the test is about the fallback, not the client."""
    fake = tmp_path / "bin" / "ssh"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho 'Permission denied (publickey).' >&2\nexit 255\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{fake.parent}:{os.environ['PATH']}")
    async with _node_log("ossh-fallback") as (t, path, tailer):
        writes = [_lines(i * 50, 50) for i in range(10)]
        with caplog.at_level(logging.WARNING):
            got = await _follow_all(tailer, path, writes)
        assert got == b"".join(writes)
        assert t.follow_client == "asyncssh"
        assert any(
            "ssh cannot follow logs (Permission denied (publickey).)" in r.message for r in caplog.records
        )


@infra_only
async def test_a_password_keeps_the_stream_on_asyncssh() -> None:
    async with _node_log("ossh-pw", password="unused-the-key-authenticates") as (t, path, tailer):
        got = await _follow_all(tailer, path, [_lines(0, 300)])
        assert got == _lines(0, 300) and t.follow_client == "asyncssh"


@infra_only
def test_infra_key_is_what_the_stream_uses() -> None:
    """The infra's transports name their key and known_hosts, so the ssh command is complete."""
    i = infra()
    argv = openssh_argv(ssh(), "true", "/usr/bin/ssh")
    assert argv is not None and i.key in argv and f"UserKnownHostsFile={i.known_hosts}" in argv
