"""gdb's and lldb's backtraces: ``thread apply all bt`` and ``Switching to thread``
headers, native ``#N 0x.. in f ()`` frames (C++ names with their own parameter lists,
``from LIB`` wrapped onto the next line), ``info threads`` rows, gdb's stop and attach
lines, both forms of ``py-bt``, and lldb's ``thread #N`` / ``frame #N`` lines.

gdb's thread 1, like lldb's, is the main thread. ``cxx_name`` and ``gdb_call`` take a
demangled C++ call apart; other native backtraces (``cxx_traces``) use them too.
"""

from __future__ import annotations

import re

from hangwatch.diagnostics.pastes.builder import Builder, Line
from hangwatch.diagnostics.pastes.patterns import (
    GC_FRAME, GDB_ATTACHED, GDB_BUILTIN, GDB_FRAME_ARG, GDB_INFO_THREAD, GDB_LOCATION_END, GDB_NUMBERED, GDB_PY2_BUILTIN,
    GDB_PY2_FILE, GDB_PY2_LOCK_WAIT, GDB_PYFRAME, GDB_STOPPED, GDB_THREAD, GDB_THREAD_LWP, GDB_UNHASHED, GIL_WAIT, HEX, INLINE_GDB, LLDB_FRAME,
    LLDB_OFFSET, LLDB_THREAD, LLDB_THREAD_FRAME, MAX_FRAMES, MAX_GDB_ARG_LINES, MODULE_FRAME, NATIVE_CUT, NATIVE_PATH,
    GDB_SYMBOL_ALONE, GDB_SYMBOL_NOT_PROSE, NUMBERED_FROM, PY_EXT, PYBT_MARKERS, TRACEBACK_FRAME, VS_FRAME, WINDBG_BARE, WINDBG_COLUMNS, WINDBG_FRAME, WINDBG_THREAD, WINDOWS_MODULE, WS,
)
from hangwatch.diagnostics.pastes.tracebacks import traceback_header
from hangwatch.diagnostics.stacks import Frame


#: Rust's legacy symbol hash ("...::join::hc92f1072ed8c169c") and the escapes its mangling
#: leaves in a name a debugger did not demangle fully ("JoinInner$LT$T$GT$").
_RUST_HASH = re.compile(r"::h[0-9a-f]{16}$")
_RUST_ESCAPES = (("$LT$", "<"), ("$GT$", ">"), ("$RF$", "&"), ("$BP$", "*"), ("$u20$", " "), ("$C$", ","))


def rust_name(name: str) -> str:
    """``name`` without Rust's hash suffix and mangling escapes (any other name as it is)."""
    if "$" in name:
        for escape, char in _RUST_ESCAPES:
            name = name.replace(escape, char)
    return _RUST_HASH.sub("", name) if "::h" in name else name


def cxx_name(name: str) -> str:
    """A demangled C++ name without its parameter list and qualifiers:
    "at::native::f(at::Tensor const&)::{lambda()#1}::operator()() const" -> "at::native::f".
    Parentheses inside template arguments (<...>) or lambdas ({...}) are kept; one pass.
    A Rust name loses its hash ("lance::tracing::shutdown_tracing::h6ffd...")."""
    return rust_name(_cxx_name(name))


def _cxx_name(name: str) -> str:
    depth = 0
    for i, ch in enumerate(name):
        if ch in "<{":
            depth += 1
        elif ch in ">}" and depth:
            depth -= 1
        elif ch == "(" and depth == 0 and name.startswith("(anonymous namespace)", i):
            depth += 1  # "c10d::ops::(anonymous namespace)::recv_CUDA(...)": part of the name
        elif ch == ")" and depth and name.endswith("(anonymous namespace)", 0, i + 1):
            depth -= 1
        elif ch == "(" and depth == 0 and i > 0 and not name.endswith("operator", 0, i):
            return name[:i].strip()
    return name.strip()


#: A function and the start of gdb's argument list, "name=value" (a numbered list's item
#: in prose has no such list).
_OPEN_ARGUMENTS = re.compile(r"^[A-Za-z_][\w:~<>.]{0,300} \((?:[A-Za-z_]\w{0,60}=|$)")


