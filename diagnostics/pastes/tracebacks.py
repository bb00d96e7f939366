"""Python's own stack printouts: tracebacks (most recent call last), faulthandler's
dumps, IPython's tracebacks, pdb's ``where``, and thread banners above
traceback-style stacks (pytest-timeout, the hanging_threads package).

A traceback is outermost first and usually an error report, not a stack: its frames
are held until its exception line says which (``KeyboardInterrupt``: where the hung
main thread was at Ctrl+C), and error reports are kept aside in case the paste has
no other stack (a hung call's own ``TimeoutError`` says where it waited).
faulthandler's frame lines themselves are innermost first, like py-spy's, and read
by ``frames``.
"""

from __future__ import annotations

import re

from hangwatch.diagnostics.pastes.builder import Builder, Line
from hangwatch.diagnostics.pastes.frames import single_frame
from hangwatch.diagnostics.pastes.patterns import (
    NESTED_CALL,
    BANNER_THREAD, CAPTION_THREAD, CHAINED_CALL, THREAD_REPR, EXCEPTION_LINE, IPY_CELL, IPY_FRAME, IPY_OLD_FRAME, IPY_SOURCE,
    IPY_TB_START, MAX_FRAMES, MAX_THREADS, PDB_FRAME, PYTEST_DEF, PYTEST_SHORT, PYTEST_LOCATION, RECENT_FIRST, SOURCE_CALL,
    TRACEBACK_FRAME, WITH_LOCK, PYTRACE_CALL, PYTRACE_LINE, C_STACK_DUMPER, C_STACK_FRAME, C_STACK_HEAD,
)
from hangwatch.diagnostics.stacks import Frame, site_package
from hangwatch.diagnostics.named_waits import named_category
from hangwatch.diagnostics.waits import primitive_of
from hangwatch.diagnostics.primitives import LEAF_CALL


def _ipython_frame(s: str) -> Frame | None:
    """One frame header of an IPython traceback (see IPY_FRAME), else None."""
    m = IPY_FRAME.match(s)
    if m is not None:
        return Frame(m.group(3), m.group(1).replace("\\", "/"), int(m.group(2)))
    m = IPY_CELL.match(s)
    if m is not None:
        if m.group(1) is not None:
            return Frame(m.group(3) or "<module>", f"<ipython-input-{m.group(1)}>", int(m.group(2)))
        return Frame(m.group(5), f"<ipython-input-{m.group(4)}>", None)
    m = IPY_OLD_FRAME.match(s)
    if m is not None:
        return Frame(m.group(2), m.group(1).replace("\\", "/"), None)
    return None


def start_traceback(b: Builder, lines: int) -> None:
    b.tb_ipython = False
    m = (THREAD_REPR.match(b.prev_text) or CAPTION_THREAD.match(b.prev_text)) if len(b.prev_text) < 200 else None
    b.tb_caption = m.group(1) if m else ""
    b.tb_frames, b.tb_lines = [], lines
    b.tb_rank = None


_MARKERS = frozenset("^~ ")


