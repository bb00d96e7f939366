"""The stack model every input is turned into: py-spy JSON, pasted text, bundles.

A ``ProcessDump`` is one look at one process; several dumps of the same pid
(capture rounds, or a paste with the same process twice) form a series, from
which ``frozen_threads`` tells a wedged thread (same frames, same lines, every
round) from a busy one. Frames are innermost first, as py-spy lists them.
"""

from __future__ import annotations

import functools
import re
import sys
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

from hangwatch.contract.terminal import one_line

# Pasted dumps have paths relative to sys.path ("http/client.py", "threading.py"):
# their first component names the module.
_STDLIB_NAMES = frozenset(getattr(sys, "stdlib_module_names", ())) | {"threading", "queue", "socket", "ssl", "selectors", "asyncio", "multiprocessing", "concurrent", "http", "json", "runpy", "subprocess", "contextlib", "functools"}
# "/usr/lib/python3.10/threading.py", and in gdb py-bt pastes of Python 2 as well as
# vendored interpreters ("/av/lib/third_party/python2.7/threading.py").
_STDLIB_PATH = re.compile(r"/python[23]\.\d{1,2}/(?!site-packages/|dist-packages/)")
# Windows keeps the standard library in "<install>\\Lib\\" ("C:\\Python312\\Lib\\threading.py",
# "...\\envs\\x\\Lib\\queue.py"), third-party code under "Lib\\site-packages".
_WINDOWS_DRIVE = re.compile(r"^[A-Za-z]:/")
_WINDOWS_STDLIB_PATH = re.compile(r"/Lib/(?!site-packages/|dist-packages/)")
# Native code that every process waits in (the C library, the C++ runtime, the
# interpreter itself): a thread whose only native frames are these is not blocked in
# anything of the job's own (CUDA, NCCL, torch, an extension).
_SYSTEM_NATIVE = re.compile(
    r"(^|/)(libc|libpthread|libstdc\+\+|libgcc_s|libm|librt|libdl|ld-linux[\w.-]{0,40}|ld|libpython[\d.]{0,8}m?|python[\d.]{0,8})(\.so[\d.]{0,20}|\.dylib)?$"
    r"|(^|/)(sysdeps|nptl|csu|libio|glibc[\w.-]{0,40}|Modules|Python|Objects|Include)/|syscall-template|futex"
    # CPython's own C modules by their file (py-spy --native: "fcntl_flock_impl (fcntlmodule.c:297)")
    # and the standard library's extension modules (WinDbg: "_winapi!_winapi_WaitForSingleObject")
    r"|(^|/)(fcntl|select|time|socket|signal|posix|_?thread|_queue|mmap|zlib|_bz2|_lzma|gc|_posixsubprocess|_ssl|_winapi)module\.c(\.h)?$"
    r"|(^|/)(libc-start|libc_start_call_main|pthread_create|clone3?)\.[chS]$"
    r"|(?i:(^|[/\\])(_winapi|_overlapped|_multiprocessing|_socket|_ssl|select|_queue|_posixsubprocess)([\w.-]{0,40}\.(pyd|so))?$)"
    # Windows' own DLLs (WinDbg names them without ".dll"), the C runtime's
    r"|(?i:(^|[/\\])(ntdll|kernel32|kernelbase|ucrtbase|msvcrt|msvcp\d{2,3}|vcruntime\d{2,3}\w?|python\d{1,3})(\.dll)?$)"
    # the Linux kernel and its modules (pastes.kernel): a kernel stack is the system's throughout
    r"|^\[[\w-]{1,64}\]$"
)

#: The GPU driver, its runtime and the collective libraries (CUDA, ROCm, NCCL/RCCL).
_GPU_NATIVE = re.compile(r"(^|/)(libcuda|libcudart|libnccl|librccl|libamdhip64|libhsa-runtime64)\.so")


def site_package(path: str) -> str:
    """The installed package a file belongs to: "ray" for ".../site-packages/ray/_private/
    worker.py"; "" for a file outside site-packages (a program's own)."""
    path = path.replace("\\", "/")
    for marker in ("site-packages/", "dist-packages/"):
        i = path.rfind(marker)
        if i != -1:
            return path[i + len(marker):].split("/", 1)[0]
    return ""


def top_package(path: str) -> str:
    """The package a file belongs to: the installed one (``site_package``), else the first
    folder of a relative path, as py-spy prints an installed library's files
    ("urllib3/connectionpool.py") and a path elided from the left ("...\\urllib3\\x.py")
    keeps its package; "" for an absolute path outside site-packages or a bare file name."""
    installed = site_package(path)
    if installed:
        return installed
    path = path.replace("\\", "/")
    if path.startswith(("...", "\u2026")):
        path = path.lstrip(".\u2026").lstrip("/")  # a path elided from the left: its first folder is gone
    first = path.split("/", 1)[0]
    if not path.startswith("/") and "/" in path and ":" not in first and first not in (".", ".."):
        return first
    return ""