def gdb_call(text: str, addressed: bool) -> Frame | None:
    """A gdb frame after its "#N  0x.. in " prefix: "poll () at x.S:81", "ns::f(int) () from
    /lib/x.so", "c10::Foo::bar (this=...) at f.cpp:53", "g () at init.cc:XXX" (a re-typed
    placeholder line), or cut anywhere ("ccl_comm::allgather(", "c10d::abortComm").
    ``addressed``: it had "0x.. in ", so a name alone (cut before its arguments) is a frame."""
    where = "?"
    for mark in (") from ", ") at "):
        i = text.rfind(mark)
        if i != -1 and not WS.search(text[i + len(mark):].strip()):
            where = text[i + len(mark):].strip()
            if where.startswith("target:"):
                where = where[7:]  # gdb reading the target's files remotely or in a container
            if mark == ") at ":
                where = where.split(":", 1)[0]  # "f.cpp:53", "init.cc:XXX", "futex.cc:217:18"
            text = text[: i + 1]
            break
    text = text.strip()
    if text.endswith(")"):
        # The argument list is the last balanced "(...)" (walked back once).
        depth = 0
        for i in range(len(text) - 1, -1, -1):
            ch = text[i]
            if ch == ")":
                depth += 1
            elif ch == "(":
                depth -= 1
                if depth == 0:
                    text = text[:i]
                    break
        else:
            return None
    elif not addressed and where == "?":
        if _OPEN_ARGUMENTS.match(text) is None:
            return None
        # An inlined frame (gdb gives it no address) whose arguments gdb wrapped onto the
        # next lines: "#13 PyEval_EvalCode (co=<optimized out>, globals=<optimized out>,".
        text = text[:text.index(" (")]
    name = cxx_name(text)
    if not name or len(name) > 2000 or (WS.search(name) and "::" not in name and "<" not in name):
        return None
    return Frame("?" if name == "??" else name, where, None, native=True)


def _numbered_from(text: str) -> Frame | None:
    """'forward from /p/llama.py:2083' / 'poll from /lib/libc.so.6' (see NUMBERED_FROM)."""
    m = NUMBERED_FROM.match(text)
    if m is None:
        return None
    name, where, line = m.group(1), m.group(2).replace("\\", "/"), m.group(3)
    if where.endswith(PY_EXT):
        return Frame(name, where, int(line) if line else None)
    if where.startswith(":") and where[1:].isdigit():
        return Frame(name, "?", None, native=True)  # "from :0": no file known
    if NATIVE_PATH.search(where.rsplit("/", 1)[-1]) or NATIVE_CUT.search(where):
        return Frame(name, where, None, native=True)
    return None  # "#12 Merge from upstream/main": a numbered list, not a frame


def _symbol_alone(text: str) -> Frame | None:
    """'__pthread_cond_timedwait64' / 'PyEval_RestoreThread   <- the GIL': a frame a person
    shortened to its symbol (see GDB_SYMBOL_ALONE)."""
    m = GDB_SYMBOL_ALONE.match(text)
    if m is None or GDB_SYMBOL_NOT_PROSE.search(m.group(1)) is None:
        return None
    return Frame(m.group(1).rstrip(".:"), "?", None, native=True)


