"""Incident bundles: atomic writer, reader (directory or .tar.gz), packer.

Invariants:
* a reader never sees half a bundle: files go into a hidden temporary sibling
  (``.NAME.tmp-XXXX``), are fsynced, and the directory is renamed into place;
  a crash leaves only the hidden directory, which readers skip;
* every text file passes through ``redact_text`` on the way out, a safety net
  behind the structured redaction of environments and command lines.

The layout is documented in docs/bundle-format.md.
"""

from __future__ import annotations

import errno
import gzip
import io
import json
import os
import re
import stat
import tarfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Callable, Mapping

from hangwatch.diagnostics.errors import BundleError, InputError
from hangwatch.diagnostics.pyspy import parse_json
from hangwatch.contract.redact import redact_text, redact_value
from hangwatch.diagnostics.stacks import ProcessDump, ProcessSeries, group_series
from hangwatch.contract import atomic
from hangwatch.contract.capped import FileTooLarge, NotRegularFile, describe_kind, open_capped
from hangwatch.contract.private import UnsafePathError, check_ancestors
from hangwatch.contract.samples import Sample

SCHEMA = 1
MANIFEST = "manifest.json"
_STACK_FILE = re.compile(r"^stacks/round-(\d+)/pid-(\d+)\.json$")


def write_bundle(final: Path, files: Mapping[str, bytes | str]) -> Path:
    """Write ``files`` (relative path -> content) as the bundle ``final``.

    If ``final`` exists (two incidents in one second), a ``-2``, ``-3``... suffix
    is added. Returns the path written.
    """
    encoded = {}
    for name, content in files.items():
        _check_relative(name)
        encoded[name] = encode_text(_redacted(name, content)) if isinstance(content, str) else content
    # Private like the rest of the run dir (logs and environment are in it, redacted
    # or not); `hangwatch bundle pack` makes the copy meant for sharing.
    return atomic.write_dir(final, encoded, mode=0o700)


def encode_text(text: str) -> bytes:
    """A bundle's text as UTF-8, a byte that was not UTF-8 shown as ``\\udcXX``.

    Names from the system come in with such bytes as lone surrogates (a trainer argument, a
    path or an environment value that is not UTF-8, which the trainer's user chooses): a plain
    ``.encode()`` raised on one, and the whole capture failed, stacks and all, leaving only the
    samples-only bundle."""
    return text.encode("utf-8", "backslashreplace")


def _redacted(name: str, text: str) -> str:
    """``text`` redacted for a bundle. A JSON file (or JSON-lines file) is redacted field by
    field (``redact_value``) and left as written when nothing in it is secret: redacting its
    text replaced a sensitive key's number or ``{`` with a bare marker, and a trainer beating
    ``pass_at_1=0.25`` left every bundle of its run unreadable by replay and report."""
    if name.endswith(".json"):
        try:
            data = json.loads(text)
        except (ValueError, RecursionError):
            return redact_text(text)
        clean = redact_value(data)
        return text if clean == data else dumps_json(clean)
    if name.endswith(".jsonl"):
        return "\n".join(_redacted_line(line) for line in text.split("\n"))
    return redact_text(text)


def _redacted_line(line: str) -> str:
    try:
        data = json.loads(line) if line.strip() else None
    except (ValueError, RecursionError):
        return redact_text(line)
    if data is None:
        return line
    clean = redact_value(data)
    return line if clean == data else json.dumps(clean, default=str)


def replace_file(bundle_dir: Path, name: str, content: str) -> Path:
    """Atomically (re)write one text file inside an existing bundle (the report)."""
    _check_relative(name)
    _check_place(bundle_dir / name, "give -o OUT.html to write the report elsewhere")
    return atomic.write_file(bundle_dir / name, encode_text(redact_text(content)))


def _check_place(out: Path, fix: str) -> None:
    """Refuse to write ``out`` below a folder another user controls (as the run directory
    is refused): the bundle directory they own, or a folder on the way, can be swapped
    for a link between our check and our write, and root's report then landed in a
    root-only directory of their choosing (reproduced with a flipping link)."""
    try:
        check_ancestors(out, "output")
    except UnsafePathError as exc:
        raise InputError(f"{exc}; {fix}") from None


