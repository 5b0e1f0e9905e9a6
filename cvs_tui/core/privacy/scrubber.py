"""The scrubber, and checking and scrubbing files and folders.

Text files are read as UTF-8, or as UTF-16/UTF-32 (and UTF-8 with a BOM) when they start with a byte
order mark; a scrubbed file is written back in the encoding it came in. Any other file is searched byte
for byte (latin-1, plus a UTF-16 reading when it holds NUL bytes) and copied unchanged, so the re-check
reports what it holds as leftovers. File and folder names are scrubbed and checked too, with an address
detector that has no look-ahead for an extension (`10.20.30.40.log`).

Long because reading, scrubbing and re-checking a file share its decoded form and its chunks, and the
folder walk keeps what it left out beside what it scrubbed.
"""

from __future__ import annotations

import codecs
import html
import os
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from cvs_tui.core.errors import UserError
from cvs_tui.core.privacy.check import Detector, find_private, find_suspects, findings_of
from cvs_tui.core.privacy.context import DenyTerm, PrivacyContext, context_from_run_folder
from cvs_tui.core.privacy.detectors import IPV4_IN_NAME, Finding, Hit, Mode
from cvs_tui.core.privacy.hosts import FILE_EXTENSIONS
from cvs_tui.core.privacy.screen import template
from cvs_tui.core.privacy.stream import Sniffed, sniff, text_chunks

# Placeholder family per category; a family in _SINGLE is one placeholder for every value.
_FAMILY: dict[str, str] = {
    "host": "host",
    "ip": "ip",
    "mac": "mac",
    "user": "user",
    "home": "home",
    "path": "path",
    "container": "container",
    "bucket": "bucket",
    "email": "email",
    "token": "token",
    "key": "private-key",
    "job": "job",
    "term": "private",
}
_SINGLE = {"home", "token", "private-key"}  # nothing to cross-reference
_BOMS = (  # UTF-32 first: its little-endian BOM starts with UTF-16's
    (codecs.BOM_UTF32_LE, "utf-32-le"),
    (codecs.BOM_UTF32_BE, "utf-32-be"),
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)
_MARKUP_SUFFIXES = {".html", ".htm", ".xml", ".svg"}
# What `scrub` and `check-private` say when no cluster file or plan named the nodes (F27)
HOSTS_NOT_KNOWN = "host and user names that match no pattern are not known without --cluster"


@dataclass(frozen=True)
class Decoded:
    text: str
    encoding: str | None  # None: not text; searched as latin-1 and copied unchanged
    bom: bytes = b""


def decode_bytes(data: bytes) -> Decoded:
    for bom, codec in _BOMS:
        if data.startswith(bom):
            try:
                return Decoded(data[len(bom) :].decode(codec), codec, bom)
            except UnicodeDecodeError:
                break
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return Decoded(data.decode("latin-1"), None)
    if text.count("\x00") * 4 > len(text):  # ASCII as UTF-16/32 without a BOM is valid UTF-8 full of NULs
        return Decoded(text, None)
    return Decoded(text, "utf-8")


def read_text_lossless(path: Path) -> tuple[str, bool]:
    """(text, is_text): a file that is neither UTF-8 nor BOM-marked Unicode is read as latin-1, so every
    byte can still be searched."""
    dec = decode_bytes(path.read_bytes())
    return dec.text, dec.encoding is not None


@dataclass
class ScrubReport:
    """What one scrub did. ``leftovers`` are `file:line:col category` lines the re-check still found (the
    export is not clean when any exist); ``suspects`` are host-like names no rule proves private (filled
    only when the context does not know the hosts); ``files`` maps each input to the file written;
    ``left_out`` names (scrubbed) the binary files a copy to ``--out`` leaves out, since nothing in them
    can be rewritten safely (TensorBoard event files, checkpoints: MaxText's own outputs)."""

    files: dict[str, str] = field(default_factory=dict)
    left_out: list[str] = field(default_factory=list)
    replaced: dict[str, int] = field(default_factory=dict)  # category -> count
    leftovers: list[str] = field(default_factory=list)
    suspects: list[str] = field(default_factory=list)
    hosts_known: bool = False

    @property
    def clean(self) -> bool:
        return not self.leftovers


