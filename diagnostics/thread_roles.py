"""Which role each thread of a dump plays, and what the signatures say of it. Pure.

The main thread (whatever a paste's reader named it), a background helper (a queue feeder,
a monitor, a debugger's thread), a rank named on a command line; and, once per distinct
stack, the stall, idle and helper signatures that match a thread (``Matcher``), which
``classify`` weighs into one verdict per process.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

from hangwatch.diagnostics.signatures import Signature, ThreadLines
from hangwatch.diagnostics.stacks import Frame, ThreadDump, started_by_threading

_RANK_PATTERNS = (
    re.compile(r"(?:Worker|scheduler|worker)_?TP(\d{1,5})"),
    re.compile(r"--local[_-]rank[= ](\d{1,5})"),
    re.compile(r"\bRANK=(\d{1,5})"),
    # Not "--node-rank 0" / "node_rank=1": a node's index is not a process's rank.
    re.compile(r"(?<![-_])\brank[_ =:]?(\d{1,5})\b", re.IGNORECASE),
    re.compile(r"(?:\b|_)TP(\d{1,4})\b"),
)



def rank_from_cmdline(cmdline: str) -> int | None:
    for pattern in _RANK_PATTERNS:
        m = pattern.search(cmdline)
        if m:
            return int(m.group(1))
    return None


def is_main(thread: ThreadDump, pid: int | None) -> bool:
    if thread.name == "MainThread" or (pid is not None and thread.ident == str(pid)):
        # A stack that starts in threading's _bootstrap_inner is a started thread, whatever
        # a paste's reader named it (the first of several print_stack tracebacks).
        return not started_by_threading(thread.frames)
    # A native stack that starts where the process starts (the C runtime's entry, the
    # interpreter's main): the initial thread, whatever gdb or lldb numbered it.
    if any(f.native and _PROCESS_ENTRY.match(f.function) for f in thread.frames[-3:]):
        return True
    # An unnamed Python stack (faulthandler's, a traceback's) that starts in a module's top
    # level: only the main thread runs the program's script (or `python -c`, `-m`'s runpy);
    # a thread that imports starts in threading's bootstrap or its own target.
    if thread.name:
        return False
    outer = next((f for f in reversed(thread.frames) if not f.native), None)
    if outer is not None and outer.method == "_shutdown" and outer.short_file == "threading.py":
        return True  # the interpreter's exit runs threading's _shutdown on the main thread only
    return outer is not None and outer.method in ("<module>", "_run_module_as_main") and not started_by_threading(thread.frames)


#: The first frames of a process's initial thread: no other thread starts in them.
_PROCESS_ENTRY = re.compile(r"^(_start|__libc_start_main\w*|__libc_start_call_main|Py_BytesMain|Py_Main|pymain_main|"
                            r"wmain|__scrt_common_main\w*|mainCRTStartup)$")


@dataclass(frozen=True)
class ThreadFacts:
    """Everything the signatures say about one thread (computed once per
    distinct stack: identical ranks and threads share it)."""

    helper: bool
    stalls: tuple[tuple[Signature, tuple[Frame, ...]], ...]  # highest priority first
    idle: Signature | None


class Matcher:
    def __init__(self, signatures: Sequence[Signature]) -> None:
        self.stalls = [s for s in signatures if s.kind == "stall"]
        self.idles = [s for s in signatures if s.kind == "idle"]
        self.helpers = [s for s in signatures if s.kind == "helper"]
        self.memo: dict[tuple, ThreadFacts] = {}

    def facts(self, thread: ThreadDump, pid: int | None, cmdline: str, alone: bool = False,
              chosen: bool = False, sole: bool = False) -> ThreadFacts:
        # The only thread a dump shows of its process (one thread of a gdb/lldb session,
        # a stack pasted on its own) is the one the reporter looked at: it decides.
        # ``chosen``: a C-level backtrace in an excerpt with no main thread; it may decide
        # too, unless a helper signature says what it is (a native thread pool's idler).
        main = is_main(thread, pid) or alone
        key = (thread.frames, thread.name, cmdline, main, chosen, sole)
        got = self.memo.get(key)
        if got is None:
            lines = ThreadLines.for_thread(thread)
            # Being alone does not make a known helper decide: a process whose only pasted
            # thread is Ray's profiler flusher or a tqdm monitor was cut before its main
            # thread (the last process of a `ray stack` paste, ray#3417), not chosen.
            # The only thread of the whole paste is the one the reporter chose, helper or not.
            known_helper = not is_main(thread, pid) and not sole and any(helper_match(h, thread, cmdline, lines) for h in self.helpers)
            helper = known_helper or (not main and not chosen and not thread.telling_frames(limit=1)
                                      and not _joins_a_thread(thread) and not _importing(thread))
            stalls = []
            for sig in self.stalls:
                frames = sig.match_thread(thread, cmdline, lines)
                if frames:
                    stalls.append((sig, frames))
            idle = next((s for s in self.idles if s.match_thread(thread, cmdline, lines)), None)
            if idle is not None:
                # A thread in its idle loop is idle unless a stall signature outranks
                # the loop (a worker parked in the message queue is that queue's wait;
                # an engine waiting on its input queue is not a generic lock wait).
                stalls = [m for m in stalls if m[0].priority > idle.priority]
            got = ThreadFacts(helper, tuple(stalls), idle)
            if len(self.memo) < 65536:
                self.memo[key] = got
        return got


def is_helper(thread: ThreadDump, pid: int | None, cmdline: str, helpers: Sequence[Signature]) -> bool:
    """A background thread: never the one that decides a verdict."""
    if is_main(thread, pid):
        return False
    if not thread.telling_frames(limit=1) and not _joins_a_thread(thread) and not _importing(thread):
        return True  # only stdlib/native frames: an idle pool worker, a queue feeder
    return any(helper_match(h, thread, cmdline) for h in helpers)


def _joins_a_thread(thread: ThreadDump) -> bool:
    """The thread waits in Thread.join for another thread to end. Background idlers wait
    for work (a queue, a condition, a socket), not for a thread: one joining is the
    program's own wait even when every frame of it is the standard library's (a
    Queue's finalizer joining its feeder, faulthandler naming no current thread)."""
    seen = 0
    for f in thread.frames:
        if f.native:
            continue
        if f.method in ("_wait_for_tstate_lock", "join") and f.file.rsplit("/", 1)[-1] == "threading.py":
            return True
        seen += 1
        if seen >= 2:
            return False
    return False


def _importing(thread: ThreadDump) -> bool:
    """The thread's innermost Python frame is importlib's: it is importing a module. A
    background idler waits for work, it does not import; a thread shown only in importlib
    (a faulthandler dump or paste cut below create_module, oh-my-pi#7343) is the program's
    own import even when every frame left is the standard library's."""
    f = next((f for f in thread.frames if not f.native), None)
    return f is not None and "importlib._bootstrap" in f.file.replace("/", ".")


def helper_match(h: Signature, thread: ThreadDump, cmdline: str, lines: ThreadLines | None = None) -> bool:
    """For helpers, a ``thread`` name pattern and ``frames`` are alternatives."""
    if h.thread is not None and re.search(h.thread, thread.name):
        return True
    if not h.frames:
        return False
    return bool(Signature(h.id, h.title, "", h.frames, match=h.match, process=h.process, innermost=h.innermost).match_thread(thread, cmdline, lines))