def traceback_line(b: Builder, s: str, line: str) -> bool:
    """A line inside a Python traceback (most recent call last); False ends it
    without consuming the line (something that is not traceback text)."""
    m = TRACEBACK_FRAME.match(s)
    if m:
        if b.tb_frames is not None and len(b.tb_frames) < MAX_FRAMES:
            b.tb_frames.append(Frame(m.group(3), m.group(1).replace("\\", "/"), int(m.group(2))))
            if len(b.tb_sources) < len(b.tb_frames):
                b.tb_sources.extend([""] * (len(b.tb_frames) - len(b.tb_sources)))
        b.tb_lines += 1
        b.tb_source = ""
        b.tb_indent = len(line) - len(line.lstrip())
        b.tb_frame_line = True
        same_line = (m.group(4) or "").strip()
        if same_line and b.tb_frames is not None:
            b.tb_source = same_line
            _note_source(b, same_line)
        return True
    if b.tb_frames and not b.tb_ipython and s.isdigit() and len(s) <= 9:
        # A sampling tool's count over each sampled stack ("127" then its frames): the
        # next frame line starts another stack.
        b.tb_lines += 1
        end_traceback(b, keep=False)
        return True
    after_frame, b.tb_frame_line = b.tb_frame_line, False
    if b.tb_frames is not None and s[0] in "^~" and "^" in s and set(s) <= _MARKERS:
        # Python 3.11's markers under a source line ("~~~~^^"), whatever their indentation
        # (lost in a paste that trims lines): the traceback goes on. (Every one has a caret:
        # a "~~~" line alone is a markdown fence.)
        b.tb_lines += 1
        b.tb_frame_line = after_frame
        return True
    if b.tb_ipython:
        frame = _ipython_frame(s)
        if frame is not None or IPY_SOURCE.match(s) or set(s) <= {"-"}:
            if frame is not None and b.tb_frames is not None and len(b.tb_frames) < MAX_FRAMES:
                b.tb_frames.append(frame)
            b.tb_lines += 1
            return True
    if (b.tb_frames is not None and after_frame and len(s) < 500 and s[0] not in "^~" and not EXCEPTION_LINE.match(s)
            and not s.startswith(("Traceback", "During handling", "The above exception", "Thread ", "Current thread", "File "))):
        # The source line right under a frame line, its indentation lost (a paste with each
        # line in backticks, a chat tool trimming spaces): Python prints one under each frame.
        b.tb_lines += 1
        b.tb_source = s
        _note_source(b, s)
        return True
    if b.tb_frames and len(line) - len(line.lstrip()) > b.tb_indent:
        one = single_frame(s) if "(" in s else None
        if one is None or one[0].line is None:
            b.tb_lines += 1  # the source line under a frame, or 3.11's ^^^^ markers
            if not b.tb_source and s[0] not in "^~":
                b.tb_source = s
                _note_source(b, s)
            return True
        # "wait (threading.py:320)": a py-spy frame after a cut traceback, not its source line
    m = EXCEPTION_LINE.match(s)
    if m:
        evidence = "WorkNCCL(SeqNum=" in s  # "...was aborted ... Watchdog caught ...": read it too
        b.tb_lines += not evidence
        interrupted = m.group(1).rsplit(".", 1)[-1] == "KeyboardInterrupt"
        end_traceback(b, keep=interrupted, error=not interrupted)
        return not evidence
    end_traceback(b, keep=False)
    return False


def _note_source(b: Builder, s: str) -> None:
    if b.tb_frames and len(b.tb_sources) >= len(b.tb_frames) and not b.tb_sources[len(b.tb_frames) - 1]:
        b.tb_sources[len(b.tb_frames) - 1] = s


def library_call(frames: list[Frame], sources: list[str]) -> list[Frame]:
    """A traceback cut inside a library's own wrappers ("info = ray.get(future)", then
    ray's decorators, then the cut): the blocking call an outer frame's line makes into that
    library, when every frame inside it is the library's. Empty when none is."""
    for k in range(len(frames) - 2, max(-1, len(frames) - 8), -1):
        calls = source_call(sources[k]) if k < len(sources) else []
        if not calls or primitive_of(calls[0]) is None:
            continue
        root = calls[0].function.split(".", 1)[0]
        if all(site_package(f.file) == root for f in frames[k + 1:]):
            return calls
        return []
    return []


def source_call(source: str) -> list[Frame]:
    """The call a traceback's innermost source line makes, as a frame of its own
    (``p.join`` in the pseudo-file ``<call>``): a C function such as ``time.sleep`` or
    ``lock.acquire`` shows no frame, and a thread interrupted in it was blocked there.
    Empty when the line is no call."""
    w = WITH_LOCK.match(source) if source and source[:5] == "with " else None
    if w is not None:
        # "with second_lock:": entering the block acquires the lock, in C.
        return [Frame(w.group(1) + ".acquire", "<call>", None, native=True)]
    m = SOURCE_CALL.match(source) if source else None
    if m is None:
        return []
    calls = [Frame(m.group(1), "<call>", None, native=True)]
    # A chain of calls ("logits.argmax(-1).cpu()"): each method after the first is a call
    # of the line too, and any may be the one that blocks (the copy to the host here).
    for chained in CHAINED_CALL.findall(source[m.end(1):], 0, 600)[:8]:
        calls.append(Frame(f"{m.group(1)}.{chained}", "<call>", None, native=True))
    # A call nested in the arguments runs first and may be the one that blocks
    # ("int(proc.stdout.readline())": the read, not int). Only calls that block whatever
    # their receiver (a readline, a recv, a future's result, a C call of os or time): a
    # nested ".get" or ".join" is as often a dict's or a path's.
    for name in NESTED_CALL.findall(source, m.end(1) + 1, 600)[:8]:
        if (_NESTED_BLOCKING.search(name) or LEAF_CALL.match(name)) and not name.startswith("os.path."):
            calls.append(Frame(name, "<call>", None, native=True))
    return calls