class Scrubber:
    """Replaces private values with placeholders, the same placeholder for the same value across every
    text given to this instance. Values a text teaches (short host names, expanded node lists, users) are
    learned and replaced everywhere after. The value -> placeholder table stays in memory."""

    def __init__(self, context: PrivacyContext | None = None) -> None:
        self.context = context or PrivacyContext()
        self._detector = Detector(self.context)
        self._learned: list[DenyTerm] = []
        self._table: dict[tuple[str, str], str] = {}
        self._counts: dict[str, int] = {}
        self.replaced: dict[str, int] = {}

    @property
    def known_context(self) -> PrivacyContext:
        """The context plus every value learned so far (what a re-check must look for)."""
        return PrivacyContext(self.context.terms + tuple(self._learned), self.context.hosts_known)

    def learn(self, text: str, tmpl: str | None = None) -> list[Hit]:
        """Learn what ``text`` teaches; returns its hits (with the learned values) for reuse. ``tmpl`` is
        ``template(text)`` when the caller has it already."""
        first = self._detector.term_count
        hits = self._detector.learn_and_hit(text, (*self.context.terms, *self._learned), tmpl=tmpl)
        self._learned += self._detector.new_terms(first)
        return hits

    def placeholder(self, category: str, value: str, group: str = "") -> str:
        family = _FAMILY.get(category, "private")
        key = (family, (group or value).lower() if family != "token" else value)
        if key not in self._table:
            n = self._counts.get(family, 0) + 1
            self._counts[family] = n
            if family in _SINGLE:
                self._table[key] = f"<{family}>"
            elif family == "user":
                self._table[key] = "<user>" if n == 1 else f"<user-{n}>"
            else:
                self._table[key] = f"<{family}-{n}>"
        return self._table[key]

    def scrub_text(self, text: str, *, markup: bool = False) -> str:
        """``text`` with every private value replaced; ``markup`` escapes the placeholder for HTML/XML.

        Replacing a value can expose a new match at its edge (`host::b` leaves `>::b`, an IPv6 address),
        so passes repeat until nothing is found (a few at most). Only a line a pass changed can hold a new
        match (the rules are line-local; a key block's lines all change), so a pass first looks at those
        lines alone and the whole text is scanned again only when they hold something."""
        tmpl = template(text)
        hits: list[Hit] | None = self.learn(text, tmpl)
        for _ in range(8):
            out, out_tmpl, spans = self._scrub_once(text, tmpl, markup, hits)
            hits = None
            if out == text:
                break
            text, tmpl = out, out_tmpl
            touched = _touched_lines(text, spans)
            if not self._detector.hits(touched, "log", tmpl=template(touched)):
                break
        return text

    def scrub_name(self, name: str) -> str:
        """A file or folder name: addresses first (`10.20.30.40.log`), then the text rules on the name
        without its extension (`gpu-a17.dc3.acme.net.log`)."""
        stem, ext = split_extension(name)
        if ext:
            return self.scrub_name(stem) + ext
        parts: list[str] = []
        pos = 0
        for m in IPV4_IN_NAME.finditer(name):
            if not m.group(1).startswith(("0.", "127.")):
                parts += [name[pos : m.start(1)], self.placeholder("ip", m.group(1))]
                pos = m.end(1)
                self.replaced["ip"] = self.replaced.get("ip", 0) + 1
        return self.scrub_text("".join([*parts, name[pos:]]))

    def _scrub_once(
        self, text: str, tmpl: str, markup: bool, hits: list[Hit] | None = None
    ) -> tuple[str, str, list[int]]:
        """``text`` with one pass of replacements, its template (built alongside, not recomputed) and
        where each placeholder starts in it."""
        parts: list[str] = []
        tparts: list[str] = []
        spans: list[int] = []
        pos = 0
        at = 0
        for h in self._detector.hits(text, "log", tmpl=tmpl) if hits is None else hits:
            ph = self.placeholder(h.category, h.value, h.group)
            ph = html.escape(ph) if markup else ph
            parts += [text[pos : h.start], ph]
            tparts += [tmpl[pos : h.start], template(ph)]
            at += h.start - pos
            spans.append(at)
            at += len(ph)
            pos = h.end
            self.replaced[h.category] = self.replaced.get(h.category, 0) + 1
        if not parts:
            return text, tmpl, spans
        parts.append(text[pos:])
        tparts.append(tmpl[pos:])
        return "".join(parts), "".join(tparts), spans

    def check_text(self, text: str) -> list[Finding]:
        return find_private(text, self.known_context, mode="log")


