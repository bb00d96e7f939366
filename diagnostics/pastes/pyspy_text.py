"""py-spy dump's text around the frames: process and thread headers, ``--locals``
blocks, py-spy's own errors, the command that took the dump, and what is py-spy but
not a dump (``top`` and ``record`` output). pystack's headers and frames too.

Headers decide which process and thread the next frames belong to; the frames
themselves are read by ``frames``.
"""

from __future__ import annotations

import re

from hangwatch.diagnostics.pastes.builder import Builder, Line
from hangwatch.diagnostics.pastes.frames import split_flattened
from hangwatch.diagnostics.pastes.patterns import (
    FAULTHANDLER_THREAD, IDENT, LABELLED_HEADER, LOCALS_HEAD, MAX_PROCESSES, NAMED_THREAD, NOTED_THREAD,
    PLACEHOLDER_IDENT, PROCESS, PROFILE_LINE, PROMPT, PYSPY_ERROR, PYSPY_FAILURES, PYSPY_PID, PYSTACK_FRAME,
    PYSTACK_THREAD, PYTHON, SEPARATOR, STACK_DUMP_FOR, STATE, THREAD, TOP_BANNER,
)
from hangwatch.diagnostics.stacks import Frame


def _strip_note(text: str) -> str:
    """A command line without a reporter's trailing note ("  ← stuck here")."""
    for mark in ("  ←", "  <-", " ← ", " <-- ", "  #"):
        i = text.find(mark)
        if i != -1:
            text = text[:i]
    return text.strip()


def parse_thread_header(s: str) -> tuple[str | None, str, str] | None:
    """(ident, state, name) for a thread header line, else None."""
    if s.startswith(("Thread", "Current thread")):
        m = THREAD.match(s)
        if m:
            ident = m.group(1)
            if ident is not None and PLACEHOLDER_IDENT.match(ident):
                ident = None
            return ident, m.group(2), m.group(3) or ""
        m = FAULTHANDLER_THREAD.match(s)
        if m:  # Python's faulthandler (also PyTorch's dump on NCCL timeouts)
            ident = m.group(2)
            if ident is not None and PLACEHOLDER_IDENT.match(ident):
                ident = None
            return ident, "unknown", m.group(3) or ""
        m = NAMED_THREAD.match(s)
        if m:
            return None, "unknown", m.group(1)
        m = NOTED_THREAD.match(s)
        if m:
            return m.group(1), "unknown", ""
        if not s.startswith("Thread "):
            return None
        # 'Thread MainThread (idle):', 'Thread "Thread-1 (_do_shutdown)" (idle):': a name
        # where py-spy puts the id, read as the condensed header after the word
        s = s[len("Thread "):].lstrip()
        if not s.endswith("):"):
            return None
    # Condensed: 'MainThread (active, 100% CPU):' / 'Thread-3 (worker) (idle):'
    if s.endswith("):") or s.endswith(")"):
        body = s[:-1] if s.endswith(":") else s
        i = body.rfind(" (")
        if i > 0 and len(body) < 300:
            state = body[i + 2 : -1].strip()
            m = STATE.match(state)
            name = body[:i].strip().strip('"')
            if m and name and s.endswith(":") and not name.startswith(("(", "Process")):
                return None, m.group(1), name
            labelled = _labelled_header(body[:i], state) if s.endswith(":") else None
            if labelled is not None:
                return labelled
    return None


def _labelled_header(label: str, inner: str) -> tuple[str | None, str, str] | None:
    """'decode pid=951 (MainThread active+gil):' (a reporter's own caption): the
    thread name and state share the parentheses, the pid is in the label. The
    main thread's id is the pid, so it becomes the ident (and the process's pid)."""
    pid = LABELLED_HEADER.search(label)
    name, sep, state = inner.replace(",", " ").rpartition(" ")
    name = name.strip().strip('"')
    m = STATE.match(state)
    if pid is None or not sep or m is None or not IDENT.match(name):
        return None
    return (pid.group(1) if name == "MainThread" else None), m.group(1), name


def handle_header(b: Builder, s: str, rank: re.Match[str] | None) -> bool:
    """A process or thread header of any shape (``rank``: "[rank3]" in its line's prefix)."""
    return process_header(b, s, rank) or thread_header(b, s, rank)


def process_header(b: Builder, s: str, rank: re.Match[str] | None) -> bool:
    """'Process N: CMD' and its 'Python vX' line, ray's 'Stack dump for ...' and
    '=== PID n ===' separators: the frames that follow are another process's."""
    m = PROCESS.match(s)
    if m and split_flattened(m.group(2)) is None:  # else a whole flattened dump: split below
        pid = int(m.group(1)) if m.group(1).isdigit() else None
        if pid is not None and m.group(2).startswith("timed out with traceback"):
            # PyTorch's distributed test harness: "Process 3 timed out with traceback:"
            # numbers its ranks, not pids (pytorch PR #54818).
            b.new_process(None, "", header=True)
            b.proc.rank = pid  # type: ignore[union-attr]
            b.report.process_headers += 1
            return True
        b.new_process(pid, _strip_note(m.group(2)), header=True)
        b.report.process_headers += 1
        if rank is not None:
            b.proc.rank = int(rank.group(1))  # type: ignore[union-attr]
        return True
    m = PYTHON.match(s)
    if m and (b.proc is not None and not b.proc.threads):
        b.proc.python = m.group(1)
        return True
    m = STACK_DUMP_FOR.match(s)
    if m:
        tokens = m.group(1).split()
        pid = next((int(t) for t in tokens[:3] if t.isdigit()), None)
        b.new_process(pid, " ".join(tokens[10:]) if len(tokens) > 10 else m.group(1).strip(), header=True)
        b.report.process_headers += 1
        return True
    m = SEPARATOR.match(s)
    if m:
        kind, num = m.group(1).lower(), int(m.group(2))
        proc = b.new_process(num if kind in ("pid", "process") else None, header=True)
        if kind == "rank":
            proc.rank = num
        b.report.process_headers += 1
        return True
    return False