#: Calls that block whoever the receiver is, read inside another call's arguments.
#: (The standard library's own C calls, ``time.sleep`` or ``os.waitpid``, are LEAF_CALL's.)
_NESTED_BLOCKING = re.compile(r"(?:^|\.)(readline|readlines|recv|recv_bytes|recvfrom|recv_into|accept|result|item|"
                              r"communicate|urlopen|getresponse|input)$")


def blocked_call(frames: list[Frame], source: str) -> list[Frame]:
    """``source_call`` when it is a known blocking call and the innermost frame is not
    one itself (``popen_fork.poll`` calling ``os.waitpid``: the stack already says where
    it waits); a call of the program's own (``main()``) adds nothing."""
    row = primitive_of(frames[-1]) if frames else None
    if row is not None:
        # A ``call`` row (an API whose own frames a whole stack shows under it) ends here
        # only because the paste stops; a C function of the standard library on its source
        # line (``time.sleep(60)`` inside a patched ``requests.get``) is what it blocks in.
        calls = source_call(source) if row.level == "call" else []
        return [f for f in calls if LEAF_CALL.match(f.function) and primitive_of(f) is not None]
    # A call whose words name a wait (``self._read_from_socket()``, ``lease.acquire_lock()``)
    # is kept too: no row knows it, but ``named_waits`` reads what it waits on.
    return [f for f in source_call(source) if primitive_of(f) is not None or named_category(f) is not None]


#: A reporter's note after a frame that quotes the code the frame stopped on
#: ("_get_conn (app/db.py:434)   <- `with _db_lock:`").
_FRAME_LOCATION = re.compile(r"\([^()\s]{1,1000}\)")
_NOTED_CODE = re.compile(r"(?:<-|←|⟵|<==|#|//)\s{0,8}[^`\n]{0,80}`([^`\n]{1,300})`")


def noted_call(line: str, frames: list[Frame]) -> list[Frame]:
    """``blocked_call`` for the code a note after the thread's innermost frame quotes: the
    source line py-spy does not print, written in by the reporter."""
    loc = _FRAME_LOCATION.search(line)
    m = _NOTED_CODE.search(line, loc.end()) if loc is not None else None
    return blocked_call(frames[:1], m.group(1).strip()) if m else []


def end_traceback(b: Builder, keep: bool, error: bool = False) -> None:
    frames, b.tb_frames = b.tb_frames, None
    sources, b.tb_sources = b.tb_sources, []
    rank, b.tb_rank = b.tb_rank, None
    if frames is None:
        return
    if b.banner is not None and frames:
        banner_thread(b, frames)  # a bannered thread's stack, not an error report
        b.tb_lines = 0
        return
    after_exit, b.exit_notice = b.exit_notice, False
    stream = (id(b.proc) if b.proc is not None else None, b.stream_pid, rank)
    if keep and frames and after_exit and b.interrupt_kept == stream:
        # An exit handler interrupted by a second Ctrl-C (a process join at exit, a
        # finalizer) in the same process, whose first Ctrl-C traceback showed a wait: the
        # exit that Ctrl-C started, not where the program hung. (After a first traceback in
        # the program's own computation, the exit's join is the hang: it is kept.)
        b.report.skipped += b.tb_lines
    elif keep and frames:
        # Ctrl+C lands in the main thread, in the call on the innermost frame's source line.
        inner = blocked_call(frames, b.tb_source)
        b.traceback_thread("MainThread", frames, inner, rank=rank)
        if inner or primitive_of(frames[-1]) is not None:
            # (the process it went into: a later traceback of the same process, no caption
            # or pid between, is read while that process is still the open one)
            b.interrupt_kept = (id(b.proc) if b.proc is not None else None, b.stream_pid, rank)
    else:
        b.report.skipped += b.tb_lines
        if frames and not error:
            # Cut before its exception line: the call on the innermost source line (a
            # join, a wait, a lock's acquire) is the innermost visible blocking call. A
            # captioned thread of a format_stack dump is whole, and its innermost line is
            # where it runs: a C call there (a lock's acquire, a sleep) shows no frame of
            # its own, so the thread is blocked in it all the same. Cut inside a library's
            # wrappers, the call an outer line makes into that library is.
            frames = frames + (blocked_call(frames, b.tb_source) or library_call(frames, sources))
        if frames and len(b.tb_pending) < MAX_THREADS:
            # An error's traceback too: a paste whose only frames are in one (the
            # TimeoutError a hung RPC ended in, the DistBackendError of a barrier that
            # timed out) shows where that thread waited; kept only as the only stack.
            b.tb_pending.append((b.tb_caption, frames, b.tb_lines, error, b.stream_pid, rank))
            if error:
                b.error_tb_line = b.report.lines
    b.tb_lines = 0


