"""Follow logs that cvs-tui did not launch: growing files and standard input, as async byte iterators.

For schedulers cvs-tui cannot drive (Kubernetes/XPK for TPU pods), the logs already exist somewhere:
a file another tool writes (``kubectl logs -f POD > node0.log``) or a pipe (``... | cvs-tui analyze
CONFIG --follow --logs -``). One :class:`Follower` per node hands out that node's bytes exactly as
written, in order, so the parser sees what it would see in a finished file.

* :class:`FileFollower` polls the path (stat + read from its offset; a poll costs a seek, not a read
  of the file, and it works on network filesystems where inotify does not see remote writes). It waits
  for a file that does not exist yet, and it survives:

  - **rotation**: the path now names another file (new inode, e.g. logrotate's rename + create). The
    rest of the old file is read to its end first, then the new file from byte 0;
  - **truncation**: the same file is shorter than what was already read (``copytruncate``, ``: > f``).
    Following starts again at byte 0 of the new content.

  Rotation/truncation between two polls that also grows the file past the old offset cannot be told
  apart from appending (as with ``tail -F``); ``poll_interval`` bounds that window.
* :class:`StreamFollower` reads a pipe, terminal or redirected file (``-`` = stdin) until EOF; a named
  pipe given as a path (``mkfifo``, or process substitution ``<(kubectl logs -f pod-0)``) is read the
  same way, several at once. Standard input from ``/dev/null`` is an empty log.

Memory stays bounded whatever the source: a follower hands out at most ``chunk_size`` bytes at a time and
reads the next only when the consumer asks for it (a file is read a few chunks per poll, a pipe through
a reader that pauses its transport when full). No read blocks where :meth:`Follower.stop` cannot reach it
(a FIFO is opened non-blocking, never in a thread), so a stop ends following at once. Devices that never
end (``/dev/zero``, ``/dev/urandom``) and sockets are refused as ``--logs`` paths.

Both end when :meth:`Follower.stop` is called (after handing out what is already there, for a file at
most ``STOP_DRAIN`` bytes more for at most ``STOP_DRAIN_S`` seconds; the rest is left unread and
``left_unread`` says so) and count the bytes they handed out in ``offset``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import stat
import sys
import time
from collections.abc import AsyncIterator, Sequence
from typing import BinaryIO, Protocol

from cvs_tui.core.errors import UserError

STDIN = "-"
_CHUNK = 1 << 20
POLL_CHUNKS = 4  # chunks one poll of a file reads at most before handing them out
STOP_DRAIN = 64 << 20  # bytes of a file still handed out after stop() at most
STOP_DRAIN_S = 0.5  # and for at most this long: a stop ends following within a second


class Follower(Protocol):
    """One node's byte source."""

    name: str
    offset: int  # bytes handed out so far (since the last rotation/truncation for a file)

    def chunks(self) -> AsyncIterator[bytes]: ...

    def stop(self) -> None: ...