def _check_relative(name: str) -> None:
    if name.startswith("/") or ".." in Path(name).parts:
        raise ValueError(f"bundle file name must be relative and inside the bundle: {name!r}")


def list_bundles(run_dir: Path) -> list[Path]:
    """Complete bundles of a run, oldest first; hidden (in-progress) dirs skipped."""
    incidents = run_dir / "incidents"
    if not incidents.is_dir():
        return []
    return sorted(p for p in incidents.iterdir() if p.is_dir() and not p.name.startswith(".") and (p / MANIFEST).is_file())


@dataclass(frozen=True)
class Bundle:
    """A bundle read into memory (they are small: tails and dumps)."""

    source: Path
    name: str
    files: Mapping[str, bytes] = field(repr=False)
    #: stack files the last ``dumps()`` left out, past ``MAX_STACK_OBJECTS``
    left_out: list[str] = field(default_factory=list, repr=False, compare=False)

    @property
    def manifest(self) -> dict[str, Any]:
        manifest = self.json(MANIFEST)
        if not isinstance(manifest, dict):
            raise BundleError(f"{self.source}: {MANIFEST} is not a JSON object")
        return manifest

    def text(self, name: str) -> str | None:
        data = self.files.get(name)
        return data.decode("utf-8", "replace") if data is not None else None

    def json(self, name: str, default: Any = None) -> Any:
        text = self.text(name)
        if text is None:
            return default
        try:
            return json.loads(text)
        except ValueError as exc:
            raise BundleError(f"{self.source}: {name} is not valid JSON ({exc})") from None
        except RecursionError:
            raise BundleError(f"{self.source}: {name} is nested too deeply to be a hangwatch file") from None

    def samples(self) -> list[Sample]:
        text = self.text("samples.jsonl") or ""
        out = []
        for n, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    out.append(Sample.from_json(json.loads(line)))
                except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
                    raise BundleError(f"{self.source}: samples.jsonl line {n}: {exc}") from None
        return out

    def dumps(self) -> list[ProcessDump]:
        """Every stack file's dump, within ``MAX_STACK_OBJECTS`` in all (a file that would pass
        it is left out, named in ``left_out``). ``processes.json`` is parsed once: it was parsed
        again for each stack file, and a sent bundle of 200 stack files and a 25 MB process
        table kept `replay` 109 s (4,000 files, the entry cap: over half an hour)."""
        out = []
        cmdlines: dict[int, str] | None = None
        ranks: dict[int, int] = {}
        objects = 0
        left_out: list[str] = []
        for name in sorted(self.files, key=_stack_order):
            m = _STACK_FILE.match(name)
            if m:
                weight = self.files[name].count(b"{")
                if objects + weight > MAX_STACK_OBJECTS:
                    left_out.append(name)
                    continue
                objects += weight
                dump = parse_json(self.text(name) or "", round_no=int(m.group(1)), source=f"{self.source}:{name}")
                if cmdlines is None:
                    rows = self.process_rows()
                    cmdlines, ranks = _cmdlines(rows), _ranks(rows)
                pid = dump.pid if dump.pid is not None else int(m.group(2))
                out.append(ProcessDump(pid, dump.threads, cmdlines.get(int(m.group(2)), ""), dump.python, dump.round,
                                       ranks.get(pid)))
        self.left_out[:] = [n for n in self.left_out if not _STACK_FILE.match(n)] + left_out
        return out

    def process_rows(self) -> Any:
        """``processes.json``, or [] when it has none or holds more than ``MAX_TABLE_OBJECTS``
        objects (then named in ``left_out``): a sent bundle's 31 MiB table of ``{},{},...``
        kept `report` 419 s and took 24 GB."""
        data = self.files.get("processes.json")
        if data is not None and data.count(b"{") > MAX_TABLE_OBJECTS:
            if "processes.json" not in self.left_out:
                self.left_out.append("processes.json")
            return []
        return self.json("processes.json", []) or []

    def series(self) -> tuple[ProcessSeries, ...]:
        return group_series(self.dumps())


