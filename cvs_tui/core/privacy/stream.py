"""A text file read a chunk of whole lines at a time, so scrubbing and checking hold a bounded amount of
any file (audit 3 M9: a 200 MB log held 816 MB).

``sniff`` decides how a file reads, with the rules of ``scrubber.decode_bytes`` applied to the whole file
but read in blocks: UTF-16/UTF-32 (and UTF-8 with a BOM) when it starts with a byte order mark and
decodes in it; UTF-8 when it decodes and is not mostly NULs; else not text. ``text_chunks`` then yields
its text in chunks that end at a line break. Every rule but the private key blocks is line-local, and a
chunk never ends inside the lines after a key block's first line, so a chunk finds what the whole text
finds there.
"""

from __future__ import annotations

import codecs
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from cvs_tui.core.errors import UserError

CHUNK = 8 << 20  # characters handed out at a time
_READ = 4 << 20  # bytes read at a time
_LINE_CAP = 64 << 20  # a line longer than this is cut: a chunk stays bounded on a file with no line break
_KEY_HOLD = 1 << 20  # a key block still open this near a chunk's end moves whole to the next chunk
_KEY_MARKS = ("-----BEGIN ", "PuTTY-User-Key-File", "Private-Lines:")
_KEY_ENDS = ("-----END ", "Private-MAC:")
_BOMS = (  # UTF-32 first: its little-endian BOM starts with UTF-16's
    (codecs.BOM_UTF32_LE, "utf-32-le"),
    (codecs.BOM_UTF32_BE, "utf-32-be"),
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)


@dataclass(frozen=True)
class Sniffed:
    encoding: str | None  # None: not text (searched as latin-1 and copied unchanged)
    bom: bytes = b""


def _blocks(path: Path, skip: int = 0) -> Iterator[bytes]:
    try:
        with path.open("rb") as fh:
            fh.seek(skip)
            while block := fh.read(_READ):
                yield block
    except OSError as exc:
        raise UserError(f"{path}: cannot read ({exc.strerror or exc})") from None


def _decodes(path: Path, codec: str, skip: int) -> tuple[bool, int, int]:
    """(the file from byte ``skip`` decodes in ``codec``, its characters, its NULs)."""
    dec = codecs.getincrementaldecoder(codec)()
    chars = nuls = 0
    try:
        for block in _blocks(path, skip):
            text = dec.decode(block)
            chars += len(text)
            nuls += text.count("\x00")
        text = dec.decode(b"", final=True)
    except UnicodeDecodeError:
        return False, chars, nuls
    return True, chars + len(text), nuls + text.count("\x00")


def sniff(path: Path) -> Sniffed:
    """How ``path`` reads (see the module docstring), one pass over it."""
    head = next(_blocks(path), b"")[:4]
    for bom, codec in _BOMS:
        if head.startswith(bom):
            if _decodes(path, codec, len(bom))[0]:
                return Sniffed(codec, bom)
            break
    ok, chars, nuls = _decodes(path, "utf-8", 0)
    if not ok or nuls * 4 > chars:  # ASCII as UTF-16/32 without a BOM is valid UTF-8 full of NULs
        return Sniffed(None)
    return Sniffed("utf-8")


def _cut(text: str, final: bool, size: int) -> int:
    """Where a chunk of ``text`` ends: after the last line break within ``size`` characters (or the first
    one after, for a longer line), before a key block's first line near it, or at the line cap; 0 to
    wait for more text."""
    if final and len(text) <= size:
        return len(text)
    end = text.rfind("\n", 0, size) + 1 or text.find("\n", size) + 1
    if end == 0:
        if final:
            return len(text)
        return _LINE_CAP if len(text) >= _LINE_CAP else 0
    near = max(0, end - _KEY_HOLD)
    mark = max(text.rfind(m, near, end) for m in _KEY_MARKS)
    if mark >= 0 and not any(text.find(m, mark, end) >= 0 for m in _KEY_ENDS):  # a block still open
        start = text.rfind("\n", 0, mark) + 1
        if start > 0:
            return start  # the block starts the next chunk
        # it opens on the chunk's first line: the chunk runs on to the line that closes it
        closes = [i for i in (text.find(m, end, end + _KEY_HOLD) for m in _KEY_ENDS) if i >= 0]
        if closes:
            return text.find("\n", min(closes)) + 1 or len(text)
        if not final and len(text) < end + _KEY_HOLD:
            return 0  # wait for the text that may close it
    return end


def text_chunks(path: Path, sniffed: Sniffed, size: int | None = None) -> Iterator[str]:
    """The text of ``path`` (``sniffed.encoding`` must be set) in chunks of about ``size`` characters
    (default ``CHUNK``), each ending at a line break (see ``_cut``)."""
    assert sniffed.encoding is not None
    size = size or CHUNK
    dec = codecs.getincrementaldecoder(sniffed.encoding)()
    pieces: list[str] = []
    have = 0
    for block in _blocks(path, len(sniffed.bom)):
        piece = dec.decode(block)
        pieces.append(piece)
        have += len(piece)
        if have < 2 * size:  # room after a cut: a key block held back fits in what follows
            continue
        buf = "".join(pieces)
        while len(buf) >= 2 * size:
            cut = _cut(buf, False, size)
            if cut == 0:
                break
            yield buf[:cut]
            buf = buf[cut:]
        pieces, have = [buf], len(buf)
    pieces.append(dec.decode(b"", final=True))
    buf = "".join(pieces)
    while buf:
        cut = _cut(buf, True, size)
        yield buf[:cut]
        buf = buf[cut:]