def _touched_lines(text: str, starts: list[int]) -> str:
    """The lines of ``text`` holding the offsets ``starts`` (ascending), each once, joined in order."""
    out: list[str] = []
    end = 0
    for s in starts:
        if s < end:
            continue
        a = text.rfind("\n", 0, s) + 1
        end = text.find("\n", s) + 1 or len(text)
        out.append(text[a:end])
    joined = "".join(out)
    return joined if joined.endswith("\n") or not joined else joined + "\n"


def split_extension(name: str) -> tuple[str, str]:
    """(`gpu-a17.dc3.acme.net`, `.log`): the last suffix when it is a known file extension."""
    stem, dot, ext = name.rpartition(".")
    if dot and stem and ext.lower() in FILE_EXTENSIONS:
        return stem, "." + ext
    return name, ""


def check_name(name: str, context: PrivacyContext | None = None) -> list[str]:
    """Categories of the private values in a file or folder name."""
    stem, ext = split_extension(name)
    if ext:
        return sorted(set(check_name(stem, context)) | set(check_name(name.replace(".", " "), context)))
    cats = [f.category for f in find_private(name, context)]
    cats += ["ip" for m in IPV4_IN_NAME.finditer(name) if not m.group(1).startswith(("0.", "127."))]
    return sorted(set(cats))


def _read(f: Path) -> bytes:
    try:
        return f.read_bytes()
    except OSError as exc:
        raise UserError(f"{f}: cannot read ({exc.strerror or exc})") from None


def _file_findings(
    f: Path, context: PrivacyContext | None, mode: Mode, suspects: list[str] | None = None
) -> list[str]:
    """`file:line:col category` lines for ``f``; with ``suspects`` given, its suspect lines are added
    there from the same reading. A text file is read a chunk at a time, twice: what all of it teaches
    first, then the findings (as one scan of the whole text would report them)."""
    sniffed = sniff(f)
    if sniffed.encoding is None or mode == "card":
        return _whole_file_findings(f, context, mode, suspects)
    ctx = context or PrivacyContext()
    det = Detector(ctx)
    first = det.term_count
    for chunk in text_chunks(f, sniffed):
        det.learn_and_hit(chunk, (*ctx.terms, *det.new_terms(first)))
    lines: list[str] = []
    fresh = Detector(ctx) if suspects is not None else None  # suspects: the context's terms only
    base = 0
    for chunk in text_chunks(f, sniffed):
        tmpl = template(chunk)
        found = findings_of(chunk, det.hits(chunk, tmpl=tmpl))
        lines += [f"{f}:{x.line + base}:{x.col} {x.describe()}" for x in found]
        if suspects is not None:
            sus = find_suspects(chunk, fresh, tmpl=tmpl)
            suspects += [f"{f}:{x.line + base}:{x.col} {x.category}" for x in sus]
        base += chunk.count("\n")
    return lines