#: Objects (``{``: about one a frame) the stack files of one bundle may hold in all. Parsing and
#: classifying cost ~23 us and ~400 bytes a frame: one 31 MiB stack file of ``{},{},...`` (10 M
#: frames; a .tar.gz of a few hundred KB) kept `replay` 242 s at 4.4 GB and `report` 188 s at
#: 5.4 GB, four of them past the machine's memory. A real capture is well under: 64 processes,
#: 2 rounds, 60 threads of 40 frames are 0.3 M.
MAX_STACK_OBJECTS = 1_000_000
#: Objects a bundle's ``processes.json`` may hold: a real one has a few per process and thread
#: (1,000 processes of 100 threads: 0.1 M).
MAX_TABLE_OBJECTS = 1_000_000


def _stack_order(name: str) -> tuple:
    m = _STACK_FILE.match(name)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def _ranks(rows: Any) -> dict[int, int]:
    """Each process's launcher rank (``processes.json``'s ``rank``, where the capture read one)."""
    return {r["pid"]: r["rank"] for r in (rows if isinstance(rows, list) else []) if isinstance(r, dict) and isinstance(r.get("pid"), int)
            and isinstance(r.get("rank"), int) and not isinstance(r.get("rank"), bool)}


def _cmdlines(rows: Any) -> dict[int, str]:
    return {int(r["pid"]): " ".join(r.get("cmdline") or []) for r in rows if "pid" in r}


def is_bundle_path(path: Path) -> bool:
    if path.is_dir():
        return (path / MANIFEST).is_file()
    return path.name.endswith((".tar.gz", ".tgz"))


# A bundle is a few MiB (log tails, dumps, samples). Anything far larger is not
# one, and reading it whole would let a 2 MB .tar.gz (a decompression bomb) take
# gigabytes: sizes are checked from the headers before a byte is decompressed.
MAX_MEMBER_BYTES = 32 * 1024 * 1024
MAX_TOTAL_BYTES = 128 * 1024 * 1024
MAX_MEMBERS = 4096
#: The .tar.gz itself: what it may hold, plus room for headers and incompressible data.
MAX_ARCHIVE_BYTES = MAX_TOTAL_BYTES + MAX_TOTAL_BYTES // 8


def load_bundle(path: Path) -> Bundle:
    """Read a bundle directory or ``.tar.gz`` into memory, bounded.

    Never follows a symlink (a link in a bundle directory, say a log tail
    pointing at a private file, is skipped) and never extracts an archive.
    """
    path = Path(path)
    if path.is_dir():
        with _BundleDir(path) as folder:
            if not folder.has_manifest():
                raise InputError(f"{path}: not a bundle (no {MANIFEST})")
            return Bundle(path, path.name, _read_dir(folder))
    budget = _Budget(path)
    try:
        # Read as a stream ("r|"), inflated by us: every byte tarfile sees, headers and skipped
        # data included, passes through _Inflated's count.
        with _open_archive(path) as raw, gzip.GzipFile(fileobj=raw, mode="rb") as gz, \
                tarfile.open(fileobj=_Inflated(gz, path), mode="r|", tarinfo=_HeaderCapped) as tar:
            files = {}
            top = None
            for member in tar:
                budget.member(member.name, member.size if member.isfile() else 0)
                # Read regular files into memory only: no extraction, so no
                # path traversal or link tricks from a hostile archive.
                if not member.isfile():
                    continue
                head, _, rel = member.name.partition("/")
                top = top or head
                extracted = tar.extractfile(member)
                if rel and extracted is not None:
                    files[rel] = extracted.read(MAX_MEMBER_BYTES + 1)
                    budget.check_read(member.name, len(files[rel]))
            tar.members = []  # tarfile keeps every header; we are done with them
    except (NotRegularFile, FileTooLarge) as exc:
        raise InputError(f"{path}: {exc.strerror}; give a bundle directory or its .tar.gz") from None
    except _HeaderTooLarge as exc:
        raise InputError(f"{path}: a tar header of {exc.size / 2**20:.0f} MiB, over the {MAX_HEADER_BYTES >> 20} MiB "
                         "a bundle's may have; not a hangwatch bundle (or a decompression bomb)") from None
    except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
        raise InputError(f"{path}: not a readable .tar.gz bundle ({exc})") from None
    if MANIFEST not in files:
        raise InputError(f"{path}: archive has no {MANIFEST} under a top directory; not a hangwatch bundle")
    return Bundle(path, top or path.name, files)


