"""Hang signatures: known stall patterns with advice, loaded from TOML files.

The built-in set ships as ``diagnostics/signatures.toml``; user files add to it
(an existing id is replaced). Loading is strict: a syntax error or an invalid
signature is a ``SignatureFileError`` naming the file and, where it can, the line.
"""

from __future__ import annotations

import functools
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from hangwatch.contract.capped import FileTooLarge, NotRegularFile, read_capped
from hangwatch.diagnostics.errors import SignatureFileError
from hangwatch.diagnostics.stacks import Frame, ThreadDump

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

BUILTIN = Path(__file__).with_name("signatures.toml")
_ID = re.compile(r"^[a-z0-9][a-z0-9._-]*$")
_KNOWN_KEYS = {"id", "title", "priority", "match", "thread", "process", "frames", "advice", "kind", "collective", "innermost", "source", "wrapper"}
#: stall: a verdict (the default); idle: the thread waits for new work (an
#: engine's or a worker's loop); helper: a background thread that never decides
#: the verdict (progress bars, pin-memory, monitors, watchdogs).
KINDS = ("stall", "idle", "helper")
_FRAME_KEYS = {"function", "file", "regex", "innermost", "outermost"}
#: Signatures look at the innermost frames only: a stall is where the thread
#: is, and a runaway recursion in a paste must not cost time.
MAX_MATCH_FRAMES = 256
#: A signature file is a few KiB (the built-in one, every known hang, is ~32 KiB):
#: anything larger is not one, and reading /dev/zero or a sparse file whole would
#: take all memory (a FIFO would block forever: contract.capped never waits).
MAX_SIGNATURE_FILE_BYTES = 1 << 20
_rx = functools.lru_cache(maxsize=4096)(re.compile)


@functools.lru_cache(maxsize=4096)
def _rx_lines(pattern: str) -> re.Pattern[str] | None:
    """``pattern`` for a search over one-name-per-line text (None when it could
    match across lines or only at the very start or end of a text)."""
    if any(tok in pattern for tok in ("\\A", "\\Z", "\\n", "\\s", "\\S", "(?s", "[^")):
        return None
    return re.compile(pattern, re.MULTILINE)


class ThreadLines:
    """A thread's function names and files, one per line: a pattern that finds
    nothing here matches no frame, which one C-level search tells. Build it
    with ``for_thread`` and pass it to every signature's ``match_thread``."""

    __slots__ = ("functions", "files", "cut")

    def __init__(self, frames: Sequence[Frame]) -> None:
        # (with the method's own name after each class-qualified one: see FramePattern.matches)
        self.functions = "\n".join(f.function if f.method == f.function else f"{f.function}\n{f.method}" for f in frames)
        self.files = "\n".join(f.file for f in frames)
        self.cut = any(f.file[-1:] == "…" for f in frames)

    @classmethod
    def for_thread(cls, thread: ThreadDump) -> "ThreadLines":
        return cls(thread.frames[:MAX_MATCH_FRAMES])