def gdb_frame(b: Builder, s: str) -> bool:
    """One gdb backtrace line: a py-bt frame ("#3 Frame 0x.., for file F, line N, in f (...")
    or a native one ("#0  0x.. in poll () at x.S:81", "... from /lib/libc.so.6")."""
    m = GDB_PYFRAME.match(s)
    if m:
        b.add_frames([Frame(m.group(3), m.group(1).replace("\\", "/"), int(m.group(2)))], pybt=True)
        b.after_break = False
        return True
    b.drop_bare()
    mc = COREDUMP_FRAME.match(s)
    if mc is not None:
        # systemd-coredump's and eu-stack's "#0  0x00007f.. f (libpython3.9.so.1.0 + 0x18d57e)"
        function = cxx_name(mc.group(1))
        b.add_frames([Frame("??" if function == "n/a" else function, mc.group(2).strip(), None, native=True)])
        b.after_break = False
        return True
    me = EU_STACK_FRAME.match(s) if mc is None and " in " not in s else None
    if me is not None:
        # eu-stack's "#0  0x00007f.. __lll_lock_wait" ("- /lib64/libc.so.6" with -m)
        function = cxx_name(me.group(1)) or me.group(1)
        b.add_frames([Frame(function, me.group(2) or "?", None, native=True)])
        b.after_break = False
        return True
    m = GDB_NUMBERED.match(s)
    number = int(s[1:m.end()].split()[0]) if m is not None else -1
    if m is not None:
        rest = s[m.end():].strip()
        frame = gdb_call(s[m.end():], addressed=m.group(1) is not None) or _numbered_from(rest)
        if frame is None and (number == 0 or b.report.lines - b.gdb_frame_line == 1):
            # A symbol alone is a frame only where a backtrace is: its "#0", or right under
            # another frame ("#1 cudaDeviceSynchronize" in a list of what was ruled out is none).
            frame = _symbol_alone(rest)
    else:
        head, sep, rest = s.partition(" in ")  # "0x00007f.. in poll () ..."
        frame = gdb_call(rest, addressed=True) if sep and HEX.match(head) else None
    if frame is None:
        return False
    if m is None and b.gdb_attached:
        # where the attached main thread stopped: its thread until its own bt replaces it
        b.gdb_attached = False
        b.start_thread(None, "unknown", "MainThread")
        if b.group:
            b.gdb_stop_thread = b.group[-1]
            b.gdb_stop_thread.number = "1"
            b.gdb_stop = True
    stop, b.gdb_stop = b.gdb_stop, False
    if number == 0 and b.gdb_stopped_at == frame.function:
        # "#0" of the bt after gdb's stop location: the same frame, already read.
        b.gdb_stopped_at = None
        b.after_break = False
        return True
    b.gdb_stopped_at = frame.function if stop and m is None else None
    if b.gdb_more >= 0 and number > b.gdb_more and b.group and all(t.headerless for t in b.group):
        # the outer frames of the thread "bt N" cut ("bt -N", numbered on from where it
        # stopped): the same thread, whatever prompt or prose came between
        b.after_break = False
    b.gdb_more, b.gdb_number = -1, number
    b.gdb_frame_line = b.report.lines
    b.add_frames([frame])
    b.gdb_open = frame.file == "?"  # gdb may wrap "from /lib/x.so" onto the next line
    b.after_break = False
    _frame_argument(b, s)
    depth = s.count("(") - s.count(")")
    if depth > 0 and not GDB_LOCATION_END.search(s):
        # gdb wrapped the arguments (the line ends inside them, not at "at F:N" or
        # "from LIB"): the next indented lines continue them
        b.gdb_args, b.gdb_depth = MAX_GDB_ARG_LINES, depth
    return True


def _frame_argument(b: Builder, s: str) -> None:
    """The Python frame python-gdb shows as the eval function's argument (``f=Frame 0x..,
    for file F, line N, in f``): the Python code that native frame runs, under it."""
    m = GDB_FRAME_ARG.search(s) if "=Frame 0x" in s else None
    if m is not None:
        b.add_frames([Frame(m.group(3), m.group(1).replace("\\", "/"), int(m.group(2)))])


def gdb_arguments(b: Builder, ln: Line) -> bool:
    """A line of a gdb frame's wrapped arguments ("    f=Frame 0x.., for file F, line N, in
    f (self=...", "    arg=(), kw=0x0) at ../Objects/methodobject.c:81"): part of that
    frame, not a new stack; ends at the line whose parenthesis closes it."""
    if b.gdb_args <= 0:
        return False
    s = ln.s
    if ln.indent < 2 or s.startswith(("#", "`", "Thread ", "(gdb)", "[")):
        b.gdb_args = 0  # a frame, a header, a fence or prose: the arguments were cut
        return False
    b.gdb_args -= 1
    _frame_argument(b, s)
    b.gdb_depth += s.count("(") - s.count(")")
    if b.gdb_depth <= 0:
        b.gdb_args = 0
    return True


def gdb_continuation(b: Builder, s: str) -> bool:
    """'   from /opt/lib/libccl.so.1' under a gdb frame that gdb wrapped: its library."""
    b.gdb_open = False
    where = s[5:].strip() if s.startswith("from ") else s[3:].strip().split(":", 1)[0]
    if not where or WS.search(where):
        return False
    for t in b.group:
        if t.frames and t.frames[-1].file == "?":
            last = t.frames[-1]
            t.frames[-1] = Frame(last.function, where, None, native=True)
    return True