@dataclass(frozen=True)
class Frame:
    """One frame. ``file`` is the full path when the source had it, else the short
    name; native frames have the library as ``file`` and no line."""

    function: str
    file: str
    line: int | None = None
    native: bool = False

    def __post_init__(self) -> None:
        if not self.native and self.file.endswith((".pyc", ".pyo")):
            # Python 2's and old IPython's tracebacks name the compiled file ("threading.pyc"):
            # the module is the source file's, which the tables name.
            object.__setattr__(self, "file", self.file[:-1])

    @property
    def short_file(self) -> str:
        if self.cut:
            return self.file
        return self.file.rsplit("/", 1)[-1]

    @property
    def method(self) -> str:
        """A Python function's own name, without the class or the enclosing function py-spy
        0.4 and Python 3.11's faulthandler put before it (``Thread.join`` -> ``join``, what
        older dumps print); a native name whole."""
        return self.function if self.native else self.function.rsplit(".", 1)[-1]

    @property
    def cut(self) -> bool:
        """The paste lost the end of this frame's path ("torch/cuda/…")."""
        return self.file.endswith("…")

    @property
    def key(self) -> tuple[str, str]:
        """Identity across incidents: line numbers differ between versions."""
        return (self.function, self.short_file)

    @functools.cached_property
    def is_stdlib(self) -> bool:
        if self.native:
            return True
        if self.file.startswith("/"):
            return bool(_STDLIB_PATH.search(self.file))
        if _WINDOWS_DRIVE.match(self.file):
            return bool(_WINDOWS_STDLIB_PATH.search(self.file))
        head = self.file.split("/", 1)[0]
        # "<string>": the ``python -c`` entry of a spawned worker, not own code.
        return head.removesuffix(".py") in _STDLIB_NAMES or head.startswith("<frozen") or head in ("<string>", "<stdin>")

    @property
    def is_system_native(self) -> bool:
        """A native frame of the C library, the C++ runtime or the interpreter (or of
        an unknown library): waiting there says nothing about the job's own code."""
        return self.native and (self.file in ("?", "???", "") or bool(_SYSTEM_NATIVE.search(self.file)))

    def render(self) -> str:
        if self.native or self.line is None:
            return f"{self.function} ({self.short_file})"
        return f"{self.function} ({self.short_file}:{self.line})"

    def to_json(self) -> dict[str, Any]:
        return {"function": self.function, "file": self.file, "line": self.line, "native": self.native}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Frame":
        line = data.get("line")
        return cls(str(data["function"]), str(data["file"]), int(line) if line is not None else None, bool(data.get("native")))