@dataclass(frozen=True)
class FramePattern:
    function: str | None = None
    file: str | None = None
    regex: bool = False
    #: only the thread's innermost Python frame may match (a name as common as
    #: "acquire" says the thread waits only where the stack ends); a number N: one of the
    #: N innermost (a kernel library's wrapper under torch's op dispatch); 0: any frame
    innermost: int = 0
    #: only the thread's outermost Python frame may match: a function the interpreter calls
    #: with nothing of the program's below it (an exit hook run by atexit), not the same
    #: function called by the program's own code
    outermost: bool = False

    def __post_init__(self) -> None:
        # Compiled once: a big paste is matched frame by frame.
        object.__setattr__(self, "_fn_rx", _rx(self.function) if self.regex and self.function is not None else None)
        object.__setattr__(self, "_file_rx", _rx(self.file) if self.regex and self.file is not None else None)

    def could_match(self, lines: ThreadLines) -> bool:
        """False only when no frame of ``lines`` can match (a fast pre-check)."""
        if self.function is not None:
            if self.regex:
                rx = _rx_lines(self.function)
                if rx is not None and rx.search(lines.functions) is None:
                    return False
            elif self.function not in lines.functions:
                return False
        if self.file is not None and not lines.cut:
            if self.regex:
                rx = _rx_lines(self.file)
                return rx is None or rx.search(lines.files) is not None
            last = self.file.rstrip("/").rsplit("/", 1)[-1]
            return last in lines.files
        return True

    def matches(self, frame: Frame) -> bool:
        function = self.function
        if function is not None:
            rx = self._fn_rx  # type: ignore[attr-defined]
            if rx is not None:
                # A regex written for a bare name ("^get$") matches the method that py-spy 0.4
                # and Python 3.11's faulthandler name with its class ("SimpleQueue.get"), as
                # older dumps printed it.
                if rx.search(frame.function) is None and (frame.method == frame.function or rx.search(frame.method) is None):
                    return False
            elif function not in frame.function:
                return False
        if self.file is not None and not self._match_file(frame):
            return False
        return True

    def _match_file(self, frame: Frame) -> bool:
        pat, file = self.file, frame.file
        assert pat is not None
        rx = self._file_rx  # type: ignore[attr-defined]
        if file[-1:] == "…":
            # "torch/cuda/…" may be "torch/cuda/graphs.py": a substring pattern
            # matches when what survived is a prefix of it, or contains it.
            kept = file[:-1]
            if rx is not None:
                return rx.search(kept) is not None
            if pat in kept:
                return True
            least = min(len(pat), 5)
            return any(kept.endswith(pat[:k]) for k in range(len(pat), least - 1, -1))
        if rx is not None:
            return rx.search(file) is not None
        if pat in file:
            return True
        # A pasted text dump may only have short paths ("dataloader.py",
        # "data/dataloader.py"): they match a pattern that ends with them at a
        # component boundary ("worker.py" is not "eagle_worker.py"). Substring
        # patterns only; a directory pattern needs the directory.
        if "/" not in pat or pat.endswith("/") or file.startswith("/"):
            return False
        return ("/" + pat).endswith("/" + file)

    def describe(self) -> str:
        parts = [f"{k}={v!r}" for k, v in (("function", self.function), ("file", self.file)) if v is not None]
        return " ".join(parts) + (" (regex)" if self.regex else "")


@dataclass(frozen=True)
class Signature:
    id: str
    title: str
    advice: str
    frames: tuple[FramePattern, ...]
    priority: int = 0
    match: str = "any"
    thread: str | None = None
    process: str | None = None
    source: str = ""
    kind: str = "stall"
    collective: bool = False
    innermost: int | None = None
    reference: str = ""
    #: The frames wrap the work the thread runs (a graph replay's or a compiled forward's
    #: wrapper): a blocking call at the top of the thread (a collective, a synchronize, a
    #: lock) outranks it when the wrapper's frames are further out (see ``waits``).
    wrapper: bool = False

    def match_thread(self, thread: ThreadDump, cmdline: str = "", lines: ThreadLines | None = None) -> tuple[Frame, ...]:
        """The frames that satisfy this signature in ``thread``; empty when it does not match.
        A helper signature with only a ``thread`` pattern (no frames) matches by name."""
        if self.thread is not None and not _rx(self.thread).search(thread.name):
            return ()
        if self.process is not None and not _rx(self.process).search(cmdline):
            return ()
        if not self.frames:
            return thread.frames[:1] or (Frame("?", "?"),)
        frames = thread.frames[:MAX_MATCH_FRAMES]
        if self.innermost is not None:
            frames = _innermost(frames, self.innermost)
            lines = None
        if lines is None:
            lines = ThreadLines(frames)
        hits = [[f for f in _scope(frames, p, thread.frames) if p.matches(f)] if p.could_match(lines) else [] for p in self.frames]
        if self.match == "all" and not all(hits):
            return ()
        evidence = {id(f): f for group in hits for f in group}
        # Keep stack order (innermost first).
        return tuple(f for f in frames if id(f) in evidence)