_LLDB_NOTES = (" [opt]", " [inlined]", " [artificial]")


def lldb_line(b: Builder, s: str) -> bool:
    """lldb's "thread #N, name = 'x', ..." and "frame #N: 0x.. lib.so`symbol + off [at f.cc:1:2]"."""
    m = LLDB_FRAME.match(s)
    if m is not None:
        lib, sym = m.group(1), m.group(2)
        while sym.endswith(_LLDB_NOTES):
            sym = sym[:sym.rfind(" [")]  # " [opt]", " [inlined]": how it was compiled
        i = sym.rfind(" at ")
        if i != -1 and not WS.search(sym[i + 4:].strip()):
            sym = sym[:i]
        sym = LLDB_OFFSET.sub("", sym.strip())
        name = cxx_name(sym)
        if not name:
            return False
        b.add_frames([Frame(name, lib, None, native=True)])
        b.after_break = False
        return True
    m = LLDB_THREAD.match(s)
    if m is not None:
        name = "MainThread" if m.group(1) == "1" else (m.group(3) or "")
        tid = m.group(2)
        if tid and tid[:2] in ("0x", "0X"):
            tid = str(int(tid, 16))
        b.start_thread(tid or f"lldb-{m.group(1)}", "unknown", name)
        mf = LLDB_THREAD_FRAME.search(s)
        if mf is not None and (name := cxx_name(mf.group(2).strip())):
            # `thread list` / `thread info all`: the thread's innermost frame on its own line
            b.add_frames([Frame(name, mf.group(1), None, native=True)])
        return True
    return False


def windbg_line(b: Builder, s: str) -> bool:
    """WinDbg's thread header, column header and "ADDR ADDR module!function+0xNN" frames,
    and Visual Studio's "module.dll!function(args) Line N" (see ``WINDBG_FRAME``)."""
    m = WINDBG_THREAD.match(s)
    if m is not None:
        b.start_thread(str(int(m.group(3), 16)), "unknown", "MainThread" if m.group(1) == "0" else "")
        return True
    if WINDBG_COLUMNS.match(s):
        return True
    m = WINDBG_FRAME.match(s) or VS_FRAME.match(s) or MODULE_FRAME.match(s)
    if m is None and "!" in s:
        m = WINDBG_BARE.match(s)
        if m is not None and WINDOWS_MODULE.match(m.group(1)) is None and not (
                b.group and b.group[-1].frames and b.group[-1].frames[-1].native and not b.after_break):
            m = None
    if m is None or (m.re is not VS_FRAME and m.group(2) is None and "+0x" not in s):
        return False
    module, sym = m.group(1), m.group(2)
    name = (cxx_name(sym) or sym) if sym else "?"
    b.add_frames([Frame(name, module, None, native=True)])
    b.after_break = False
    return True


def gdb_info_thread(b: Builder, m: re.Match[str]) -> bool:
    """One row of gdb's "info threads": a thread and its innermost frame."""
    rest = m.group(5)
    head, sep, call = rest.partition(" in ")
    addressed = bool(sep and HEX.match(head))
    text = call if addressed else rest
    frame = gdb_call(text, addressed=addressed)
    if frame is None and text.count("(") > text.count(")") and " (" in text:
        # The frame column's argument list went on to the next line (gdb wraps a long one,
        # and the table's padding makes most rows long): the function before it is the frame.
        frame = gdb_call(text[:text.index(" (")] + " ()", addressed=addressed)
    if frame is None:
        return False
    b.start_thread(m.group(2) or m.group(3), "unknown", "MainThread" if m.group(1) == "1" else (m.group(4) or ""))
    b.add_frames([frame])
    b.after_break = False
    return True