#: What tarfile may read of the inflated archive: the files' bytes plus a header and padding per
#: member and room for long names. The sizes above are checked from each member's header, but the
#: headers themselves are not members: a GNU long name or a pax header is read whole into memory
#: (a 1 GiB one from a 1 MB archive took 2.1 GB), and a member of a type tarfile does not know is
#: skipped by inflating all of it. Counting every inflated byte bounds both.
MAX_INFLATED_BYTES = MAX_TOTAL_BYTES + MAX_MEMBERS * 2048 + (16 << 20)
#: A long name, link name or pax header of a bundle member is a path and a few fields.
MAX_HEADER_BYTES = 1 << 20


class _Inflated(io.RawIOBase):
    """The inflated archive, refused with a clear error past ``MAX_INFLATED_BYTES``."""

    def __init__(self, stream: IO[bytes], source: Path) -> None:
        super().__init__()
        self.stream = stream
        self.source = source
        self.total = 0

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        want = MAX_INFLATED_BYTES + 1 - self.total
        data = self.stream.read(want if size is None or size < 0 else min(size, want))
        self.total += len(data)
        if self.total > MAX_INFLATED_BYTES:
            raise InputError(f"{self.source}: inflates to over {MAX_INFLATED_BYTES >> 20} MiB; not a hangwatch "
                             "bundle (or a decompression bomb)")
        return data


class _HeaderCapped(tarfile.TarInfo):
    """Refuses a long-name or pax header larger than ``MAX_HEADER_BYTES`` before tarfile reads it."""

    def _proc_member(self, tarfile_: tarfile.TarFile) -> tarfile.TarInfo:
        if self.type in (tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK, tarfile.XHDTYPE, tarfile.XGLTYPE,
                         tarfile.SOLARIS_XHDTYPE) and self.size > MAX_HEADER_BYTES:
            raise _HeaderTooLarge(self.size)
        return super()._proc_member(tarfile_)


class _HeaderTooLarge(Exception):
    def __init__(self, size: int) -> None:
        super().__init__(size)
        self.size = size


def _open_archive(path: Path) -> IO[bytes]:
    """The archive, open for reading: a FIFO named ``x.tar.gz`` would make a plain
    open wait forever for a writer, and a device never ends, so it is opened
    without blocking and must be a regular file of a bundle's size."""
    fd = open_capped(path, MAX_ARCHIVE_BYTES, what="a bundle archive may have")
    try:
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


class _Budget:
    """Member count, member size and total size of one bundle read, with a clear error."""

    def __init__(self, source: Path, hint: str = "not a hangwatch bundle (or a decompression bomb)") -> None:
        self.source = source
        self.hint = hint
        self.count = 0
        self.total = 0

    def member(self, name: str, size: int) -> None:
        self.count += 1
        self.total += max(0, size)
        if self.count > MAX_MEMBERS:
            raise InputError(f"{self.source}: more than {MAX_MEMBERS} files; not a hangwatch bundle")
        if size > MAX_MEMBER_BYTES:
            raise InputError(f"{self.source}: {name} is {size / 2**20:.0f} MiB, over the {MAX_MEMBER_BYTES >> 20} MiB "
                             f"a bundle file may have; {self.hint}")
        if self.total > MAX_TOTAL_BYTES:
            raise InputError(f"{self.source}: over {MAX_TOTAL_BYTES >> 20} MiB in all; not a hangwatch bundle")

    def check_read(self, name: str, got: int) -> None:
        if got > MAX_MEMBER_BYTES:
            raise InputError(f"{self.source}: {name} is larger than its header says; not a hangwatch bundle")


#: A bundle's files are at most three folders deep (stacks/round-N/pid-P.json); this leaves room.
MAX_DEPTH = 16


