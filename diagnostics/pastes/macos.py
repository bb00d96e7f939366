"""macOS ``sample`` and ``spindump`` call graphs: each thread a tree, outermost frame first.

``sample PID`` prints, under ``Call graph:``, one tree per thread::

    2035 Thread_345029   DispatchQueue_1: com.apple.main-thread  (serial)
      2035 start  (in dyld) + 1942  [0x7ff8106a3386]
        2035 main  (in python.exe) + 33  [0x102ef5421]  python.c:15

(with ``+ ! : |`` tree marks in front of deep lines; a "#" before each line where the tree
was pasted as comments), and ``spindump`` the same tree as
``1001  main + 100 (python3.9 + 3000) [0x10000abcd]`` under ``Thread 0x1a2b3 ... samples``
(``*`` marks kernel frames). A count in front of each frame says how many samples went
through it, and siblings come heaviest first: the first path down the tree, each line one
level deeper than the last, is where the thread sat nearly every sample. That path is read
as the thread's stack; the lighter branches after it are skipped.
"""

from __future__ import annotations

import re

from hangwatch.diagnostics.pastes.builder import Builder, Line
from hangwatch.diagnostics.pastes.patterns import MAX_FRAMES
from hangwatch.diagnostics.stacks import Frame

# "Analysis of sampling Python (pid 35146) every 1 millisecond"
_ANALYSIS = re.compile(r"^Analysis of sampling .{1,200}? \(pid (\d{1,10})\)")
# The report's header: "Process:         Python [35146]", "Path:  /...", "Load Address:  0x..."
_HEADER_FIELD = re.compile(r"^[A-Z][A-Za-z/ ]{1,30}:\s{1,40}\S")
# "2035 Thread_345029   DispatchQueue_1: ..." (its id elided in a paste: "Thread_\u2026")
_SAMPLE_THREAD = re.compile(r"^#?(\d{1,9}) Thread_(\d{1,20}\b|\u2026|\.\.\.)\s{0,40}(.{0,300})$")
_SPIN_THREAD = re.compile(r"^Thread (0x[0-9a-fA-F]{1,16})\b.{0,300}?\b(\d{1,9}) samples?\b")
# "2035 start  (in dyld) + 1942  [0x7ff8106a3386]  python.c:15", an unsymbolicated one
# "2035 ???  (in Python)  load address 0x10b85a000 + 0xa37bd  [0x10b8fd7bd]"
_SAMPLE_FRAME = re.compile(
    r"^([\s+!:|#]{0,400})(\d{1,9}) {1,4}(\S.{0,500}?) {1,4}\(in ([^()]{1,200})\) {1,4}"
    r"(?:load address 0x[0-9a-fA-F]{1,16} {1,4})?\+ {1,4}(?:0x[0-9a-fA-F]{1,16}|\d{1,12})"
    r"(?: {1,4}\[0x[0-9a-fA-F]{1,16}(?:,0x[0-9a-fA-F]{1,16}){0,8}\])?(?: {1,4}(\S{1,300}?):(\d{1,7}))?\s*$")
# "  1001  __psynch_cvwait + 10 (libsystem_kernel.dylib + 18542) [0x7fff6f1fe882]"
_SPIN_FRAME = re.compile(
    r"^(\s{0,400})\*?(\d{1,9}) {1,4}(\S.{0,500}?)(?: \+ \d{1,12})? {1,4}\(([^()+]{1,200}?)(?: \+ \d{1,12})?\)"
    r"(?: {1,4}\[0x[0-9a-fA-F]{1,16}\])?.{0,200}$")


def _end_thread(b: Builder) -> None:
    frames, b.mac_frames = b.mac_frames, None
    if frames:
        b.traceback_thread(b.mac_thread, frames)  # outermost first, like a traceback


def end_graph(b: Builder) -> None:
    _end_thread(b)
    b.mac_graph = b.mac_tentative = False


def call_graph(b: Builder, ln: Line) -> bool:
    """A line of a ``sample``/``spindump`` call graph (see the module docstring)."""
    s = ln.s
    if s.startswith("Analysis of sampling ") and (ma := _ANALYSIS.match(s)) is not None:
        # sample's own first line: the report (and its graph) follows, whatever of its
        # header and "Call graph:" the paste kept
        end_graph(b)
        b.expect_process(int(ma.group(1)))
        b.mac_graph = b.mac_seen = True
        b.mac_threads = 0  # (its first thread is that process's main thread)
        return True
    if not b.mac_graph:
        if (s == "Call graph:" or (s[:9] == "Thread 0x" and "samples" in s and _SPIN_THREAD.match(s) is not None)
                or ((s[:1].isdigit() or (s[:1] == "#" and s[1:2].isdigit())) and " Thread_" in s and _SAMPLE_THREAD.match(s) is not None)):
            # (a paste of one thread's tree starts at its "N Thread_N" line: header and
            # "Call graph:" left out; a graph only once a frame of the tree follows)
            b.mac_graph = True
            b.mac_seen = True
            b.mac_tentative = s != "Call graph:" and not s.startswith("Thread 0x")
            if s == "Call graph:":
                return True
        else:
            return False
    if b.mac_frames is None and (s in ("...", "\u2026", "Call graph:") or _HEADER_FIELD.match(s) is not None):
        return True  # the report's header fields, or the part of it a paste elided
    mt = _SAMPLE_THREAD.match(s) or _SPIN_THREAD.match(s)
    if mt is not None:
        _end_thread(b)
        rest = mt.group(3) if mt.re is _SAMPLE_THREAD else s
        name = "MainThread" if ("main-thread" in rest or not b.mac_threads) else f"Thread_{mt.group(2) if mt.re is _SAMPLE_THREAD else mt.group(1)}"
        b.mac_threads += 1
        b.mac_thread, b.mac_frames, b.mac_depth, b.mac_done = name, [], -1, False
        return True
    m = _SAMPLE_FRAME.match(ln.line) or _SPIN_FRAME.match(ln.line)
    if m is None:
        if s.startswith(("Total number in stack", "Sort by top of stack", "Binary Images:")):
            end_graph(b)
            return True
        if b.mac_tentative and not (s in ("...", "\u2026") and b.mac_frames is not None):
            # "4242 Thread_1 waiting for batch" in a log, no tree under it: no graph
            end_graph(b)
            return False
        if b.mac_frames is not None and (s[:1] in "+!:|*" or s[:1].isdigit() or s in ("...", "\u2026")):
            return True  # a line of the graph this reader does not take apart, or frames a paste elided
        end_graph(b)
        return False
    if b.mac_frames is None:
        b.mac_thread, b.mac_frames, b.mac_depth, b.mac_done = ("MainThread" if not b.mac_threads else f"Thread_{b.mac_threads}"), [], -1, False
        b.mac_threads += 1
    b.mac_tentative = False
    depth = len(m.group(1))
    if b.mac_done or depth <= b.mac_depth:
        b.mac_done = True  # a lighter branch: the heaviest path is read
        return True
    b.mac_depth = depth
    function, lib = m.group(3).strip(), m.group(4).strip().removeprefix("in ")
    if len(b.mac_frames) < MAX_FRAMES:
        src = m.group(5) if m.re is _SAMPLE_FRAME else None
        b.mac_frames.append(Frame(function, src or lib, int(m.group(6)) if src else None, native=not (src or "").endswith(".py")))
    return True