def gdb_header(b: Builder, s: str) -> bool:
    """gdb's thread headers and py-bt's "Traceback (most recent call first):"."""
    m = GDB_THREAD.match(s) or GDB_THREAD_LWP.match(s)
    if m:
        stopped = b.gdb_stop_thread
        at = next((i for i, t in enumerate(b.proc.threads) if t is stopped), None) if stopped and b.proc else None
        if at is not None and stopped.number == m.group(1):  # type: ignore[union-attr]
            # `thread apply all bt` after the stop line: the stopped thread's own bt
            # follows (its "#0" is the stop location), so the stop line's thread goes.
            del b.proc.threads[at]  # type: ignore[union-attr]
            b.report.thread_headers -= 1
            b.report.frames -= len(stopped.frames)  # type: ignore[union-attr]
            b.gdb_stop_thread = None
        b.start_thread(m.group(2), "unknown", "MainThread" if m.group(1) == "1" else (m.group(3) or ""))
        return True
    if GDB_ATTACHED.match(s):
        b.gdb_attached = not (b.proc is not None and b.proc.threads)
        return True
    m = GDB_STOPPED.match(s)
    if m:
        b.start_thread(None, "unknown", "MainThread" if m.group(1) == "1" else m.group(2))
        b.gdb_stop = True
        if b.group:
            b.gdb_stop_thread = b.group[-1]
            b.gdb_stop_thread.number = m.group(1)
        return True
    return traceback_header(b, s)


def inline_frames(b: Builder, s: str) -> bool:
    """gdb frames quoted in backticks inside prose (see ``INLINE_GDB``)."""
    inline = [f for f in (gdb_call(m.group(1), addressed=False) for m in INLINE_GDB.finditer(s)) if f] if "`" in s else []
    if inline:
        b.add_frames(inline[:MAX_FRAMES])
        b.report.bare_frames += len(inline)
        b.after_break = True  # prose: the next frames are another stack
        return True
    return False


# -- steps of reader.STEPS ----------------------------------------------------
def pybt_marker(b: Builder, ln: Line) -> bool:
    s = ln.s
    if s[0] in "WG" and s in PYBT_MARKERS and not b.tb_frames:
        # gdb's py-bt (libpython.py) prints this above a thread's innermost Python
        # frame; the reporter may have replaced its "Traceback (most recent call
        # first):" line with a caption ("Thread 1 Python stack", pytorch#97833).
        if s == "Garbage-collecting":
            # The collector running in this thread, under the frames above it (py-bt
            # prints it where gc's collect() sits in the stack, not only on top): the
            # finalizers it runs are called from the code it interrupted.
            b.recent_first = True
            b.tb_frames = None
            b.add_frames([Frame(GC_FRAME, "?", None, native=True)])
            return True
        if b.pybt_seen:
            b.close_group()  # another thread's py-bt, its header not pasted
        b.recent_first = True
        b.tb_frames = None
        if s == "Waiting for the GIL":
            b.add_frames([Frame(GIL_WAIT, "?", None, native=True)])
        return True
    return False


def wrapped_library(b: Builder, ln: Line) -> bool:
    return ln.gdb_open and ln.s.startswith(("from ", "at ")) and gdb_continuation(b, ln.s)


def windbg(b: Builder, ln: Line) -> bool:
    s = ln.s
    return ("!" in s or "Id:" in s or "RetAddr" in s or "+0x" in s) and windbg_line(b, s)


def lldb(b: Builder, ln: Line) -> bool:
    s = ln.s
    return s[0] in "*tf" and ("thread #" in s[:14] or "frame #" in s[:14]) and lldb_line(b, s)


def info_thread(b: Builder, ln: Line) -> bool:
    s = ln.s
    if (s[0] == "*" or s[0].isdigit()) and (" Thread 0x" in s[:40] or " LWP " in s[:24]):
        mi = GDB_INFO_THREAD.match(s)
        if mi and gdb_info_thread(b, mi):
            return True
    return False


#: systemd-coredump (coredumpctl info) and eu-stack frames: no " in ", the library and the
#: offset in parentheses after the function.
COREDUMP_FRAME = re.compile(r"^#\d{1,6}\s{1,4}0x[0-9a-fA-F]{1,16}\s{1,4}(?!in )(\S.{0,500}?)\s{1,4}\(([^()]{1,300}?) \+ 0x[0-9a-fA-F]{1,16}\)\s*$")
#: eu-stack's own frames: the address and the function, with -m " - MODULE" after it.
EU_STACK_FRAME = re.compile(r"^#\d{1,6}\s{1,4}0x[0-9a-fA-F]{1,16}\s{1,4}([A-Za-z_][\w:.@~<>]{0,500}(?:\([^()\n]{0,500}\))?)(?:\s{1,4}-\s{1,4}(\S{1,500}))?\s*$")
#: Their thread headers: "Stack trace of thread 37144:" (coredumpctl), "TID 37144:" (eu-stack).
COREDUMP_THREAD = re.compile(r"^(?:Stack trace of thread|TID) (\d{1,10}):$")