def _scope(frames: tuple[Frame, ...], pattern: FramePattern, whole: tuple[Frame, ...]) -> tuple[Frame, ...]:
    """The frames ``pattern`` may match: its innermost ones, the thread's outermost Python
    frame (when ``frames`` reaches it), or all."""
    if pattern.outermost:
        last = next((f for f in reversed(whole) if not f.native), None)
        return (last,) if last is not None and any(f is last for f in frames) else ()
    return _innermost(frames, pattern.innermost) if pattern.innermost else frames


def _innermost(frames: Sequence[Frame], n: int) -> tuple[Frame, ...]:
    """Frames up to and including the ``n``-th Python (non-native) frame."""
    seen = 0
    for i, f in enumerate(frames):
        if not f.native:
            seen += 1
            if seen >= n:
                return tuple(frames[: i + 1])
    return tuple(frames)


def load_signatures(extra: Iterable[str | Path] = (), *, builtin: bool = True) -> tuple[Signature, ...]:
    """Built-ins, then each extra file in order; later ids replace earlier ones."""
    by_id: dict[str, Signature] = {}
    paths = ([BUILTIN] if builtin else []) + [Path(p) for p in extra]
    for path in paths:
        for sig in load_file(path):
            by_id[sig.id] = sig
    return tuple(sorted(by_id.values(), key=lambda s: -s.priority))


def load_file(path: Path) -> list[Signature]:
    try:
        text = read_capped(path, MAX_SIGNATURE_FILE_BYTES).decode("utf-8")
    except (NotRegularFile, FileTooLarge) as exc:
        raise SignatureFileError(f"{path}: {exc.strerror}; --signatures takes a TOML file of [[signature]] tables") from None
    except OSError as exc:
        raise SignatureFileError(f"{path}: cannot read signature file ({exc.strerror or exc})") from None
    except UnicodeDecodeError as exc:
        raise SignatureFileError(f"{path}: not a text (UTF-8 TOML) signature file: byte {exc.start} is "
                                 f"{exc.object[exc.start:exc.start + 1]!r}; give a .toml of [[signature]] tables") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        # tomllib's message ends with "(at line L, column C)".
        raise SignatureFileError(f"{path}: invalid TOML: {exc}") from None
    except RecursionError:
        raise SignatureFileError(f"{path}: nested too deeply; not a signature file") from None
    unknown = set(data) - {"signature"}
    if unknown:
        raise SignatureFileError(f"{path}: unknown top-level key(s) {sorted(unknown)}; expected [[signature]] tables")
    entries = data.get("signature", [])
    if not isinstance(entries, list):
        raise SignatureFileError(f"{path}: 'signature' must be an array of tables ([[signature]])")
    lines = _header_lines(text)
    return [_build(entry, path, i, lines[i] if len(lines) == len(entries) else None) for i, entry in enumerate(entries)]


def _header_lines(text: str) -> list[int]:
    return [n for n, line in enumerate(text.splitlines(), 1) if re.match(r"\s*\[\[\s*signature\s*\]\]", line)]


