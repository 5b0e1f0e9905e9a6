"""Following node logs: every byte exactly once, also when the SSH connection is killed mid-stream."""

from __future__ import annotations

import asyncio
import os
import shutil
import time
from pathlib import Path

import pytest
from _runner_infra import infra_only, kill_ssh_connection, remove_scratch, scratch_dir, ssh

from cvs_tui.core.runner.nodes.local import LocalTransport
from cvs_tui.core.runner.nodes.tail import LogTailer
from cvs_tui.core.transport import Backoff, ConnectError, Transport


async def _write_lines(path: str, start: int, count: int, every: int = 20, pause: float = 0.005) -> None:
    """Append numbered lines, flushing in small bursts (as a trainer would)."""
    with open(path, "ab") as f:
        for i in range(start, start + count):
            f.write(f"line {i:06d} {'x' * (i % 50)}\n".encode())
            if i % every == 0:
                f.flush()
                await asyncio.sleep(pause)
        f.flush()


async def _collect_until(
    tailer: LogTailer, expected_size: int, on_progress=None, timeout: float = 60
) -> bytes:  # type: ignore[no-untyped-def]
    got = bytearray()

    async def run() -> None:
        async for chunk in tailer.chunks():
            got.extend(chunk)
            if on_progress is not None:
                await on_progress(len(got))
            if len(got) >= expected_size:
                tailer.stop()

    await asyncio.wait_for(run(), timeout)
    return bytes(got)


def _expected(path: str) -> bytes:
    return Path(path).read_bytes()


def _check_sequence(data: bytes, first: int, last: int) -> None:
    nums = [int(line.split()[1]) for line in data.decode().splitlines()]
    assert nums == list(range(first, last + 1)), "lines lost, duplicated or reordered"


@pytest.mark.parametrize("mode", ["follow", "poll"])
async def test_local_follow_from_offset(tmp_path: Path, mode: str) -> None:
    path = str(tmp_path / "node0.log")
    await _write_lines(path, 0, 100)
    offset = os.path.getsize(path)
    tailer = LogTailer(LocalTransport(), path, offset=offset, mode=mode, poll_interval=0.05)  # type: ignore[arg-type]
    writer = asyncio.create_task(_write_lines(path, 100, 2000))
    total = None

    async def progress(n: int) -> None:
        nonlocal total
        if writer.done() and total is None:
            total = os.path.getsize(path) - offset

    got = bytearray()
    async with asyncio.timeout(60):
        async for chunk in tailer.chunks():
            got.extend(chunk)
            await progress(len(got))
            if writer.done() and len(got) >= os.path.getsize(path) - offset:
                tailer.stop()
    assert bytes(got) == _expected(path)[offset:]
    _check_sequence(bytes(got), 100, 2099)
    assert tailer.offset == os.path.getsize(path)


async def test_file_that_appears_later(tmp_path: Path) -> None:
    path = str(tmp_path / "later.log")
    tailer = LogTailer(LocalTransport(), path)

    async def create() -> None:
        await asyncio.sleep(0.3)
        await _write_lines(path, 0, 10)

    task = asyncio.create_task(create())
    got = await _collect_until(tailer, 10 * len("line 000000 \n") + sum(range(10)), timeout=20)
    await task
    _check_sequence(got, 0, 9)


async def _tail_through_kills(t: Transport, path: str, mode: str, kills: int) -> LogTailer:
    open(path, "wb").close()
    tailer = LogTailer(t, path, mode=mode, poll_interval=0.05)  # type: ignore[arg-type]
    kill_at = [(k + 1) * 20000 for k in range(kills)]

    async def write() -> int:
        # at least 3000 lines, and on until every planned kill has happened
        n = 0
        while n < 3000 or kill_at:
            await _write_lines(path, n, 500)
            n += 500
        return n

    writer = asyncio.create_task(write())
    got = bytearray()
    killed_gen = 0
    async with asyncio.timeout(90):
        async for chunk in tailer.chunks():
            got.extend(chunk)
            # kill each connection once, and only after the transport has opened a new one
            due = kill_at and len(got) >= kill_at[0] and t.generation > killed_gen  # type: ignore[attr-defined]
            if due and kill_ssh_connection(t):  # type: ignore[arg-type]
                kill_at.pop(0)
                killed_gen = t.generation  # type: ignore[attr-defined]
            if writer.done() and len(got) >= os.path.getsize(path):
                tailer.stop()
    assert not kill_at, "the log ended before every planned kill"
    assert bytes(got) == _expected(path)
    _check_sequence(bytes(got), 0, writer.result() - 1)
    return tailer


@infra_only
@pytest.mark.parametrize("mode", ["follow", "poll"])
async def test_ssh_connection_killed_mid_stream(mode: str) -> None:
    t = ssh()
    d = scratch_dir("tail")
    try:
        await t.run(f"mkdir -p {d} && chmod 777 {d}")
        await _tail_through_kills(t, f"{d}/node0.log", mode, kills=3)
        # each kill forced a new connection (the tailer, or a read it made, re-opened it)
        assert t.generation >= 4
    finally:
        remove_scratch(d)
        await t.close()