def banner_line(b: Builder, m: re.Match[str]) -> None:
    """A thread's banner: the traceback open above it was the previous banner's
    thread (or, with none, a thread whose banner was not pasted)."""
    frames, b.tb_frames = b.tb_frames, None
    if frames:
        banner_thread(b, frames)
    b.tb_lines = 0
    name = (m.group(1) if m.group(1) is not None else m.group(4)) or ""
    b.banner = (m.group(2) or m.group(3), name.strip())


def banner_thread(b: Builder, frames: list[Frame]) -> None:
    banner, b.banner = b.banner, None
    if banner is None:
        b.traceback_thread("", frames)  # the paste starts below that thread's banner
        return
    b.start_thread(banner[0], "unknown", banner[1])
    # outermost first, like a traceback; a C call on its innermost line has no frame of its own
    b.add_frames(blocked_call(frames, b.tb_source) + list(reversed(frames)))


def end_pdb(b: Builder) -> None:
    frames, b.pdb = b.pdb, None
    source, b.pdb_source = b.pdb_source, ""
    if frames:
        # pdb shows the thread it stopped in; the call on its innermost source line is the
        # blocking call when "where" was cut below it (as a Ctrl-C traceback's is).
        b.traceback_thread("MainThread", frames, blocked_call(frames, source))


def traceback_header(b: Builder, s: str) -> bool:
    """'Traceback (most recent call last):' opens a Python traceback; gdb's py-bt prints
    '(most recent call first)' above its frames (see ``gdb.gdb_header``)."""
    m = RECENT_FIRST.match(s)
    if m:
        # py-bt of the thread whose native frame gdb just showed: the same thread;
        # after py-bt frames already read, another thread's (`thread apply all py-bt`
        # with its thread lines not pasted).
        if m.group(1) == "first" and b.pybt_seen:
            b.close_group()
        b.recent_first = m.group(1) == "first"
        b.after_break = False
        if not b.recent_first:
            end_traceback(b, keep=False)
            start_traceback(b, 1)
        return True
    return False


# -- steps of reader.STEPS ----------------------------------------------------
def pdb_where(b: Builder, ln: Line) -> bool:
    """A frame of pdb's "where" or the source line under one; any other line ends it
    (and is read on)."""
    s = ln.s
    if b.pdb is not None:
        if s.startswith("->"):
            b.pdb_source = s[2:].strip()
            return True  # the source line under a pdb frame
        if s.startswith("(Pdb)") and len(b.pdb) == 1:
            b.pdb = None  # where pdb stopped ("> f.py(4)main()"): its "where" repeats it
        if not PDB_FRAME.match(s):
            end_pdb(b)
    if (s[0] in "/<>(~." or s[1:3] == ":\\") and s.endswith(")") or "()->" in s:
        mp = PDB_FRAME.match(s)
        if mp:
            if b.pdb is None:
                end_traceback(b, keep=False)
                b.drop_bare()
                b.pdb = []
            b.pdb_source = ""
            if len(b.pdb) < MAX_FRAMES:
                b.pdb.append(Frame(mp.group(3), mp.group(1).replace("\\", "/"), int(mp.group(2))))
            return True
    return False


def exit_notice(b: Builder, ln: Line) -> bool:
    """CPython's notice that an exit handler raised, above its traceback ("Exception
    ignored in atexit callback: ...", Python 3.7's "Error in atexit._run_exitfuncs:"):
    noted for the traceback that follows (see ``end_traceback``); the line is text."""
    s = ln.s
    if s.startswith(("Exception ignored in atexit callback", "Error in atexit._run_exitfuncs")):
        b.exit_notice = True
    return False