class FileFollower:
    """Follows ``path`` as it grows, across rotation and truncation, until :meth:`stop`."""

    def __init__(
        self,
        path: str,
        *,
        offset: int = 0,
        poll_interval: float = 0.1,
        chunk_size: int = _CHUNK,
        name: str | None = None,
    ) -> None:
        self.path = path
        self.name = name or path
        self.offset = offset
        self.poll_interval = poll_interval
        self.chunk_size = chunk_size
        self.rotations = 0  # the path came to name a new file
        self.truncations = 0  # the file shrank below what was read
        self.total = 0  # every byte handed out, across rotations and truncations
        self.left_unread = False  # stopped with more than STOP_DRAIN bytes still in the file
        self._stop = asyncio.Event()
        self._f: BinaryIO | None = None
        self._ident: tuple[int, int] | None = None

    def stop(self) -> None:
        self._stop.set()

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    def _open(self) -> bool:
        try:
            # non-blocking: a FIFO that appears at the path must not block this thread in open() (M3)
            fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except FileNotFoundError:
            return False
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            raise UserError(
                f"--logs: {self.path} is now {kind_of(st.st_mode)}, not a regular file; "
                "give a growing log file, or the pipe itself from the start"
            )
        f = os.fdopen(fd, "rb")
        if self._ident is not None and (st.st_dev, st.st_ino) != self._ident:
            self.offset = 0  # a new file at the path: the given start offset was for the old one
        self._f, self._ident = f, (st.st_dev, st.st_ino)
        f.seek(self.offset)
        return True

    def _close(self) -> None:
        if self._f is not None:
            self._f.close()
            self._f = None

    def _read(self) -> bytes:
        assert self._f is not None
        return self._f.read(self.chunk_size) or b""

    def _check_path(self) -> str:
        """After reading to EOF: 'rotated', 'truncated' or '' (the same file, not shorter)."""
        assert self._f is not None
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return ""  # moved away and not recreated yet: keep the open file, it may still grow
        if (st.st_dev, st.st_ino) != self._ident:
            return "rotated"
        if st.st_size < self.offset:
            return "truncated"
        return ""

    def _poll(self) -> list[bytes]:
        """One poll (file I/O, run in a thread): the new bytes, in order, at most ``POLL_CHUNKS`` chunks
        (the caller polls again at once when it got that many: the file has more)."""
        out: list[bytes] = []
        if self._f is None and not self._open():
            return out
        while True:
            if len(out) >= POLL_CHUNKS:
                return out
            data = self._read()
            if data:
                self.offset += len(data)
                out.append(data)
                continue
            change = self._check_path()
            if change == "rotated":
                self.rotations += 1
                self._close()
                self.offset = 0
                if not self._open():
                    return out
                continue
            if change == "truncated":
                self.truncations += 1
                assert self._f is not None
                self.offset = 0
                self._f.seek(0)
                continue
            return out

    async def chunks(self) -> AsyncIterator[bytes]:
        """The file's bytes as they are written; ends after :meth:`stop` (what is there is read first)."""
        drained = 0  # bytes handed out since stop()
        stopped_at: float | None = None
        try:
            while True:
                stopping = self._stop.is_set()
                if stopping and stopped_at is None:
                    stopped_at = time.monotonic()
                changes = (self.rotations, self.truncations)
                got = await asyncio.to_thread(self._poll)
                for i, data in enumerate(got):
                    if self._stop.is_set():
                        stopped_at = stopped_at if stopped_at is not None else time.monotonic()
                        late = time.monotonic() - stopped_at >= STOP_DRAIN_S
                        if late and changes == (self.rotations, self.truncations):
                            # stopped a while ago: leave the rest of this poll unread (the same file,
                            # so `offset` goes back to the first byte not handed out, for read_rest)
                            self.offset -= sum(len(d) for d in got[i:])
                            self.left_unread = True
                            return
                        drained += len(data)
                    self.total += len(data)
                    yield data
                more = len(got) >= POLL_CHUNKS
                late = stopped_at is not None and time.monotonic() - stopped_at >= STOP_DRAIN_S
                if stopping and (not more or drained >= STOP_DRAIN or late):
                    self.left_unread = more
                    return
                if not more:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._stop.wait(), self.poll_interval)
        finally:
            self._close()

    async def read_rest(self) -> bytes:
        """Everything after ``offset`` now (after following stopped); advances ``offset``."""
        parts: list[bytes] = []

        def drain() -> None:
            try:
                with open(self.path, "rb") as f:
                    f.seek(self.offset)
                    while data := f.read(self.chunk_size):
                        parts.append(data)
            except FileNotFoundError:
                return

        await asyncio.to_thread(drain)
        data = b"".join(parts)
        self.offset += len(data)
        self.total += len(data)
        return data