@dataclass(frozen=True)
class ThreadDump:
    """One thread as seen once. ``ident`` is stable across rounds (OS tid when known)."""

    ident: str
    name: str
    frames: tuple[Frame, ...]
    active: bool | None = None
    owns_gil: bool = False

    @property
    def signature(self) -> tuple[tuple[str, str, int | None], ...]:
        # Python frames only: native frames differ with --native and in raw
        # addresses, while a wedged thread keeps its Python stack.
        return tuple((f.function, f.file, f.line) for f in self.frames if not f.native)

    def telling_frames(self, limit: int = 5) -> tuple[Frame, ...]:
        """Innermost frames that are neither standard library nor native."""
        return tuple(f for f in self.frames if not f.is_stdlib)[:limit]

    def native_telling_frames(self, limit: int = 5) -> tuple[Frame, ...]:
        """Innermost native frames outside the C library and the interpreter (libcuda,
        libnccl, libtorch, an extension): a gdb/lldb/--native stack blocked in the job's
        own native code, which is no standard-library wait."""
        # An unsymbolised frame says nothing, except inside the GPU driver, runtime or
        # collective library when the job called into it: a main thread spinning there
        # (gdb's "?? () from libcuda.so.1" under clock_gettime, NCCL#1766) is blocked on
        # the device, not waiting for work. A thread the driver started itself
        # (start_thread -> libcuda: its event and semaphore pollers) stays a helper.
        gpu_unnamed = not self.driver_thread()
        return tuple(f for f in self.frames if f.native and not f.is_system_native
                     and (f.function != "?" or (gpu_unnamed and bool(_GPU_NATIVE.search(f.file)))))[:limit]

    def driver_thread(self) -> bool:
        """Started by the GPU driver or NCCL: outermost, past the C library's thread
        start, the first frame is theirs."""
        started = False
        for f in reversed(self.frames):
            if f.native and f.is_system_native:
                started = started or f.function in ("start_thread", "clone", "clone3", "__clone", "__clone3")
                continue
            return started and f.native and bool(_GPU_NATIVE.search(f.file))
        return False

    def to_json(self) -> dict[str, Any]:
        return {
            "ident": self.ident,
            "name": self.name,
            "active": self.active,
            "owns_gil": self.owns_gil,
            "frames": [f.to_json() for f in self.frames],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "ThreadDump":
        return cls(
            str(data["ident"]),
            str(data.get("name", "")),
            tuple(Frame.from_json(f) for f in data.get("frames", ())),
            data.get("active"),
            bool(data.get("owns_gil")),
        )


@dataclass(frozen=True)
class ProcessDump:
    """One look at one process. ``pid`` is None for a paste without a header;
    ``rank`` is the distributed rank when the source says it (``[rank3]:``
    prefixes, ``=== rank 3 ===`` separators), else None."""

    pid: int | None
    threads: tuple[ThreadDump, ...]
    cmdline: str = ""
    python: str = ""
    round: int = 1
    rank: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "pid": self.pid,
            "cmdline": self.cmdline,
            "python": self.python,
            "round": self.round,
            "rank": self.rank,
            "threads": [t.to_json() for t in self.threads],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "ProcessDump":
        rank = data.get("rank")
        return cls(
            data.get("pid"),
            tuple(ThreadDump.from_json(t) for t in data.get("threads", ())),
            str(data.get("cmdline", "")),
            str(data.get("python", "")),
            int(data.get("round", 1)),
            int(rank) if rank is not None else None,
        )


@dataclass(frozen=True)
class ProcessSeries:
    """Every dump of one process, in round order."""

    pid: int | None
    dumps: tuple[ProcessDump, ...] = field(default_factory=tuple)

    @property
    def latest(self) -> ProcessDump:
        return self.dumps[-1]

    @property
    def cmdline(self) -> str:
        return next((d.cmdline for d in reversed(self.dumps) if d.cmdline), "")

    @property
    def rank(self) -> int | None:
        return next((d.rank for d in reversed(self.dumps) if d.rank is not None), None)

    def frozen(self, ident: str) -> bool | None:
        """True when the thread shows the same frames (with lines) in every round
        it appears in, and it appears in at least two; None with a single look."""
        seen = self._signatures.get(ident, ())
        if len(seen) < 2:
            return None
        return all(s == seen[0] for s in seen[1:])

    @functools.cached_property
    def _signatures(self) -> dict[str, list[Any]]:
        """Each thread's signature per round, built once: ``frozen`` is asked for every thread,
        and scanning every round's threads each time was quadratic (a 40,000-thread bundle
        took minutes to report)."""
        by_ident: dict[str, list[Any]] = {}
        for d in self.dumps:
            for t in d.threads:
                by_ident.setdefault(t.ident, []).append(t.signature)
        return by_ident


def group_series(dumps: Iterable[ProcessDump]) -> tuple[ProcessSeries, ...]:
    """Group dumps by pid, keeping first-seen order; pid-less dumps stay apart.

    Two dumps with one pid are two looks at one process, unless their other threads
    share no id: a process keeps its threads between looks, while every container's
    first process is pid 1 (marin#7344: two ranks in their own containers, both
    "Process 1", read as one process looked at twice)."""
    groups: list[tuple[int, list[ProcessDump]]] = []
    loose: list[ProcessSeries] = []
    for dump in dumps:
        if dump.pid is None:
            loose.append(ProcessSeries(None, (dump,)))
            continue
        group = next((g for pid, g in groups if pid == dump.pid and _same_process(g[-1], dump)), None)
        if group is None:
            groups.append((dump.pid, [dump]))
        else:
            group.append(dump)
    series = [ProcessSeries(pid, tuple(sorted(g, key=lambda d: d.round))) for pid, g in groups]
    return tuple(series) + tuple(loose)


def _same_process(a: ProcessDump, b: ProcessDump) -> bool:
    """False when both dumps name threads besides the main one and share none of them."""
    main = str(a.pid)
    ids_a = {str(t.ident) for t in a.threads if t.ident is not None and str(t.ident) != main}
    ids_b = {str(t.ident) for t in b.threads if t.ident is not None and str(t.ident) != main}
    return not (ids_a and ids_b) or bool(ids_a & ids_b)


def render_text(series: Sequence[ProcessSeries]) -> str:
    """A readable rendering, close to ``py-spy dump`` so people recognise it."""
    out: list[str] = []
    for s in series:
        for dump in s.dumps:
            # Command lines, thread names and frames are the traced process's own words: one line each.
            out.append(f"Process {dump.pid if dump.pid is not None else '?'}: {one_line(dump.cmdline)}  "
                       f"[round {dump.round}]")
            if dump.python:
                out.append(f"Python {one_line(dump.python)}")
            for thread in dump.threads:
                state = "unknown" if thread.active is None else ("active" if thread.active else "idle")
                if thread.owns_gil:
                    state += "+gil"
                frozen = s.frozen(thread.ident)
                mark = "" if frozen is None else ("  [frozen across rounds]" if frozen else "  [changing]")
                out.append(f'Thread {thread.ident} ({state}): "{one_line(thread.name)}"{mark}')
                out.extend(f"    {one_line(f.render())}" for f in thread.frames)
            out.append("")
    return "\n".join(out)


@functools.lru_cache(maxsize=16384)
def started_by_threading(frames: tuple[Frame, ...]) -> bool:
    """The stack starts in threading's ``_bootstrap_inner`` (Python 2's
    ``__bootstrap_inner``): a thread ``Thread.start`` made, never a process's main thread,
    whatever a paste named it, and never a forked child's entry."""
    return any(not f.native and f.function.rsplit(".", 1)[-1] in ("_bootstrap_inner", "__bootstrap_inner")
               and f.file.replace("\\", "/").endswith("threading.py") for f in frames[-8:])