def coredump_thread(b: Builder, ln: Line) -> bool:
    """A thread header of systemd-coredump or eu-stack; the first thread is the one that
    crashed or was signalled (the main thread when the process was killed for hanging)."""
    m = COREDUMP_THREAD.match(ln.s) if ln.first in "ST" else None
    if m is None:
        return False
    b.start_thread(m.group(1), "unknown", "MainThread" if not b.coredump_threads else f"Thread-{m.group(1)}")
    b.coredump_threads += 1
    return True


def gdb_line(b: Builder, ln: Line) -> bool:
    """A numbered gdb frame (or gdb's bare stop location), else one of gdb's headers."""
    s, first = ln.s, ln.first
    if first == "#" and s[1:2].isdigit() and (" file '" in s or "<built-in " in s or "Waiting for a lock" in s) and _py2_pybt(b, s):
        return True
    if (first == "#" and s[1:2].isdigit()) or (first == "0" and s[:2] == "0x" and " in " in s):
        return gdb_frame(b, s)
    if first.isdigit() and " in " in s and GDB_UNHASHED.match(s) is not None:
        # a backtrace pasted as markdown outside a fence: "#0 ..." became a heading and lost
        # its "#" ("0  0x00007f.. in __pthread_clockjoin_ex () at /lib64/libpthread.so.0")
        return gdb_frame(b, "#" + s)
    return first in "TU[" and gdb_header(b, s)


def more_frames(b: Builder, ln: Line) -> bool:
    """gdb's "(More stack frames follow...)" after a "bt N": a "bt -N" pasted next shows
    the same thread's outer frames (``gdb_frame`` keeps them with it)."""
    if ln.s.startswith("(More stack frames follow") and b.gdb_number >= 0:
        b.gdb_more = b.gdb_number
        return True
    return False


def _py2_pybt(b: Builder, s: str) -> bool:
    """A frame of Python 2's py-bt ("#4 file '/p/threading.py', in 'wait'", "#2 <built-in
    method acquire of thread.lock object ...>"), innermost first."""
    m = GDB_PY2_FILE.match(s)
    if m is not None:
        b.add_frames([Frame(m.group(2), m.group(1).replace("\\", "/"), None)], pybt=True)
        b.pybt_seen = True
        return True
    if GDB_PY2_LOCK_WAIT.match(s):
        # Python 2's libpython prints this for a frame in PyThread_acquire_lock: a Python
        # lock's acquire (or the GIL, which is such a lock there). Once per thread.
        if not (b.group and b.group[-1].frames and b.group[-1].frames[-1].function == "PyThread_acquire_lock"):
            b.add_frames([Frame("PyThread_acquire_lock", "?", None, native=True)])
        b.pybt_seen = True
        return True
    m = GDB_PY2_BUILTIN.match(s)
    if m is not None:
        b.add_frames([Frame(m.group(1), "?", None, native=True)])
        b.pybt_seen = True
        return True
    return False


def pybt_frame(b: Builder, ln: Line) -> bool:
    """A frame of py-bt's 'Traceback (most recent call first):' (innermost first)."""
    s, first = ln.s, ln.first
    if b.recent_first and (first == "F" or first == "<"):
        m = TRACEBACK_FRAME.match(s) if first == "F" else GDB_BUILTIN.match(s)
        if m:
            frame = (Frame(m.group(3), m.group(1).replace("\\", "/"), int(m.group(2))) if first == "F"
                     else Frame(m.group(1), "?", None, native=True))
            first_frame = not b.group or not b.group[-1].frames
            b.source_open = False  # a source line after this frame is not the innermost one's
            b.add_frames([frame], pybt=True)
            b.pybt_seen = True
            b.in_locals, b.locals_indent = True, ln.indent  # its source line follows, deeper
            if first_frame and first == "F" and b.group:
                # The innermost frame's source line names the C call the thread sits in
                # (``sock.recv(...)``, ``lock.acquire()``), which py-bt shows no frame for.
                b.group[-1].source, b.source_open = "", True
            return True
    return False
