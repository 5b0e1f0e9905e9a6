"""Follow mode sources on real files (append, rotate, truncate while following) and a real pipe."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from cvs_tui.core.errors import UserError
from cvs_tui.core.watch.followers import FileFollower, StreamFollower, followers_for


async def _gather(f: FileFollower | StreamFollower, out: list[bytes]) -> None:
    async for data in f.chunks():
        out.append(data)


async def _until(cond: Callable[[], bool], timeout: float = 5.0) -> None:
    async with asyncio.timeout(timeout):
        while not cond():
            await asyncio.sleep(0.01)


async def test_appends_are_followed_byte_identical_then_stop_drains(tmp_path: Path) -> None:
    p = tmp_path / "node0.log"
    f = FileFollower(str(p), poll_interval=0.02)
    got: list[bytes] = []
    task = asyncio.create_task(_gather(f, got))
    await asyncio.sleep(0.1)  # the file does not exist yet: waited for
    written = b""
    with open(p, "ab") as w:
        for i in range(50):
            line = f"completed step: {i}, loss: 1.0\r\n".encode() + bytes([i, 0xFF])  # odd bytes stay
            w.write(line)
            w.flush()
            written += line
            if i % 10 == 0:
                await asyncio.sleep(0.03)
        w.write(b"partial line, no newline")
        written += b"partial line, no newline"
    f.stop()  # what is written before stop is still handed out
    await asyncio.wait_for(task, 5)
    assert b"".join(got) == written
    assert f.offset == len(written) and f.rotations == 0 and f.truncations == 0


async def test_rotation_reads_old_file_to_end_then_new_from_zero(tmp_path: Path) -> None:
    p = tmp_path / "pod.log"
    p.write_bytes(b"old 1\n")
    f = FileFollower(str(p), poll_interval=0.02)
    got: list[bytes] = []
    task = asyncio.create_task(_gather(f, got))
    await _until(lambda: b"".join(got) == b"old 1\n")
    with open(p, "ab") as w:
        w.write(b"old 2\n")  # written just before the rename: must not be lost
    os.rename(p, tmp_path / "pod.log.1")
    p.write_bytes(b"new 1\n")
    await _until(lambda: b"".join(got).endswith(b"new 1\n"))
    with open(p, "ab") as w:
        w.write(b"new 2\n")
    await _until(lambda: b"".join(got).endswith(b"new 2\n"))
    f.stop()
    await task
    assert b"".join(got) == b"old 1\nold 2\nnew 1\nnew 2\n"
    assert f.rotations == 1


async def test_truncation_restarts_at_zero(tmp_path: Path) -> None:
    p = tmp_path / "copytruncate.log"
    p.write_bytes(b"a" * 100 + b"\n")
    f = FileFollower(str(p), poll_interval=0.02)
    got: list[bytes] = []
    task = asyncio.create_task(_gather(f, got))
    await _until(lambda: len(b"".join(got)) == 101)
    with open(p, "r+b") as w:
        w.truncate(0)
    await asyncio.sleep(0.1)
    with open(p, "ab") as w:
        w.write(b"after\n")
    await _until(lambda: b"".join(got).endswith(b"after\n"))
    f.stop()
    await task
    assert b"".join(got) == b"a" * 100 + b"\nafter\n"
    assert f.truncations == 1 and f.offset == 6


async def test_read_rest_after_stop(tmp_path: Path) -> None:
    p = tmp_path / "n.log"
    p.write_bytes(b"one\n")
    f = FileFollower(str(p), poll_interval=0.02)
    got: list[bytes] = []
    f.stop()
    await _gather(f, got)
    p.write_bytes(b"one\ntwo\nEXIT_CODE=0\n")
    assert await f.read_rest() == b"two\nEXIT_CODE=0\n"
    assert b"".join(got) == b"one\n"


async def test_stdin_pipe_until_eof() -> None:
    # a real pipe from another process, as in `kubectl logs -f POD | cvs-tui analyze ... --logs -`
    code = (
        "import sys,time\n"
        "for i in range(20):\n"
        "    sys.stdout.buffer.write(b'step %d\\xff\\n' % i); sys.stdout.flush(); time.sleep(0.01)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    assert proc.stdout is not None
    f = StreamFollower(proc.stdout)
    got: list[bytes] = []
    await asyncio.wait_for(_gather(f, got), 10)  # ends by itself at EOF
    proc.wait()
    assert b"".join(got) == b"".join(b"step %d\xff\n" % i for i in range(20))
    assert f.offset == len(b"".join(got))


async def test_stdin_pipe_stop_before_eof() -> None:
    r, w = os.pipe()
    with os.fdopen(r, "rb", buffering=0) as rf, os.fdopen(w, "wb", buffering=0) as wf:
        f = StreamFollower(rf)
        got: list[bytes] = []
        task = asyncio.create_task(_gather(f, got))
        wf.write(b"line 1\n")
        await _until(lambda: got == [b"line 1\n"])
        f.stop()  # the writer is still open: stopping ends the follower anyway
        await asyncio.wait_for(task, 5)


async def test_stdin_redirected_from_a_file(tmp_path: Path) -> None:
    p = tmp_path / "saved.log"
    p.write_bytes(b"x\n" * 1000)
    with open(p, "rb") as fh:
        got: list[bytes] = []
        await asyncio.wait_for(_gather(StreamFollower(fh), got), 5)
    assert b"".join(got) == p.read_bytes()


def test_followers_for_checks_input(tmp_path: Path) -> None:
    fs = followers_for([str(tmp_path / "a.log"), "-"])
    assert [type(f).__name__ for f in fs] == ["FileFollower", "StreamFollower"]
    with pytest.raises(UserError, match="only once"):
        followers_for(["-", "-"])
    with pytest.raises(UserError, match="is a folder"):
        followers_for([str(tmp_path)])
    with pytest.raises(UserError, match="--logs"):
        followers_for([])