def thread_header(b: Builder, s: str, rank: re.Match[str] | None) -> bool:
    """pystack's 'Traceback for thread N (...)' or any header ``parse_thread_header`` reads."""
    m = PYSTACK_THREAD.match(s)
    if m:
        status = m.group(3) or ""
        b.start_thread(m.group(1), "active+gil" if "Has the GIL" in status else "unknown", m.group(2).strip())
        b.group[-1].outermost_first = True
        return True
    th = parse_thread_header(s)
    if th:
        ident, state, name = th
        b.start_thread(ident, state, name)
        if rank is not None and b.proc is not None and b.proc.rank is None:
            b.proc.rank = int(rank.group(1))
        return True
    return False


def pyspy_failure(b: Builder, s: str) -> bool:
    """py-spy's error for the process the paste was about to show: not dumped."""
    m = PYSPY_ERROR.match(s)
    if m is None or not any(k in m.group(1).lower() for k in PYSPY_FAILURES):
        return False
    proc = b.proc
    pid = b.pid_hint if b.pid_hint is not None else (proc.pid if proc is not None and not proc.threads else None)
    if pid is None:
        return False
    reason = m.group(1).strip()
    before = b.report.undumped.get(pid)
    if before is None and len(b.report.undumped) < MAX_PROCESSES:
        b.report.undumped[pid] = reason
    elif before is not None and reason not in before and len(before) < 300:
        b.report.undumped[pid] = f"{before}; {reason}"
    return True


def profile_line(b: Builder, s: str) -> bool:
    """py-spy top/record output: a table row, its banner, record's messages, or a
    collapsed stack ('f (a.py:1);g (b.py:2) 431', outermost first, a sample count
    last): a profile, not a snapshot, so none of it is read as frames."""
    if ";" in s and s[-1].isdigit():
        rest, _, count = s.rpartition(" ")
        parts = rest.split(";")
        collapsed = count.isdigit() and len(parts) >= 2 and all(x.endswith(")") and " (" in x for x in parts)
    else:
        collapsed = False
    if not collapsed and PROFILE_LINE.match(s) is None:
        return False
    b.report.profile_lines += 1
    return True


# -- steps of reader.STEPS ----------------------------------------------------
def profile(b: Builder, ln: Line) -> bool:
    """A line of py-spy top or record output (see ``profile_line``), or top's banner or
    table header inside a long line (see ``TOP_BANNER``)."""
    s = ln.s
    if (s[0] in "-0123456789%CTGp" or ";" in s) and profile_line(b, s):
        return True
    if "%" in s and len(s) > 200 and TOP_BANNER.search(s):
        b.report.profile_lines += 1
        return True
    return False


def pyspy_error(b: Builder, ln: Line) -> bool:
    return ln.s[0] in "EeR" and pyspy_failure(b, ln.s)


def command_prompt(b: Builder, ln: Line) -> bool:
    """A shell prompt, or the command that took the dump (its pid names what follows)."""
    s = ln.s
    if ("py-spy" in s or "pystack" in s or "stack " in s or "gdb" in s
            or (("$" in s or "#" in s or "%" in s) and PROMPT.match(s))):
        # "$ py-spy dump --pid 42", "$ pstack 42": what follows is process 42.
        m2 = PYSPY_PID.search(s)
        if m2:
            b.expect_process(int(next(g for g in m2.groups() if g)))
            return True
        if PROMPT.match(s):
            return True
    return False


def header(b: Builder, ln: Line) -> bool:
    if (ln.first in "PSTt=-#" or ln.s[-1] == ":") and handle_header(b, ln.s, ln.rank):
        b.after_file_frame = b.innermost_first = ln.s.endswith("(most recent call first):")
        return True
    return False


def locals_block(b: Builder, ln: Line) -> bool:
    """py-spy's ``Arguments:``/``Locals:`` and the lines indented under them (also the
    source line a pystack or py-bt frame left open, see ``in_locals``)."""
    indent = ln.indent
    if LOCALS_HEAD.match(ln.s):
        b.in_locals, b.locals_indent = True, indent
        return True
    if b.in_locals and indent > b.locals_indent:
        if b.source_open and b.group:
            b.group[-1].source = ln.s  # the source line of the frame just read (pystack's)
        b.source_open = False
        return True
    b.in_locals = False
    return False


def pystack_frame(b: Builder, ln: Line) -> bool:
    """'(Python) File "x.py", line 9, in f' / '(C) File "...", line 0, in g (libc.so.6)'."""
    m = PYSTACK_FRAME.match(ln.s)
    if not m:
        return False
    kind, path, lineno, fn, lib = m.groups()
    if kind == "C":
        frame = Frame(fn.strip(), lib or path, None, native=True)
    else:
        frame = Frame(fn.strip(), path.replace("\\", "/"), int(lineno))
    b.add_frames([frame])
    b.in_locals, b.locals_indent = True, ln.indent  # its source line follows, deeper
    if kind != "C" and b.group:
        b.group[-1].source, b.source_open = "", True
    return True