def fatal_error(b: Builder, ln: Line) -> bool:
    """faulthandler's 'Fatal Python error: ...' above the stacks (see ParseReport.fatal_error)."""
    s = ln.s
    if s[0] == "F" and s.startswith("Fatal Python error: ") and not b.report.fatal_error:
        b.report.fatal_error = s[len("Fatal Python error: "):][:200]
        return True
    return False


def c_stack(b: Builder, ln: Line) -> bool:
    """faulthandler's C stack of the current thread (see ``C_STACK_HEAD``): its frames go
    under that thread's Python frames, innermost first, the dumping code's own left out."""
    s = ln.s
    if s[0] == "C" and C_STACK_HEAD.match(s):
        t = b.group[-1] if b.group else None
        b.c_stack, b.c_stack_at = t, 0
        return t is not None
    if b.c_stack is None:
        return False
    if s[0] == "<" and s.endswith(">"):  # "<truncated rest of calls>", "<cannot get C stack ...>"
        return True
    m = C_STACK_FRAME.match(s) if s[0] == "B" else None
    if m is None:
        b.c_stack = None
        return False
    t, name = b.c_stack, m.group(2) or "??"
    if C_STACK_DUMPER.match(name):
        del t.frames[:b.c_stack_at]  # everything above it was the dumper's too
        b.c_stack_at = 0
        return True
    if len(t.frames) < MAX_FRAMES:
        t.frames.insert(b.c_stack_at, Frame(name, m.group(1).replace("\\", "/"), None, native=True))
        b.c_stack_at += 1
        b.report.frames += 1
    return True


def end_pytrace(b: Builder) -> None:
    """The lines ``python -m trace`` printed last, as the frame the process stopped in,
    with the blocking call one of its last lines makes (a statement may span lines)."""
    run, b.pytrace = b.pytrace, None
    if not run:
        return
    path, line, _, function = run[-1]
    frame = Frame(function or "<unknown>", path, line)
    call: list[Frame] = []
    for _, _, source, _ in reversed(run[-3:]):
        call = blocked_call([frame], source)
        if call:
            break
    b.traceback_thread("", [frame], call)


def pytrace(b: Builder, ln: Line) -> bool:
    """A line of ``python -m trace --trace`` (see ``PYTRACE_LINE``); any other line ends the run."""
    s = ln.s
    m = PYTRACE_LINE.match(s) if "): " in s else None
    if m is None:
        mc = PYTRACE_CALL.match(s) if s[:3] == "---" else None
        if mc is not None:
            b.pytrace_function = mc.group(1)
            return True
        if b.pytrace is not None:
            end_pytrace(b)
        return False
    if b.pytrace is None:
        b.pytrace = []
    b.pytrace.append((m.group(1), int(m.group(2)), m.group(3).strip(), b.pytrace_function))
    del b.pytrace[:-3]
    return True


def thread_banner(b: Builder, ln: Line) -> bool:
    s = ln.s
    if s[0] in "~=-" and s[-1] in "~=-":
        mb = BANNER_THREAD.match(s)
        if mb:
            banner_line(b, mb)
            return True
    return False


#: The end of a traceback's frame line whose start is gone: a path ending in ``.py`` with its
#: closing quote, the line and the function, and nothing after them.
CLIPPED_FRAME = re.compile(r'(?:^|[\s=:(\[])([^\s"=:(\[]{0,1000}\.pyx?)",[ \t]{1,40}line (\d{1,7}),[ \t]{1,40}in ([\w<>.]{1,300})$')