class _BundleDir:
    """A bundle directory held open by descriptor while it is read or packed.

    Every name below it is opened from that descriptor one component at a time,
    each ``O_NOFOLLOW``: another user who owns the directory can swap a folder in
    it for a link to a private one between the walk and the read (a race that put
    a root-only file into a shared archive), and it must not matter. A file that
    is a hard link (more than one name) and belongs to someone other than the
    directory's owner is not theirs to share either (where ``fs.protected_hardlinks``
    is 0, anyone may link any file they can see): it is left out.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            # The folder the user named, once (a link to it is theirs to make); nothing below it is followed.
            self.fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as exc:
            raise InputError(f"{path}: cannot read ({exc.strerror or exc})") from None
        self.owner = os.fstat(self.fd).st_uid

    def __enter__(self) -> "_BundleDir":
        return self

    def __exit__(self, *exc: object) -> None:
        os.close(self.fd)

    def has_manifest(self) -> bool:
        try:
            return stat.S_ISREG(os.stat(MANIFEST, dir_fd=self.fd, follow_symlinks=False).st_mode)
        except OSError:
            return False

    def foreign_link(self, st: os.stat_result) -> str | None:
        if st.st_nlink > 1 and st.st_uid != self.owner:
            return f"a hard link to a file of uid {st.st_uid}, not of the bundle's owner (uid {self.owner})"
        return None

    def open_dir(self, rel: str) -> int:
        """``rel`` (``a/b``) as a directory descriptor; OSError if a part is a link or not a folder."""
        fd = self.fd
        for part in rel.split("/") if rel else ():
            parent = fd
            try:
                fd = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent)
            finally:
                if parent != self.fd:
                    os.close(parent)
        return fd

    def open_file(self, rel: str) -> IO[bytes] | None:
        """A bundle file for reading, or None if it (or a folder on its way) is no longer
        a regular file or folder (swapped for a link, a FIFO or a device since the walk),
        or is another user's hard link: never followed, never waited on."""
        folder, _, name = rel.rpartition("/")
        try:
            parent = self.open_dir(folder)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                return None
            raise
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=parent)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                return None
            raise
        finally:
            if parent != self.fd:
                os.close(parent)
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or self.foreign_link(st):
            os.close(fd)
            return None
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")


def _walk(folder: _BundleDir, budget: _Budget, skipped: Callable[[str, str], None] | None = None) -> list[str]:
    """The relative name of every regular file of the bundle directory, under ``budget``
    (folders count as entries too); hidden entries (in-progress temporaries) are left
    out, and so are symlinks, FIFOs, devices, sockets and other users' hard links:
    named to ``skipped`` with what they are."""
    found: list[str] = []
    stack = [""]
    while stack:
        rel_dir = stack.pop()
        try:
            fd = folder.open_dir(rel_dir)
        except OSError as exc:
            raise InputError(f"{folder.path / rel_dir}: cannot read ({exc.strerror or exc})") from None
        try:
            with os.scandir(fd) as it:
                entries = sorted(it, key=lambda e: e.name)
            for entry in entries:
                if entry.name.startswith("."):
                    continue  # in-progress temporaries
                rel = f"{rel_dir}/{entry.name}" if rel_dir else entry.name
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError as exc:
                    raise InputError(f"{folder.path / rel}: cannot read ({exc.strerror or exc})") from None
                if stat.S_ISDIR(st.st_mode):
                    budget.member(rel + "/", 0)
                    if rel.count("/") >= MAX_DEPTH:
                        # Each file is opened one folder at a time from the top: nesting thousands
                        # deep made a read quadratic (3,000 empty folders: 7 s; the 4096-entry cap: ~15 s).
                        raise InputError(f"{folder.path}: folders nested over {MAX_DEPTH} deep; not a hangwatch bundle")
                    stack.append(rel)
                    continue
                why = describe_kind(st.st_mode) if not stat.S_ISREG(st.st_mode) else folder.foreign_link(st)
                if why:
                    if skipped is not None:  # symlinks (and devices, FIFOs, others' hard links) are never read
                        skipped(rel, why)
                    continue
                budget.member(rel, st.st_size)
                found.append(rel)
        except OSError as exc:
            raise InputError(f"{folder.path / rel_dir}: cannot read ({exc.strerror or exc})") from None
        finally:
            if fd != folder.fd:
                os.close(fd)
    return sorted(found)