class StreamFollower:
    """Reads one byte stream (a pipe, a terminal, a redirected file; default stdin) until EOF or stop.

    ``path`` names a FIFO to open (non-blocking, so it never waits in ``open()`` for a writer; it is read
    once a writer comes, and ends when the last writer closes it)."""

    def __init__(
        self,
        stream: BinaryIO | None = None,
        *,
        name: str = "stdin",
        chunk_size: int = 65536,
        path: str | None = None,
    ):
        if stream is None and path is None:
            if sys.stdin is None:
                raise UserError("--logs -: standard input is closed; pipe the log in or give its file")
            stream = sys.stdin.buffer
        self.stream = stream
        self.path = path
        self.name = path if path is not None and name == "stdin" else name
        self.offset = 0
        self.chunk_size = chunk_size
        self._stop = asyncio.Event()

    def stop(self) -> None:
        self._stop.set()

    async def chunks(self) -> AsyncIterator[bytes]:
        stream = self.stream
        if stream is None:
            assert self.path is not None
            fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            stream = os.fdopen(fd, "rb", buffering=0)
        try:
            fd = stream.fileno()
            mode = os.fstat(fd).st_mode
            if stat.S_ISREG(mode):
                source = self._file_chunks(fd)
            elif stat.S_ISCHR(mode) and not os.isatty(fd):
                # /dev/null (cron, nohup, CI, `docker run` without -i): an empty log, not an epoll error (M2)
                if not _is_dev_null(fd):
                    raise UserError(
                        f"--logs {self.path or '-'}: {self.name} is a device, not a log; pipe the log in"
                    )
                return
            else:
                source = self._pipe_chunks(stream)
            async for data in source:
                self.offset += len(data)
                yield data
        finally:
            if self.stream is None:
                stream.close()

    async def _file_chunks(self, fd: int) -> AsyncIterator[bytes]:
        # A regular file on stdin (`< saved.log`): the event loop cannot watch it; it ends at its EOF.
        while not self._stop.is_set():
            data = await asyncio.to_thread(os.read, fd, self.chunk_size)
            if not data:
                return
            yield data

    async def _pipe_chunks(self, stream: BinaryIO) -> AsyncIterator[bytes]:
        loop = asyncio.get_running_loop()
        # the reader pauses the transport past twice its limit: a fast writer waits for the consumer
        reader = asyncio.StreamReader(limit=self.chunk_size)
        transport, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), stream)
        stop_task = asyncio.ensure_future(self._stop.wait())
        try:
            # a writer that never pauses always has a read ready: look at stop() before each read, or
            # following would never end (what is already buffered is not waited for)
            while not self._stop.is_set():
                read_task = asyncio.ensure_future(reader.read(self.chunk_size))
                done, _ = await asyncio.wait({read_task, stop_task}, return_when=asyncio.FIRST_COMPLETED)
                if read_task not in done:
                    read_task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await read_task
                    return
                data = read_task.result()
                if not data:
                    return
                yield data
        finally:
            stop_task.cancel()
            transport.close()


def _is_dev_null(fd: int) -> bool:
    try:
        return os.path.samestat(os.fstat(fd), os.stat(os.devnull))
    except OSError:
        return False


def kind_of(mode: int) -> str:
    """What a non-regular file is, in words."""
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a named pipe"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


def followers_for(paths: Sequence[str], *, poll_interval: float = 0.1) -> list[Follower]:
    """One follower per node, in rank order: ``-`` is standard input (at most once), a named pipe
    (``mkfifo``, ``<(command)``) is read as a stream, anything else is a file (it may not exist yet).
    Devices (``/dev/zero`` never ends) and sockets are refused.

    Raises UserError naming the problem.
    """
    if not paths:
        raise UserError("--logs: give one log per node (a file path, or - for standard input)")
    if list(paths).count(STDIN) > 1:
        raise UserError("--logs: '-' (standard input) can be given only once")
    out: list[Follower] = []
    for p in paths:
        if p == STDIN:
            out.append(StreamFollower())
            continue
        try:
            mode = os.stat(p).st_mode
        except FileNotFoundError:
            out.append(FileFollower(p, poll_interval=poll_interval))
            continue
        except OSError as exc:
            raise UserError(f"--logs: cannot read {p} ({exc.strerror or exc})") from None
        if stat.S_ISDIR(mode):
            raise UserError(f"--logs: {p} is a folder; give the log file of each node")
        if stat.S_ISFIFO(mode):
            out.append(StreamFollower(path=p, name=p))
        elif stat.S_ISREG(mode):
            out.append(FileFollower(p, poll_interval=poll_interval))
        else:
            raise UserError(
                f"--logs: {p} is {kind_of(mode)}, which never ends like a log; give a log file, a named "
                "pipe or - for standard input"
            )
    return out