@infra_only
async def test_read_rest_drains_after_stop() -> None:
    t = ssh()
    d = scratch_dir("rest")
    try:
        await t.run(f"mkdir -p {d} && chmod 777 {d}")
        path = f"{d}/node1.log"
        await _write_lines(path, 0, 50)
        tailer = LogTailer(t, path)
        first = await _collect_until(tailer, 100, timeout=20)
        await _write_lines(path, 50, 500)
        rest = await tailer.read_rest()
        assert first + rest == _expected(path)
        assert await tailer.read_rest() == b""
    finally:
        remove_scratch(d)
        await t.close()


@infra_only
async def test_unreachable_node_gives_up_after_the_backoff() -> None:
    t = ssh("127.0.0.9", connect_timeout=2)  # nothing listens there: refused at once
    tailer = LogTailer(t, "/tmp/x.log", backoff=Backoff(attempts=3, initial=0.05, factor=2, maximum=1))
    start = time.monotonic()
    with pytest.raises(ConnectError, match=r"gave up following /tmp/x\.log after 3 retries"):
        async for _ in tailer.chunks():
            pass
    assert time.monotonic() - start < 10


@infra_only
async def test_stop_while_waiting_for_the_node() -> None:
    t = ssh("127.0.0.9", connect_timeout=2)
    tailer = LogTailer(t, "/tmp/x.log", backoff=Backoff(attempts=5, initial=30))

    async def consume() -> None:
        async for _ in tailer.chunks():
            pass

    task = asyncio.create_task(consume())
    await asyncio.sleep(0.5)
    # while it waits, the node counts as unreachable, in the transport's words (the watchdog's input)
    assert tailer.down is not None and "cannot connect" in tailer.down, tailer.down
    assert not tailer.down.startswith(t.name)  # the caller names the node
    tailer.stop()
    await asyncio.wait_for(task, 5)  # ends cleanly instead of sleeping through the backoff


async def _busy_stream_chunks(tmp_path: Path) -> tuple[list[bytes], float]:
    """A line every 10 ms, followed with a 0.2 s budget: the chunks (every byte once, in order) and
    how long it took."""
    path = str(tmp_path / "node0.log")
    Path(path).write_bytes(b"")
    tailer = LogTailer(LocalTransport(), path, coalesce=0.2)

    async def write() -> None:
        with open(path, "ab", buffering=0) as f:
            for i in range(100):
                f.write(f"line {i:06d}\n".encode())
                await asyncio.sleep(0.01)

    t0 = time.monotonic()
    writer = asyncio.create_task(write())
    chunks: list[bytes] = []
    async with asyncio.timeout(30):
        async for chunk in tailer.chunks():
            chunks.append(chunk)
            if writer.done() and sum(map(len, chunks)) >= os.path.getsize(path):
                tailer.stop()
    assert b"".join(chunks) == _expected(path)
    _check_sequence(b"".join(chunks), 0, 99)
    return chunks, time.monotonic() - t0


async def test_a_busy_stream_comes_in_coalesced_chunks(tmp_path: Path) -> None:
    """A tail that polls every budget: a handful of chunks, not one per line."""
    chunks, took = await _busy_stream_chunks(tmp_path)  # about 1.2 s; longer on a busy machine
    assert len(chunks) <= min(took / 0.2 + 3, 40), (len(chunks), took)


async def test_a_tail_that_writes_every_line_is_read_in_coalesced_chunks_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A node whose tail cannot poll (busybox's has no ---disable-inotify; stood in for by GNU tail
    behind a wrapper that refuses that option, so it writes every line at once): this side waits
    after chunks that come close together, so the lines still come a few chunks per budget."""
    wrapper = tmp_path / "bin" / "tail"
    wrapper.parent.mkdir()
    real = shutil.which("tail")
    assert real is not None
    wrapper.write_text(f'#!/bin/sh\ncase "$1" in ---disable-inotify) exit 1;; esac\nexec {real} "$@"\n')
    wrapper.chmod(0o755)
    monkeypatch.setenv("PATH", f"{wrapper.parent}:{os.environ['PATH']}")
    chunks, took = await _busy_stream_chunks(tmp_path)
    assert len(chunks) <= min(took / 0.1 + 3, 40), (len(chunks), took)  # not one per line (100)


async def test_stop_ends_a_follow_that_waits_for_bytes_and_a_cancel_is_not_taken_for_a_stop(
    tmp_path: Path,
) -> None:
    """stop() cancels the read in progress: the stream ends at once, with nothing lost or repeated; a
    cancel of the reading task itself goes on as a cancel."""
    path = tmp_path / "node0.log"
    path.write_bytes(b"one\n")
    tailer = LogTailer(LocalTransport(), str(path), coalesce=0.05)
    got: list[bytes] = []

    async def consume(t: LogTailer) -> None:
        async for chunk in t.chunks():
            got.append(chunk)

    task = asyncio.create_task(consume(tailer))
    while not got:
        await asyncio.sleep(0.02)
    await asyncio.sleep(0.3)  # past the coalescing pause: waiting in a read of an idle file
    assert tailer._reading is not None
    tailer.stop()
    await asyncio.wait_for(task, 5)
    assert b"".join(got) == b"one\n" and tailer.offset == 4

    other = LogTailer(LocalTransport(), str(path), offset=4, coalesce=0.05)
    task = asyncio.create_task(consume(other))
    await asyncio.sleep(0.5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not other.stopped