def traceback_lines(b: Builder, ln: Line) -> bool:
    """A line of an open traceback (or of one opening: IPython's header line, or a frame
    line of a traceback pasted without its first line)."""
    s = ln.s
    if b.tb_frames is None and b.innermost_first and b.group:
        # Under a thread header that says "(most recent call first)" (faulthandler's, a
        # signal handler's own dump): traceback-style frame lines are innermost first, each
        # with its source line under it.
        m = TRACEBACK_FRAME.match(s) if s[0] == "F" else None
        if m is not None:
            b.add_frames([Frame(m.group(3), m.group(1).replace("\\", "/"), int(m.group(2)))])
            b.frame_source = ln.indent
            return True
        if b.frame_source >= 0 and ln.indent > b.frame_source:
            b.frame_source = -1
            return True  # the frame's source line
        b.frame_source = -1
        if not s.startswith("File"):
            b.innermost_first = False
    if b.tb_frames is None and s[0] != "F" and '", line ' in s and 'File "' not in s and not b.recent_first:
        m = CLIPPED_FRAME.search(s)
        if m is not None:
            # A frame line whose start a tool or a terminal clipped ('rc=1 atrick\\x\\a.py",
            # line 170, in wait'): the rest of a traceback's frame, read as one.
            ln.retext(f'File "{m.group(1)}", line {m.group(2)}, in {m.group(3)}')
            s = ln.s
    if b.tb_frames is None and s[0] == "F" and not b.recent_first and TRACEBACK_FRAME.match(s):
        start_traceback(b, 0)  # a traceback pasted without its first line
    if s.endswith("(most recent call last)") and IPY_TB_START.match(s):
        end_traceback(b, keep=False)
        start_traceback(b, 1)
        b.tb_ipython = True
        return True
    if b.tb_frames is None and s[0] in "F~/C<" and ("/" in s or s[0] in "C<") and " in " in s and _ipython_frame(s) is not None:
        # IPython's frame header with its "Traceback (most recent call last)" line not
        # pasted ("[backtrace omitted]", a cut paste): its traceback starts here.
        start_traceback(b, 0)
        b.tb_ipython = True
    return b.tb_frames is not None and traceback_line(b, s, ln.line)


def end_pytest(b: Builder) -> None:
    """The pytest traceback read so far, as a traceback: interrupted (Ctrl-C, a timeout)
    it is where the main thread waited; else an error report, kept as the only stack."""
    frames, b.pytest_frames = b.pytest_frames, None
    if not frames:
        return
    end_traceback(b, keep=False)
    keep, b.pytest_interrupted = b.pytest_interrupted, False
    if not keep:
        # pytest marks the line each frame was in: the innermost one's blocking call (a
        # select, a read) is the call the error or the cut came out of.
        frames = frames + blocked_call(frames, b.pytest_source)
    b.tb_frames, b.tb_source, b.tb_lines, b.tb_caption = frames, b.pytest_source, len(frames), ""
    end_traceback(b, keep=keep, error=not keep)


def pytest_lines(b: Builder, ln: Line) -> bool:
    """pytest's long traceback: the ">" line of a frame's source, its location
    ``path.py:123:`` (the frame; its function from the ``def`` above, when shown), the
    ``E   Error: ...`` lines and the ``_ _ _`` separators. A ``def`` line is noted and read on."""
    s = ln.s
    first = ln.first
    if b.pytest_short_open:
        b.pytest_short_open = False
        if ln.line[:1] in " \t" and not PYTEST_SHORT.match(s) and first != "E":
            b.pytest_source = s  # the source line under a --tb=short frame
            return True
    if first == ">" and len(s) > 2 and s[1] == " ":
        b.pytest_marker = s[1:].strip()
        return True
    if first == "d" or first == "a":
        md = PYTEST_DEF.match(s)
        if md is not None:
            b.pytest_def = md.group(1)
            return False
    if b.pytest_frames is not None:
        if first == "E" and (len(s) == 1 or s[1] == " "):
            if "KeyboardInterrupt" in s or "Timeout" in s:
                b.pytest_interrupted = True
            return True
        if first == "_" and set(s) <= {"_", " "}:
            return True
    if ": in " in s and ".py" in s:
        ms = PYTEST_SHORT.match(s)
        if ms is not None:
            if b.pytest_frames is None:
                b.pytest_frames = []
            if len(b.pytest_frames) < MAX_FRAMES:
                b.pytest_frames.append(Frame(ms.group(3), ms.group(1).replace("\\", "/"), int(ms.group(2))))
            b.pytest_source, b.pytest_marker, b.pytest_def = "", "", ""
            b.pytest_short_open = True
            return True
    if (s[-1] == ":" or ": " in s) and ".py" in s:
        m = PYTEST_LOCATION.match(s)
        if m is not None:
            if b.pytest_frames is None:
                b.pytest_frames = []
            if len(b.pytest_frames) < MAX_FRAMES:
                b.pytest_frames.append(Frame(b.pytest_def or "<unknown>", m.group(1).replace("\\", "/"), int(m.group(2))))
            b.pytest_source, b.pytest_marker, b.pytest_def = b.pytest_marker, "", ""
            if m.group(3) and ("Interrupt" in m.group(3) or "Timeout" in m.group(3)):
                b.pytest_interrupted = True
            return True
    return False