def _build(entry: Mapping[str, Any], path: Path, index: int, line: int | None) -> Signature:
    sid = entry.get("id")
    where = f"{path}" + (f", line {line}" if line else "") + f": signature #{index + 1}" + (f" ({sid!r})" if isinstance(sid, str) else "")

    def fail(msg: str) -> SignatureFileError:
        return SignatureFileError(f"{where}: {msg}")

    unknown = set(entry) - _KNOWN_KEYS
    if unknown:
        raise fail(f"unknown key(s) {sorted(unknown)}; allowed: {sorted(_KNOWN_KEYS)}")
    if not isinstance(sid, str) or not _ID.match(sid):
        raise fail(f"missing or invalid 'id' (got {sid!r}); use lowercase letters, digits, '-', '.', '_'")
    kind = entry.get("kind", "stall")
    for key in ("title", "advice") if kind == "stall" else ("title",):
        if not isinstance(entry.get(key), str) or not entry[key].strip():
            raise fail(f"missing '{key}' (a non-empty string)")
    if not isinstance(entry.get("advice", ""), str):
        raise fail("'advice' must be a string")
    priority = entry.get("priority", 0)
    if not isinstance(priority, int) or isinstance(priority, bool):
        raise fail(f"'priority' must be an integer, got {priority!r}")
    match = entry.get("match", "any")
    if match not in ("any", "all"):
        raise fail(f"'match' must be \"any\" or \"all\", got {match!r}")
    for key in ("thread", "process"):
        if entry.get(key) is not None:
            _compile(entry[key], fail, key)
    if kind not in KINDS:
        raise fail(f"'kind' must be one of {', '.join(repr(k) for k in KINDS)}, got {kind!r}")
    collective = entry.get("collective", False)
    if not isinstance(collective, bool):
        raise fail(f"'collective' must be true or false, got {collective!r}")
    innermost = entry.get("innermost")
    if innermost is not None and (not isinstance(innermost, int) or isinstance(innermost, bool) or innermost < 1):
        raise fail(f"'innermost' must be a positive integer, got {innermost!r}")
    wrapper = entry.get("wrapper", False)
    if not isinstance(wrapper, bool):
        raise fail(f"'wrapper' must be true or false, got {wrapper!r}")
    reference = entry.get("source", "")
    if not isinstance(reference, str):
        raise fail(f"'source' must be a string (the public report it was learned from), got {reference!r}")
    raw_frames = entry.get("frames")
    if kind == "helper" and raw_frames is None and entry.get("thread") is not None:
        raw_frames = []
    elif not isinstance(raw_frames, list) or not raw_frames:
        raise fail("'frames' must be a non-empty list of {function = ..., file = ...} tables")
    frames = []
    for n, raw in enumerate(raw_frames, 1):
        if not isinstance(raw, dict):
            raise fail(f"frames[{n}] must be a table, got {raw!r}")
        bad = set(raw) - _FRAME_KEYS
        if bad:
            raise fail(f"frames[{n}]: unknown key(s) {sorted(bad)}; allowed: function, file, regex, innermost, outermost")
        if raw.get("function") is None and raw.get("file") is None:
            raise fail(f"frames[{n}] needs 'function' or 'file'")
        regex = raw.get("regex", False)
        if not isinstance(regex, bool):
            raise fail(f"frames[{n}]: 'regex' must be true or false, got {regex!r}")
        only_innermost = raw.get("innermost", False)
        if not isinstance(only_innermost, int) or (not isinstance(only_innermost, bool) and only_innermost < 1):
            raise fail(f"frames[{n}]: 'innermost' must be true, false or a positive number of frames, got {only_innermost!r}")
        outermost = raw.get("outermost", False)
        if not isinstance(outermost, bool):
            raise fail(f"frames[{n}]: 'outermost' must be true or false, got {outermost!r}")
        for key in ("function", "file"):
            value = raw.get(key)
            if value is not None and not isinstance(value, str):
                raise fail(f"frames[{n}]: '{key}' must be a string, got {value!r}")
            if value is not None and regex:
                _compile(value, fail, f"frames[{n}].{key}")
        frames.append(FramePattern(raw.get("function"), raw.get("file"), regex, int(only_innermost), outermost))
    return Signature(
        id=sid,
        title=entry["title"].strip(),
        advice=" ".join(entry.get("advice", "").split()),
        frames=tuple(frames),
        priority=priority,
        match=match,
        thread=entry.get("thread"),
        process=entry.get("process"),
        source=f"{path}" + (f":{line}" if line else ""),
        kind=kind,
        collective=collective,
        innermost=innermost,
        reference=reference.strip(),
        wrapper=wrapper,
    )


def _compile(pattern: Any, fail, what: str) -> None:
    if not isinstance(pattern, str):
        raise fail(f"{what} must be a string, got {pattern!r}")
    try:
        re.compile(pattern)
    except re.error as exc:
        raise fail(f"{what}: bad regex {pattern!r}: {exc}") from None


def find(signatures: Sequence[Signature], sid: str) -> Signature | None:
    return next((s for s in signatures if s.id == sid), None)