def _read_dir(folder: _BundleDir) -> dict[str, bytes]:
    budget = _Budget(folder.path)
    files: dict[str, bytes] = {}
    for rel in _walk(folder, budget):
        try:
            handle = folder.open_file(rel)
            if handle is None:
                continue
            with handle:
                files[rel] = handle.read(MAX_MEMBER_BYTES + 1)
        except OSError as exc:
            raise InputError(f"{folder.path / rel}: cannot read ({exc.strerror or exc})") from None
        budget.check_read(rel, len(files[rel]))
    return dict(sorted(files.items()))


def pack(bundle_dir: Path, out: Path | None = None, skipped: Callable[[str, str], None] | None = None) -> Path:
    """``BUNDLE.tar.gz`` next to the bundle (or ``out``), written atomically.

    The archive is for sharing, so it holds the bundle's regular files only, under
    the reader's size limits: a symlink would carry a link to a local path, a FIFO
    or a device has no content to share. Each one left out is named to ``skipped``
    (relative name, what it is).
    """
    bundle_dir = Path(bundle_dir)
    if not bundle_dir.is_dir() or not (bundle_dir / MANIFEST).is_file():
        raise InputError(f"{bundle_dir}: not a bundle directory (no {MANIFEST})")
    out = Path(out) if out is not None else bundle_dir.with_name(bundle_dir.name + ".tar.gz")
    check_output_path(out)
    with _BundleDir(bundle_dir) as folder:
        if not folder.has_manifest():
            raise InputError(f"{bundle_dir}: not a bundle directory (no {MANIFEST})")
        members = _walk(folder, _Budget(bundle_dir, "take it out of the bundle directory (share it apart if needed)"),
                        skipped)
        _pack_members(folder, members, out, skipped)
    return out


def _pack_members(folder: _BundleDir, members: list[str], out: Path, skipped: Callable[[str, str], None] | None) -> None:
    bundle_dir = folder.path
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        with atomic.replacing(out) as raw, tarfile.open(fileobj=raw, mode="w:gz") as tar:
            for rel in members:
                try:
                    handle = folder.open_file(rel)
                except OSError as exc:
                    raise InputError(f"{bundle_dir / rel}: cannot read ({exc.strerror or exc})") from None
                if handle is None:
                    if skipped is not None:
                        skipped(rel, "no longer a regular file")
                    continue
                with handle:
                    info = tar.gettarinfo(arcname=f"{bundle_dir.name}/{rel}", fileobj=handle)
                    if info.size > MAX_MEMBER_BYTES:  # it grew since the walk
                        raise InputError(f"{bundle_dir}: {rel} grew over the {MAX_MEMBER_BYTES >> 20} MiB a bundle file "
                                         "may have while being packed")
                    tar.addfile(info, handle)
    except OSError as exc:
        raise InputError(f"{out}: cannot write the archive there ({exc.strerror or exc}); "
                         "give -o a path in a writable directory") from None


def check_output_path(out: Path) -> None:
    """Refuse an output that is not (or would not be) a plain regular file.

    The write is a rename over ``out``: aimed at ``/dev/null`` or ``/dev/full``
    it would replace the device node itself (as root), aimed at a directory it
    fails halfway, aimed at a symlink it replaces the link, not its target.
    """
    _check_place(out, "give -o a path under directories only you or root control")
    try:
        st = os.lstat(out)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise InputError(f"{out}: cannot use as output ({exc.strerror or exc})") from None
    if not stat.S_ISREG(st.st_mode):
        what = ("a directory" if stat.S_ISDIR(st.st_mode) else "a symbolic link" if stat.S_ISLNK(st.st_mode)
                else "a device or special file")
        example = f"{out}.html" if out.suffix not in (".gz", ".tgz") else "incident.tar.gz"
        raise InputError(f"{out}: is {what}, not a regular file; give -o the path of a new or existing regular "
                         f"file, e.g. -o {example}")


def dumps_json(data: Any) -> str:
    return json.dumps(data, indent=2, sort_keys=False, default=str) + "\n"


__all__ = ["Bundle", "SCHEMA", "write_bundle", "replace_file", "load_bundle", "pack", "list_bundles", "is_bundle_path", "dumps_json"]