def _whole_file_findings(
    f: Path, context: PrivacyContext | None, mode: Mode, suspects: list[str] | None
) -> list[str]:
    """A file that is not text (searched byte for byte), or a card (its rules read the whole text)."""
    data = _read(f)
    dec = decode_bytes(data)
    tmpl = template(dec.text)
    found = find_private(dec.text, context, mode=mode, tmpl=tmpl)
    lines = [f"{f}:{x.line}:{x.col} {x.describe()}" for x in found]
    if suspects is not None and dec.encoding is not None:
        det = Detector(context or PrivacyContext())
        suspects += [f"{f}:{x.line}:{x.col} {x.category}" for x in find_suspects(dec.text, det, tmpl=tmpl)]
    if dec.encoding is None and b"\x00" in data:  # UTF-16/32 without a BOM: NULs hide every value
        for codec in ("utf-16-le", "utf-16-be", "utf-32-le", "utf-32-be"):
            text = data[: len(data) - len(data) % (4 if "32" in codec else 2)].decode(codec, "replace")
            seen = {x.describe() for x in find_private(text, context)}
            lines += [f"{f}:0:0 {cat} (in {codec.upper()} text)" for cat in sorted(seen)]
    return lines


def check_files(
    paths: Sequence[str | os.PathLike[str]],
    context: PrivacyContext | None = None,
    *,
    mode: Mode = "log",
    suspects: list[str] | None = None,
) -> list[str]:
    """`file:line:col category` for every private value in ``paths`` (folders are walked), and
    `file:0:0 category (in the file name)` for one in a name under a given folder or of a given file.
    With ``suspects`` given, what `check_suspects` would say is added there (one reading per file)."""
    lines: list[str] = []
    for root, f in _expand_roots(paths):
        rel = f.relative_to(root) if root != f else Path(f.name)
        for cat in sorted({c for part in rel.parts for c in check_name(part, context)}):
            lines.append(f"{f}:0:0 {cat} (in the file name)")
        lines += _file_findings(f, context, mode, suspects)
    return lines


def check_suspects(
    paths: Sequence[str | os.PathLike[str]], context: PrivacyContext | None = None
) -> list[str]:
    """`file:line:col suspect host-like name` for names shaped like machines that no rule proves
    private; meaningful when the hosts are not known (no cluster file)."""
    det = Detector(context or PrivacyContext())
    out: list[str] = []
    for _, f in _expand_roots(paths):
        sniffed = sniff(f)
        if sniffed.encoding is None:
            continue
        base = 0
        for chunk in text_chunks(f, sniffed):
            out += [f"{f}:{x.line + base}:{x.col} {x.category}" for x in find_suspects(chunk, det)]
            base += chunk.count("\n")
    return out


def _expand_roots(paths: Sequence[str | os.PathLike[str]]) -> list[tuple[Path, Path]]:
    out: list[tuple[Path, Path]] = []
    for p in map(Path, paths):
        if p.is_dir():
            out += [(p, x) for x in sorted(p.rglob("*")) if x.is_file() and not x.is_symlink()]
        elif p.is_file():
            out.append((p, p))
        elif p.exists():
            raise UserError(f"{p}: not a regular file or folder (a pipe or device?); pass files or folders")
        else:
            raise UserError(f"{p}: no such file or folder")
    return out


