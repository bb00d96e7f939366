"""Native backtraces that frameworks print themselves: torch's C++ error backtraces
("Exception raised from X at F:N (most recent call first):" then "frame #k: ..."),
torch's fatal-signal handler (one block per thread), and PaddlePaddle's numbered
"C++ Traceback (most recent call last):".

An error's C++ backtrace is the raising thread's, so it is kept aside and read only
when the paste has no other stack; one the NCCL watchdog raised is never the hung
thread's own (see ``result``).
"""

from __future__ import annotations

import re

from hangwatch.diagnostics.pastes.builder import Builder, Line
from hangwatch.diagnostics.pastes.gdb import cxx_name, gdb_call
from hangwatch.diagnostics.pastes.patterns import (
    ABSL_FRAME, BACKTRACE_SYMBOLS, MAX_FRAMES, MAX_THREADS, NCCL_WATCHDOG_RAISERS, NUMBERED_CXX, NUMBERED_CXX_HEAD,
    RAISED_FROM, SIGNAL_THREAD, TORCH_CXX_FRAME,
)
from hangwatch.diagnostics.stacks import Frame


def raised_from(block: list[Frame]) -> list[Frame]:
    """A torch C++ error backtrace without the frames that build the error itself
    (c10::Error, TORCH_CHECK's helpers) or that have no name."""
    return [f for f in block if f.function != "?" and not f.function.startswith(("c10::Error::", "c10::detail::torchCheck"))]


def cxx_frame(b: Builder, s: str) -> bool:
    """A line of torch's C++ error backtrace: the raising thread's native frames, kept
    (one block per backtrace) for a paste that has no other stack."""
    m = TORCH_CXX_FRAME.match(s)
    if m is None:
        return False
    name = m.group(2)
    name = "?" if name.startswith("<unknown") else (cxx_name(name) or name)
    frame = Frame(name, m.group(3) or "?", None, native=True)
    if m.group(1) == "0" or not b.cxx_blocks:
        if len(b.cxx_blocks) >= MAX_THREADS:
            return True
        b.cxx_blocks.append([])
        raised, b.cxx_raised = b.cxx_raised, None
        if raised is not None and raised[1].endswith("ProcessGroupNCCL.cpp") and raised[0].rsplit("::", 1)[-1] in NCCL_WATCHDOG_RAISERS:
            b.cxx_watchdog.add(id(b.cxx_blocks[-1]))
        if b.report.lines - b.error_tb_line <= 4 and b.tb_pending:
            # Right under an error's Python traceback (its message, then "Exception raised
            # from X (most recent call first):"): the same thread's inner, native part.
            b.cxx_of[len(b.tb_pending) - 1] = b.cxx_blocks[-1]
    if len(b.cxx_blocks[-1]) < MAX_FRAMES:
        b.cxx_blocks[-1].append(frame)
    return True


def signal_thread(b: Builder, m: re.Match[str]) -> None:
    """'SIGABRT(6), PID: 15837, Thread 15853:' of torch's fatal-signal handler: a thread of
    that process (the one whose id is the pid is the main thread); its frames follow."""
    pid, tid = int(m.group(3)), m.group(4)
    proc = next((p for p in b.processes if p.pid == pid), None)
    if proc is None:
        b.new_process(pid)
    else:
        b.close_group()
        b.proc = proc
    b.start_thread(tid, "unknown", "MainThread" if int(tid) == pid else "")
    b.signal_frames, b.signal_skip = True, 2
    if not b.report.signal_dump:
        b.report.signal_dump = f"{m.group(1)}({m.group(2)})"


def signal_frame(b: Builder, s: str) -> bool:
    """A frame of the thread torch's fatal-signal handler is printing. The handler's own
    frame and the signal trampoline under it are where the dump was printed from, not
    where the thread was: dropped."""
    m = TORCH_CXX_FRAME.match(s)
    if m is None:
        return False
    name = m.group(2)
    name = "?" if name.startswith("<unknown") else (cxx_name(name) or name)
    if b.signal_skip == 2 and "SignalHandler" in name:
        b.signal_skip = 1
        return True
    if b.signal_skip == 1 and name == "?":
        b.signal_skip = 0
        return True
    b.signal_skip = 0
    b.add_frames([Frame(name, m.group(3) or "?", None, native=True)])
    return True


def numbered_line(b: Builder, s: str) -> bool:
    """A row of Paddle's C++ traceback ("10  ncclBarrierEnqueueWait(ncclComm*)");
    False (and the traceback ends) on anything else but its dashed rules."""
    if set(s) <= {"-", "="}:
        return True
    m = NUMBERED_CXX.match(s)
    frame = gdb_call(m.group(2), addressed=True) if m else None
    if frame is None:
        frames, b.numbered = b.numbered, None
        if frames:
            b.traceback_thread("", frames)
        return False
    if b.numbered is not None and len(b.numbered) < MAX_FRAMES:
        b.numbered.append(frame)
    return True


# -- steps of reader.STEPS ----------------------------------------------------
def numbered_row(b: Builder, ln: Line) -> bool:
    return b.numbered is not None and numbered_line(b, ln.s)


def cxx_lines(b: Builder, ln: Line) -> bool:
    """The fatal-signal handler's thread header, a "frame #k: f + 0x.." line (of that
    handler's thread, else of an error's backtrace), or the "Exception raised from"
    above a backtrace. Any other line ends the fatal-signal handler's block."""
    s = ln.s
    if s[:3] == "SIG" and ", PID: " in s:
        ms = SIGNAL_THREAD.match(s)
        if ms:
            signal_thread(b, ms)
            return True
    if s.startswith("frame #") and "`" not in s:
        if b.signal_frames and signal_frame(b, s):
            return True
        if cxx_frame(b, s):
            return True
    b.signal_frames = False
    if s.startswith("Exception raised from ") and (mr := RAISED_FROM.match(s)) is not None:
        b.cxx_raised = (mr.group(1), mr.group(2))
        b.skip(s)
        return True
    return False


def numbered_head(b: Builder, ln: Line) -> bool:
    if ln.first == "C" and NUMBERED_CXX_HEAD.match(ln.s):
        b.drop_bare()
        b.numbered = []
        return True
    return False


def symbol_frames(b: Builder, ln: Line) -> bool:
    """A frame of glibc's ``backtrace_symbols`` ("lib(fn+0x10)[0x...]", "lib[0x...]") or of
    abseil's failure-signal handler ("@ 0x... (unknown) fn"): a native stack printed by
    the program itself, innermost first; the lines in a row are one thread."""
    s = ln.s
    if s[-1:] == "]" and "[0x" in s:
        m = BACKTRACE_SYMBOLS.match(s)
        if m is None:
            return False
        lib, fn = m.group(1).strip(), (m.group(2) or "").strip()
        b.add_frames([Frame(cxx_name(fn) or fn or "?", lib, None, native=True)])
        return True
    if "@" in s[:6] and "0x" in s:
        m = ABSL_FRAME.match(s)
        if m is None:
            return False
        fn = m.group(1).strip()
        fn = "?" if fn == "(unknown)" else (cxx_name(fn) or fn)
        b.add_frames([Frame(fn, "?", None, native=True)])
        return True
    return False

