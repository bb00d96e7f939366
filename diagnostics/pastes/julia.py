"""Julia's runtime backtraces: a Julia program (CUDA.jl, a Julia GPU package) stuck, dumped.

Julia prints a task's native and Julia frames, innermost first, when it gets a signal it
reports (``signal (10): User defined signal 1`` for SIGUSR1, the profiler's ``Profile.print``
of a stuck thread, a crash), one frame a line::

    _jl_mutex_wait at /cache/build/.../src/threading.c:953
    jl_mutex_lock at /cache/build/.../src/julia_locks.h:65 [inlined]
    __pthread_rwlock_wrlock at /usr/lib/libc.so.6 (unknown line)
    unknown function (ip: 0x7faa9cb16566) at (unknown file)
    macro expansion at /home/u/.julia/packages/CUDA/6Jmwc/lib/cudadrv/libcuda.jl:4848 [inlined]

A frame is ``NAME at PATH:LINE`` or ``NAME at LIB (unknown line)``, the name Julia's own
(``#launch_configuration#901``, ``_copyto!``, ``macro expansion``) and the path a source
file of Julia or C, or a library: a sentence with "at file.py:10" in it is no frame. Every
frame is native (none is a Python frame): a C call reads as the table's row for it.
"""

from __future__ import annotations

import re

from hangwatch.diagnostics.pastes.builder import Builder, Line
from hangwatch.diagnostics.stacks import Frame

_FRAME = re.compile(
    r"^(?P<name>macro expansion|[\w#!.@{}:,<>$-]{1,300}) at (?P<path>(?:[./~]|[A-Za-z]:)?\S{0,1000}?"
    r"(?:\.(?:jl|c|h|cpp|cc|hpp|S)|\.so[\d.]{0,20}|\.dylib|\.dll))(?::(?P<line>\d{1,7})| \(unknown line\))(?: \[inlined\])?$")
_UNKNOWN = re.compile(r"^unknown function \(ip: 0x[0-9a-fA-F]{1,16}\)(?: at \(unknown file\))?$")
#: The report's first line: "signal (10): User defined signal 1", "signal (11): Segmentation fault".
_SIGNAL = re.compile(r"^signal \(\d{1,3}\): \S.{0,100}$")


def julia_line(b: Builder, ln: Line) -> bool:
    """A frame of a Julia backtrace, or its signal line (a new thread's report)."""
    s = ln.s
    if s.startswith("signal (") and _SIGNAL.match(s):
        b.start_thread(None, "unknown", "" if b.group and any(t.frames for t in b.group) else "MainThread")
        b.report.thread_headers -= 1  # (no thread header: a report's first line)
        return True
    if s.startswith("unknown function (ip: "):
        if _UNKNOWN.match(s) is None:
            return False
        b.add_frames([Frame("??", "?", None, native=True)])
        b.after_break = False
        return True
    if " at " not in s:
        return False
    m = _FRAME.match(s)
    if m is None:
        return False
    b.add_frames([Frame(m.group("name"), m.group("path").replace("\\", "/"), int(m.group("line")) if m.group("line") else None,
                        native=True)])
    b.after_break = False
    return True