def _scrub_one(scrubber: Scrubber, src: Path, dest: Path, sniffed: Sniffed) -> None:
    """Scrub ``src`` into ``dest`` a chunk at a time through a temporary file (replaced atomically; an
    in-place file nothing changed in is left as it is)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    if (
        sniffed.encoding is None
    ):  # not text: cannot be rewritten safely; copy it and let the re-check judge it
        if src != dest:
            shutil.copyfile(src, dest)
        return
    markup = src.suffix.lower() in _MARKUP_SUFFIXES
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent)
    try:
        changed = False
        with os.fdopen(fd, "wb") as fh:
            fh.write(sniffed.bom)
            enc = codecs.getincrementalencoder(sniffed.encoding)()
            for chunk in text_chunks(src, sniffed):
                out = scrubber.scrub_text(chunk, markup=markup)
                changed = changed or out != chunk
                fh.write(enc.encode(out))
            fh.write(enc.encode("", final=True))
        if src == dest and not changed:
            Path(tmp).unlink()
            return
        if src.exists():
            os.chmod(tmp, src.stat().st_mode & 0o777)
        os.replace(tmp, dest)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def scrub_files(
    paths: Sequence[str | os.PathLike[str]],
    context: PrivacyContext | None = None,
    *,
    out_dir: str | os.PathLike[str] | None = None,
    in_place: bool = False,
    scrubber: Scrubber | None = None,
) -> ScrubReport:
    """Scrub files and folders into ``out_dir`` (a folder argument keeps its name and layout there; file
    names are scrubbed too) or in place, then re-check every output. One placeholder table for all; what
    any input teaches (a short host name, a node list) is learned from all of them before the first
    is written, so every file gets the same placeholders whatever the order."""
    if (out_dir is None) == (not in_place):
        raise UserError("scrub: pass exactly one of --out DIR or --in-place")
    sc = scrubber or Scrubber(context)
    roots = _expand_roots(paths)
    how: dict[Path, Sniffed] = {}
    for _, f in roots:  # read twice, a chunk at a time, rather than hold every file in memory
        sniffed = how[f] = sniff(f)
        if sniffed.encoding is not None:
            for chunk in text_chunks(f, sniffed):
                sc.learn(chunk)
    jobs: list[tuple[Path, Path]] = []
    for root, f in roots:
        base = root if root.is_dir() else root.parent
        rel = Path(*[sc.scrub_name(part) for part in f.relative_to(base).parts])
        if in_place:
            jobs.append((f, base / rel))
        else:
            assert out_dir is not None
            top = [sc.scrub_name(root.name)] if root.is_dir() else []
            jobs.append((f, Path(out_dir, *top) / rel))
    if out_dir is not None:
        dests = [dst.resolve() for _, dst in jobs]
        if len(set(dests)) != len(dests):
            raise UserError(
                f"--out {out_dir}: two inputs would be written to the same file; scrub them apart"
            )
        for src, dst in jobs:
            if dst.resolve() == src.resolve():
                raise UserError(f"--out {out_dir}: would overwrite its input {src}; use --in-place for that")
    report = ScrubReport(hosts_known=sc.context.hosts_known)
    written: list[Path] = []
    for src, dst in jobs:
        sniffed = how[src]
        if sniffed.encoding is None and out_dir is not None:
            report.left_out.append(str(dst))  # its scrubbed name: where it would have gone
            continue
        try:
            _scrub_one(sc, src, dst, sniffed)
        except OSError as exc:
            where = f"--out {out_dir}" if out_dir is not None else "--in-place"
            raise UserError(
                f"{where}: cannot write {dst} ({exc.strerror or exc}); pick a writable folder"
            ) from None
        if in_place and dst != src:
            src.unlink()
            _drop_empty_parents(src.parent, stop=[Path(p) for p in paths])
        report.files[str(src)] = str(dst)
        written.append(dst)
    report.replaced = dict(sc.replaced)
    known = sc.known_context
    suspects: list[str] | None = None if known.hosts_known else []
    report.leftovers = check_files(written, known, suspects=suspects)
    report.suspects = suspects or []
    return report


def _drop_empty_parents(folder: Path, stop: list[Path]) -> None:
    """Remove folders a rename emptied (their names may be private), up to the folders given."""
    stops = {p.resolve() for p in stop}
    while folder.resolve() not in stops and folder.is_dir() and not any(folder.iterdir()):
        folder.rmdir()
        folder = folder.parent


def scrub_run_folder(run_dir: Path, context: PrivacyContext) -> ScrubReport:
    """Scrub every artefact of a run folder in place (results.json, events.jsonl, plan.json, report.html,
    junit.xml, summary.md, logs/**) with one placeholder table, file names included, and re-check the
    result. ``context`` is merged with what the folder itself records (plan.json, results.json hosts).
    The caller fails the export when ``report.clean`` is False."""
    d = Path(run_dir)
    if not d.is_dir():
        raise UserError(f"{d}: not a run folder")
    ctx = context.merged(context_from_run_folder(d, environ={}))
    return scrub_files([d], ctx, in_place=True)
