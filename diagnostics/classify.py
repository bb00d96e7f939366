"""Which process and thread is stalled, and on what: signatures applied to stacks. Pure.

Per process:
* threads are ranked: the main thread and threads running own code decide;
  *helper* threads (progress-bar monitors, pin-memory, Ray's import and GC
  threads, watchdogs, idle thread-pool workers: ``kind = "helper"`` signatures,
  or any non-main thread with no frame outside the standard library) never do;
* a thread seen frozen across rounds (or seen once) is a candidate; threads
  that changed between rounds are only used when no frozen thread matches;
* among the candidates' matches of ``kind = "stall"`` signatures the highest
  ``priority`` wins (a CUDA-graph replay in one thread beats the synchronize
  it causes in another);
* no match: the process is *idle* when its deciding thread waits for new work
  (``kind = "idle"`` signatures: an engine's or a worker's loop) or only helpers
  remain, else *unknown* with the innermost non-stdlib frames as evidence.

Across processes (one multi-process paste or bundle, or several inputs):
* the *suspect* is a process that differs from a crowd waiting in a collective
  (``collective = true`` signatures), else one that could not be dumped;
* the headline is the suspect's own stall when it has one, else the crowd's
  collective wait; without a crowd the highest-priority stall; when every
  process is idle: ``all-idle`` ("idle, no signature": a lost wake-up), never a
  helper's lock wait; but workers idle in their loop without the process that feeds
  them (a Pool's, a DataLoader's, a Celery child) get their loop's id, whose advice
  points upstream, and a lone launcher waiting for its children gets its own.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any, Sequence

from hangwatch.diagnostics.other_threads import (
    OUTSIDE, WAITS_ON_A_THREAD, lock_waiter, main_waits_elsewhere, outside_waiter,
)
from hangwatch.diagnostics.signatures import Signature, find
from hangwatch.diagnostics.stacks import Frame, ProcessSeries, ThreadDump
from hangwatch.diagnostics.thread_roles import Matcher, helper_match, is_main, rank_from_cmdline
from hangwatch.diagnostics.wait_context import (
    awaits_its_coroutine, blocks_event_loop, finalizer_lock, fork_inherited, forked_in_logging, loop_blocked, reentered_from_finalizer,
    program_awaits, rank_in_step, stream_lock_inherited,
)
from hangwatch.diagnostics.waits import family_signature, guessed_wait, named_family, outranks_wrapper, refine, wait_of

UNKNOWN_TITLE = "No known signature matched"
UNKNOWN_ADVICE = (
    "Look at the evidence frames (innermost frames outside the standard library) of the "
    "stalled thread; if this recurs, add a signature for it with --signatures FILE."
)
ALL_IDLE_ID = "all-idle"
ALL_IDLE_TITLE = "Idle, no signature: every process waits for work (lost wake-up?)"
ALL_IDLE_ADVICE = (
    "No thread is blocked on the GPU, a collective or I/O: every process sits in its idle loop "
    "(or only background helpers are left). The work it waits for was never sent or its "
    "notification was lost: look at the process that should send it (the driver, the engine "
    "core, the scheduler, a Ray actor not in this dump), and check that every process of the "
    "job was dumped. Seen with vLLM engines behind LMCache (LMCache#4759) and verl/Ray "
    "rollouts (verl#340, verl#7180)."
)
NO_STACKS = "not dumped"

@dataclass(frozen=True)
class Match:
    signature_id: str
    pid: int | None
    thread: str
    frames: tuple[Frame, ...]

    def to_json(self) -> dict[str, Any]:
        return {"signature_id": self.signature_id, "pid": self.pid, "thread": self.thread, "frames": [f.render() for f in self.frames]}


@dataclass(frozen=True)
class Suspect:
    """The process most likely to be the culprit among several."""

    pid: int | None
    source: str
    reason: str
    signature_id: str | None = None
    rank: int | None = None
    #: False for the note "the culprit is not among them": no process of this input.
    present: bool = True

    def to_json(self) -> dict[str, Any]:
        return {"pid": self.pid, "source": self.source, "reason": self.reason, "signature_id": self.signature_id,
                "rank": self.rank, "present": self.present}

    def who(self) -> str:
        """How the report names it: a pasted process may have no pid, only a rank."""
        if self.pid is not None:
            return f"pid {self.pid}"
        if not self.present:
            return "not in this input"
        return f"rank {self.rank} (no pid in the paste)" if self.rank is not None else "a process without a pid"


@dataclass(frozen=True)
class Classification:
    signature_id: str | None
    title: str
    advice: str
    pid: int | None
    cmdline: str
    thread_name: str
    thread_ident: str
    evidence: tuple[Frame, ...]
    stack: tuple[Frame, ...]
    frozen: bool | None
    rounds: int
    also: tuple[Match, ...] = ()
    suspect: Suspect | None = None
    processes: int = 1
    reference: str = ""
    #: one compact row per process (``ProcessVerdict.compact_row``): what a node of a cohort
    #: tells the others, so that every node names a culprit on any node (``across_nodes``)
    process_rows: tuple[dict[str, Any], ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "signature_id": self.signature_id,
            "title": self.title,
            "advice": self.advice,
            "source": self.reference or None,
            "pid": self.pid,
            "cmdline": self.cmdline,
            "thread": {"name": self.thread_name, "ident": self.thread_ident},
            "frozen": self.frozen,
            "rounds": self.rounds,
            "evidence": [f.render() for f in self.evidence],
            "stack": [f.render() for f in self.stack],
            "also_matched": [m.to_json() for m in self.also],
            "processes": self.processes,
            "suspect": self.suspect.to_json() if self.suspect else None,
            "process_rows": list(self.process_rows),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Classification":
        """For bundles: rendered frames come back as short-name frames."""
        from hangwatch.diagnostics.pyspy import parse_frame_text  # noqa: PLC0415

        sus = data.get("suspect") or None
        return cls(
            data.get("signature_id"),
            data.get("title", ""),
            data.get("advice", ""),
            data.get("pid"),
            data.get("cmdline", ""),
            (data.get("thread") or {}).get("name", ""),
            (data.get("thread") or {}).get("ident", ""),
            tuple(parse_frame_text(s) for s in data.get("evidence", ())),
            tuple(parse_frame_text(s) for s in data.get("stack", ())),
            data.get("frozen"),
            int(data.get("rounds", 1)),
            suspect=Suspect(sus.get("pid"), str(sus.get("source", "")), str(sus.get("reason", "")), sus.get("signature_id"),
                            sus.get("rank"), bool(sus.get("present", sus.get("pid") is not None or bool(sus.get("source"))))) if isinstance(sus, dict) else None,
            processes=int(data.get("processes", 1) or 1),
            reference=str(data.get("source") or ""),
            process_rows=tuple(r for r in data.get("process_rows") or () if isinstance(r, dict)),
        )

    def summary(self) -> str:
        what = self.signature_id or "unknown"
        frozen = {True: "frozen across rounds", False: "changing between rounds", None: "single look"}[self.frozen]
        thread = f"thread {self.thread_name!r}" if self.thread_name else f"thread {self.thread_ident or '?'} (unnamed)"
        return f"{what}: {self.title} — pid {self.pid if self.pid is not None else '?'}, {thread} ({frozen})"


@dataclass(frozen=True)
class ProcessVerdict:
    """One process: its state and the thread and signature that decide it.

    ``state``: ``stalled`` (a stall signature matched), ``idle`` (waits for
    work, or only helpers), ``unknown``, or ``not dumped`` (no stacks: py-spy
    failed on it). The table shows a stall in an idle loop (a worker parked in
    its message queue) as ``waiting``."""

    series: ProcessSeries | None
    state: str
    signature: Signature | None = None
    thread: ThreadDump | None = None
    evidence: tuple[Frame, ...] = ()
    frozen: bool | None = None
    waiting_for_work: bool = False
    idle_label: str = ""
    matches: tuple[tuple[ThreadDump, Signature, tuple[Frame, ...]], ...] = ()
    source: str = ""
    pid_override: int | None = None
    note: str = ""

    @property
    def pid(self) -> int | None:
        return self.series.pid if self.series is not None else self.pid_override

    @property
    def cmdline(self) -> str:
        return self.series.cmdline if self.series is not None else ""

    @property
    def rank(self) -> int | None:
        if self.series is not None and self.series.rank is not None:
            return self.series.rank
        return rank_from_cmdline(self.cmdline)

    @property
    def signature_id(self) -> str | None:
        return self.signature.id if self.signature is not None else None

    @property
    def collective(self) -> bool:
        return self.state == "stalled" and self.signature is not None and self.signature.collective

    def label(self) -> str:
        """What the table shows in its signature column."""
        if self.state == "stalled":
            return self.signature_id or "?"
        if self.state == "idle":
            return f"idle ({self.idle_label})" if self.idle_label else "idle"
        if self.state == NO_STACKS:
            return NO_STACKS + (f" ({self.note})" if self.note else "")
        return "unknown"

    def top_frames(self, n: int = 2) -> tuple[Frame, ...]:
        if self.thread is None:
            return ()
        own = self.thread.telling_frames(limit=n)
        # A C-level stack (gdb, Paddle's C++ traceback) has no Python frame: its own
        # native frames (libnccl, an extension), else its innermost ones, not a blank cell.
        return (own or tuple(f for f in self.thread.frames if not f.native)[:n]
                or self.thread.native_telling_frames(limit=n) or self.thread.frames[:n])

    def compact_row(self) -> dict[str, Any]:
        """What another node needs of this process to name a culprit across nodes (no command line)."""
        return {
            "pid": self.pid,
            "rank": self.rank,
            "state": "waiting" if self.state == "stalled" and self.waiting_for_work else self.state,
            "signature_id": self.signature_id if self.state == "stalled" else None,
            "collective": self.collective,
            "evidence": [f.render()[:300] for f in self.evidence[:3]],
            "top_frames": [f.render()[:300] for f in self.top_frames(3)],
            **({"note": self.note[:200]} if self.note else {}),
        }

    def to_row(self) -> dict[str, Any]:
        active = None if self.thread is None else self.thread.active
        return {
            "source": self.source,
            "pid": self.pid,
            "rank": self.rank,
            "state": "waiting" if self.state == "stalled" and self.waiting_for_work else self.state,
            "running": {True: "active", False: "idle", None: None}[active],
            "thread": self.thread.name if self.thread is not None else None,
            "top_frames": [f.render() for f in self.top_frames(3)],
            "signature_id": self.signature_id if self.state == "stalled" else (ALL_IDLE_ID if self.state == "idle" else None),
            "label": self.label(),
            "cmdline": self.cmdline[:200],
        }



def process_verdict(series: ProcessSeries, signatures: Sequence[Signature], source: str = "", *,
                    matcher: Matcher | None = None, only_process: bool = False) -> ProcessVerdict:
    return _in_context(_process_verdict(series, signatures, source, matcher=matcher, only_process=only_process), signatures)


#: Signatures at or below this priority (the generic lock wait, the primitive families)
#: give way to what the rest of the stack says about the wait; a bug-specific signature
#: keeps its verdict.
GENERIC_PRIORITY = 20


def _in_context(v: ProcessVerdict, signatures: Sequence[Signature]) -> ProcessVerdict:
    """A generic verdict read again with the frames around its wait: a finalizer that
    interrupted its own object's locked call and waits for that lock (nobody else holds
    it), or a blocking call made on an event loop's own thread (the loop and every
    coroutine on it wait)."""
    if v.thread is None or (v.signature is not None and v.signature.priority > GENERIC_PRIORITY):
        return v
    if v.state in ("stalled", "unknown") and reentered_from_finalizer(v.thread):
        sig = finalizer_lock(signatures)
        evidence = v.evidence or v.thread.telling_frames()
        return replace(v, state="stalled", signature=sig, evidence=evidence, matches=((v.thread, sig, evidence),) + v.matches)
    if (v.state == "stalled" and v.signature is not None and v.signature.id == "lock-wait"
            and stream_lock_inherited(v.thread, v.series.latest.threads if v.series is not None and v.series.dumps else ())):
        sig = find(tuple(signatures), "fork-inherited-lock")
        if sig is not None:
            return replace(v, signature=sig, matches=((v.thread, sig, v.evidence),) + v.matches)
    w = blocks_event_loop(v.thread) if v.state == "stalled" else None
    if w is not None:
        sig = loop_blocked(w, signatures)
        return replace(v, signature=sig, matches=((v.thread, sig, v.evidence),) + v.matches)
    return v


def _process_verdict(series: ProcessSeries, signatures: Sequence[Signature], source: str = "", *,
                     matcher: Matcher | None = None, only_process: bool = False) -> ProcessVerdict:
    m = matcher or Matcher(signatures)
    pid, cmd = series.pid, series.cmdline
    threads = series.latest.threads if series.dumps else ()
    alone = len(threads) == 1
    # A gdb/lldb excerpt of some threads, none of them the main thread: each C-level
    # backtrace is one the reporter chose to show, so it may decide like a lone thread
    # (horovod#26: a thread in ncclAllReduce next to one in libcuda, no thread 1).
    # Threads with Python frames keep the helper rules (a py-spy paste cut before its
    # MainThread still shows only helpers).
    # Likewise a C-level backtrace pasted with no thread header of its own next to a Python
    # stack ("Python: <py-spy dump> And native: <gdb bt>", returnn#1811): gdb's bare `bt`
    # shows the thread it stopped in, the one the reporter is asking about, so it is the
    # native half of that stack, no background thread.
    no_main = not any(is_main(t, pid) for t in threads)
    # A main thread that says nothing (only unnamed frames in the driver: gdb's "?? () from
    # libcuda.so.1", the paste cut there) next to the reporter's other C-level backtraces
    # leaves those to decide as if no main thread were shown (NCCL#829: "the following
    # threads causing a deadlock", an ncclCommAbort thread stuck in its stream synchronize
    # and thread 1 cut after two libcuda frames).
    opaque_main = not no_main and all(_opaque_native(t) for t in threads if is_main(t, pid))
    # The only thread of the whole paste, with Python frames, is the one the reporter
    # pasted: it decides even where a helper signature knows it (a tool that prints native
    # threads on its own, a crash handler's watchdog thread, still shows helpers).
    cands = [(t, series.frozen(t.ident),
              m.facts(t, pid, cmd, alone, chosen=(no_main or opaque_main or _bare_list(t)) and bool(t.frames)
                      and all(f.native for f in t.frames), sole=alone and only_process and any(not f.native for f in t.frames)))
             for t in threads]
    workers = [c for c in cands if not c[2].helper]

    def matches(pool):
        return [(t, frozen, sig, frames) for t, frozen, facts in pool for sig, frames in facts.stalls]

    found = matches([c for c in workers if c[1] is not False]) or matches(workers)
    holder = next((c for c in workers if c[0].owns_gil), None)
    if holder is not None:
        # A thread waiting to take the GIL waits on the thread that holds it (py-spy's
        # "active+gil"): a main thread busy in Python makes every other thread queue
        # for the GIL, and that queue is no lock-wait of theirs.
        found = [x for x in found if x[0] is holder[0] or not _only_gil_wait(x[3])]
    if found:
        found = _rank_by_evidence(found, signatures)
        found.sort(key=lambda x: (-x[2].priority, x[1] is not True, not is_main(x[0], pid), -len(x[3])))
        t, frozen, sig, frames = found[0]
        sig = fork_inherited(refine(sig, t, signatures), t, signatures)
        if sig.id in WAITS_ON_A_THREAD:
            held = (lock_waiter(t, found, workers, signatures) or main_waits_elsewhere(t, workers, pid, signatures)
                    or outside_waiter(t, workers, signatures))
            if held is not None:
                t, frozen, sig, frames = held
        elif sig.id == "lock-wait" and t.frames and all(f.native for f in t.frames):
            # The interpreter's lock acquire seen in native frames only is any Python wait
            # (a worker's Queue.get or Condition.wait for its next task as much as a lock):
            # a main thread blocked outside the process says more.
            held = main_waits_elsewhere(t, workers, pid, signatures, only=OUTSIDE - {"sleep"})
            if held is not None:
                t, frozen, sig, frames = held
        idle = next(c[2] for c in cands if c[0] is t).idle
        return ProcessVerdict(series, "stalled", sig, t, frames, frozen, idle is not None, idle.title if idle else "",
                              tuple((x[0], x[2], x[3]) for x in found[:50]), source)
    # Only background threads: name one that no helper signature claims (a thread cut
    # after a stdlib wait, not one of the queue feeders beside it, yolov5#12655).
    pool = [holder] if holder is not None else (workers or [
        c for c in cands if not any(helper_match(h, c[0], cmd) for h in m.helpers)] or cands)
    if not pool:
        return ProcessVerdict(series, "idle", source=source, idle_label="no threads")
    t, frozen, facts = min(pool, key=lambda c: _telling_rank(c[:2], pid))
    if facts.idle is not None and facts.idle.id == "event-loop-idle" and is_main(t, pid) and awaits_its_coroutine(t):
        # The program's own asyncio.run (or a test's) with nothing left to run: it awaits
        # a coroutine that never completes, where a server's loop would wait for requests.
        sig = program_awaits(signatures)
        evidence = facts.idle.match_thread(t, cmd)
        return ProcessVerdict(series, "stalled", sig, t, evidence, frozen, False, "", ((t, sig, evidence),), source)
    if facts.idle is not None:
        return ProcessVerdict(series, "idle", None, t, facts.idle.match_thread(t, cmd), frozen, True, facts.idle.title, (), source)
    if not workers:
        return ProcessVerdict(series, "idle", None, t, (), frozen, False, "only helper threads", (), source)
    wait = wait_of(t)
    if wait is None and t.telling_frames(limit=1) and t.active is not True and not t.owns_gil:
        # The deciding thread shows no wait of its own (in a C call py-spy does not show, or
        # a paste with no state; one py-spy calls active runs Python and decides) while another
        # thread of the process waits on a lock: that lock wait says more (a lock the deciding
        # thread holds while it waits for that thread).
        held = lock_waiter(t, [], workers, signatures)
        if held is not None:
            ht, hfrozen, hsig, hframes = held
            return ProcessVerdict(series, "stalled", hsig, ht, hframes, hfrozen, False, "", ((ht, hsig, hframes),), source)
    if wait is None or wait.weak or wait.category == "lock-wait":
        # Another thread of the process waits to take the GIL while this one shows no wait of
        # its own or blocks in native code (a mutex, a condition) with the GIL held: the GIL
        # waiter names the deadlock (the holder's native lock and the GIL taken in opposite
        # orders), whose advice is the same from either side.
        gil = next((c for c in cands if c[0] is not t and (w := wait_of(c[0])) is not None and w.category == "gil-deadlock"), None)
        if gil is not None and t.frames and t.frames[0].native:
            t, frozen = gil[0], gil[1]
            wait = wait_of(t)
    if wait is not None and not wait.weak and wait.category in WAITS_ON_A_THREAD:
        held = lock_waiter(t, [], workers, signatures) or outside_waiter(t, workers, signatures)
        if held is not None:
            ht, hfrozen, hsig, hframes = held
            return ProcessVerdict(series, "stalled", hsig, ht, hframes, hfrozen, False, "", ((ht, hsig, hframes),), source)
    native_program = (wait is not None and wait.weak and wait.category not in _IDLE_LOOP_WAITS
                      and wait.caller is not None and not _SHARED_LIBRARY.search(wait.caller.file) and _native_program(t))
    if wait is not None and (not wait.weak or native_program):
        # No signature names a cause, but the thread sits in a known blocking call: that
        # call's family is the verdict (a file lock, a child process, a queue...), with the
        # innermost own frames as evidence where there are any.
        fam = fork_inherited(family_signature(wait.category, signatures), t, signatures)
        evidence = (t.native_telling_frames() if native_program else ()) or t.telling_frames() or wait.frames
        return ProcessVerdict(series, "stalled", fam, t, evidence, frozen, False, "", ((t, fam, evidence),), source)
    if forked_in_logging(t):
        inherited = find(tuple(signatures), "fork-inherited-lock")
        if inherited is not None:
            evidence = t.telling_frames() or t.frames[:3]
            return ProcessVerdict(series, "stalled", inherited, t, evidence, frozen, False, "", ((t, inherited, evidence),), source)
    if not t.telling_frames(limit=1):
        native = t.native_telling_frames()
        if not native:
            return ProcessVerdict(series, "idle", None, t, (), frozen, False, "standard-library wait", (), source)
        # blocked in libcuda/libnccl/an extension with no signature: not idle
        evidence = native
    else:
        evidence = t.telling_frames()
    guess = guessed_wait(t) if wait is None else None
    if guess is None and wait is None and only_process and is_main(t, pid):
        # Only for a rank dumped alone: next to its peers, a rank that shows no wait is the
        # odd one out of their collective, the suspect the cross-process reading names.
        guess = rank_in_step(t, series.rank if series is not None else None)
    if guess is not None:
        # No blocking call is shown (a cut traceback, a library's own wrapper of its wait, a
        # C++ library's mutex): the words of the innermost own frame name the family, a
        # guess the report marks as one.
        fam = fork_inherited(named_family(guess, signatures), t, signatures)
        return ProcessVerdict(series, "stalled", fam, t, evidence, frozen, False, "", ((t, fam, evidence),), source)
    return ProcessVerdict(series, "unknown", None, t, evidence, frozen, False, "", (), source)


def _rank_by_evidence(found: list, signatures: Sequence[Signature]) -> list:
    """A wrapper signature (a graph replay's wrapper) matched further out than the blocking
    call its thread sits in (a collective, a synchronize, a lock) gives way to that call:
    the wait's own family takes its place when no other signature names it."""
    out = []
    for t, frozen, sig, frames in found:
        if sig.wrapper and outranks_wrapper(t, frames):
            if not any(x[0] is t and not x[2].wrapper for x in found):
                w = wait_of(t)
                assert w is not None
                out.append((t, frozen, family_signature(w.category, signatures), w.frames))
            continue
        out.append((t, frozen, sig, frames))
    return out


def _opaque_native(thread: ThreadDump) -> bool:
    """Only native frames, none of them named outside the C library and the interpreter."""
    return bool(thread.frames) and all(f.native for f in thread.frames) and not any(
        f.function != "?" for f in thread.native_telling_frames())


#: Frames of a thread waiting to take the GIL (py-bt's "Waiting for the GIL", CPython's
#: take_gil under PyEval_RestoreThread, pybind11's gil_scoped_acquire).
_GIL_WAIT = re.compile(r"^(<waiting for the GIL>|take_gil|PyEval_RestoreThread|PyEval_AcquireThread|PyEval_AcquireLock"
                       r"|PyGILState_Ensure|PyCOND_TIMEDWAIT|PyCOND_WAIT)$|gil_scoped_acquire::gil_scoped_acquire$")


def _bare_list(thread: ThreadDump) -> bool:
    """A frame list the paste gave no thread header and no name (the reader numbers such
    lists "?1", "?2", ...)."""
    return thread.ident.startswith("?") and not thread.name


#: A native program's waits that say little of their own: its event loop's idle (poll,
#: epoll, select) or a sleep, a server between requests (see ``Wait.weak``), and a wait
#: for its child, whose own stack, when pasted too, is the one that says why.
_IDLE_LOOP_WAITS = frozenset(("socket-read", "sleep", "subprocess-wait"))
#: A C or C++ program's entry at the bottom of its main thread.
_PROGRAM_ENTRY = frozenset(("main", "wmain", "WinMain", "wWinMain", "ServiceMain"))
#: Frames of CPython's own (its library or its functions): the process runs Python.
_PYTHON_NATIVE = re.compile(r"^(_?Py|_PyEval|PyEval)|^(cfunction_|method_vectorcall|slot_tp_|_PyObject|builtin_|pypy_g_)")
_PYTHON_LIB = re.compile(r"(^|/)(lib)?(python|pypy)\d|\bpython\d?(\.\d+)?(\.exe)?$|\.so\b.*python|\.pyd$|\.cpython-|libpypy")
_PYTHON_NAME = re.compile(r"python|pypy", re.IGNORECASE)
#: A shared library's file: a wait called from one is that library's (an extension's, a
#: runtime's), not the program's own code (a source file, the program's binary).
_SHARED_LIBRARY = re.compile(r"\.(so|dylib|dll|pyd)(\.[\w.]+)?$", re.IGNORECASE)


def _native_program(thread: ThreadDump) -> bool:
    """The main thread of a program that is no Python process (git, QEMU, a C++ server):
    its stack down to the program's entry, no Python frame and no frame of CPython or an
    extension module. There a C library's wait
    called from the program's own code is the program's wait, not an extension's private one
    that a Python call around it would explain."""
    if _PYTHON_NAME.search(thread.name):
        return False  # a Python process's thread ("python3"), its Python frames not pasted
    entry = False
    for f in thread.frames:
        if not f.native:
            return False
        if _PYTHON_NATIVE.match(f.function) or _PYTHON_LIB.search(f.file):
            return False
        entry = entry or f.function in _PROGRAM_ENTRY
    # (only a stack down to the program's own entry says so: an excerpt of a Python
    # process's native thread, a driver's poller, an extension's pool, shows no Python either)
    return entry


def _only_gil_wait(evidence: Sequence[Frame]) -> bool:
    return bool(evidence) and all(_GIL_WAIT.search(f.function) for f in evidence)


def process_verdicts(series: Sequence[ProcessSeries], signatures: Sequence[Signature], source: str = "") -> list[ProcessVerdict]:
    """One verdict per process; identical stacks are matched once."""
    matcher = Matcher(signatures)
    only = sum(1 for s in series if s.dumps) == 1
    return [process_verdict(s, signatures, source, matcher=matcher, only_process=only) for s in series if s.dumps]


def _telling_rank(c: tuple[ThreadDump, bool | None], pid: int | None) -> tuple:
    """Frozen first, then the main thread, active threads, threads with own code, deepest."""
    t, frozen = c
    own = len(t.telling_frames(limit=1000))
    return (frozen is False, not is_main(t, pid), t.active is False, own == 0, -own)


@dataclass(frozen=True)
class Story:
    """The cross-process reading: the suspect, and the crowd it differs from."""

    suspect: ProcessVerdict | None
    reason: str
    crowd: tuple[ProcessVerdict, ...] = ()
    note: str = ""


def find_suspect(verdicts: Sequence[ProcessVerdict]) -> Story:
    """Name the process that differs from a crowd waiting in a collective, or
    one that could not be dumped. Nothing with a single process."""
    if len(verdicts) < 2:
        return Story(None, "")
    crowd = tuple(v for v in verdicts if v.collective)
    others = [v for v in verdicts if not v.collective]
    undumped = [v for v in others if v.state == NO_STACKS]
    # Launchers and idle helpers (torchrun's agent, a parked worker) are not ranks that
    # could hold the crowd up: when processes that are busy elsewhere exist, only they compete.
    busy_elsewhere = [v for v in others if v.state != "idle" and not v.waiting_for_work]
    if crowd and busy_elsewhere and _ranks(busy_elsewhere) <= max(len(crowd), 1) < _ranks(others):
        others = busy_elsewhere
    if crowd and others and _ranks(others) <= max(len(crowd), 1):
        def order(v: ProcessVerdict) -> tuple:
            return ({"stalled": 0, NO_STACKS: 1, "unknown": 2, "idle": 3}.get(v.state, 4), v.waiting_for_work)

        best = min(others, key=order)
        n = len(crowd)
        where = _crowd_ops(crowd)
        if best.state == "stalled" and not best.waiting_for_work:
            why = f"{n} other process(es) wait in a collective ({where}); this one is stuck elsewhere: {best.signature_id}"
        elif best.state == NO_STACKS:
            why = f"{n} process(es) wait in a collective ({where}); py-spy could not dump this one ({best.note or 'no stacks'}): it may be stuck in the driver or in D state"
        elif best.state == "idle" or best.waiting_for_work:
            why = (f"{n} process(es) wait in a collective ({where}); this one is not in it but back in its idle loop: "
                   "it crashed out of the step, or took a code path without the collective")
        else:
            why = f"{n} process(es) wait in a collective ({where}); this one is somewhere else (no known signature)"
        return Story(best, why, crowd)
    if crowd and not others:
        odd = _odd_collective(crowd)
        if odd is not None:
            return Story(odd[0], odd[1], crowd)
        return Story(None, "", crowd, note=(f"all {len(crowd)} processes wait in a collective ({_crowd_ops(crowd)}): "
                                            "the culprit is not among them (a rank on another node, one that exited, or one not dumped)"
                                            + _missing_ranks(crowd)))
    if undumped and len(undumped) < len(verdicts):
        v = undumped[0]
        return Story(v, f"py-spy could not dump it ({v.note or 'no stacks'}) while the others could")
    return Story(None, "")


def _ranks(vs: Sequence[ProcessVerdict]) -> int:
    """How many ranks these processes are: processes of one known rank (a rank and its
    dataset-map or DataLoader workers, ms-swift notes in data/pasted) count once."""
    return len({v.rank for v in vs if v.rank is not None}) + sum(1 for v in vs if v.rank is None)


def _missing_ranks(crowd: Sequence[ProcessVerdict]) -> str:
    """Ranks below the highest one present that the input does not show: when every rank
    waits in the collective, the one that never arrived is most likely among these
    (NCCL watchdog lines from ranks 1-5 and none from rank 0)."""
    ranks = {v.rank for v in crowd}
    if None in ranks or len(ranks) < 2:
        return ""
    missing = sorted(set(range(max(ranks) + 1)) - ranks)  # type: ignore[type-var, arg-type]
    if not missing or len(missing) > 8:
        return ""
    return f"; not in this input: rank {', '.join(str(r) for r in missing)}, look there first"


def _crowd_ops(crowd: Sequence[ProcessVerdict]) -> str:
    ops = Counter(v.evidence[0].function if v.evidence else "?" for v in crowd)
    return ", ".join(f"{op} ×{k}" if k > 1 else op for op, k in ops.most_common(3))


def _odd_collective(crowd: Sequence[ProcessVerdict]) -> tuple[ProcessVerdict, str] | None:
    """All in collectives: one process in a different collective call than a
    clear majority (>= 3 alike) is the odd one (mismatched collectives)."""
    def key(v: ProcessVerdict) -> tuple:
        own = v.top_frames(2)
        return (v.evidence[0].key if v.evidence else None, tuple(f.key for f in own))

    groups = Counter(key(v) for v in crowd)
    (_, top), = groups.most_common(1)
    singles = [v for v in crowd if groups[key(v)] == 1]
    if top >= 3 and len(singles) == 1 and top >= len(crowd) - 1:
        v = singles[0]
        return v, (f"{top} processes wait in the same collective; this one waits in a different one "
                   f"({v.evidence[0].render() if v.evidence else '?'}): mismatched collectives, it took another code path")
    return None


def classify(series: Sequence[ProcessSeries], signatures: Sequence[Signature], *,
             extra: Sequence[ProcessVerdict] = ()) -> Classification | None:
    """The headline for one input (all its processes). None only when there are
    no threads at all. ``extra``: processes known without stacks (undumpable)."""
    verdicts = process_verdicts(series, signatures)
    if not any(v.thread is not None for v in verdicts):
        return None
    return headline(verdicts + list(extra), signatures, rounds=max((len(s.dumps) for s in series), default=1))


def headline(verdicts: Sequence[ProcessVerdict], signatures: Sequence[Signature], rounds: int = 1) -> Classification | None:
    with_stacks = [v for v in verdicts if v.thread is not None]
    if not with_stacks:
        return None
    story = find_suspect(verdicts)
    stalled = [v for v in with_stacks if v.state == "stalled"]
    pick: ProcessVerdict
    if story.suspect is not None and story.suspect.thread is not None and story.suspect.state == "stalled" and not story.suspect.waiting_for_work:
        pick = story.suspect
    elif story.crowd:
        pick = _best_stalled(story.crowd)
    elif stalled and all(v.waiting_for_work for v in stalled) and _sender_idle(with_stacks):
        # Every "stall" is a process parked in its own idle loop (a vLLM worker waiting in
        # its message queue for the engine's next call) and the process that would send that
        # work is idle in its loop too (the engine core waiting for requests): nothing inside
        # the job is stuck, the work never arrived. One idle vLLM deployment dumped whole
        # read as a queue wait (vLLM profiling notes in data/pasted).
        pick = next(v for v in with_stacks if v.state == "idle" and v.waiting_for_work)
        return _result(pick, ALL_IDLE_ID, ALL_IDLE_TITLE, ALL_IDLE_ADVICE, pick.evidence or pick.top_frames(3), rounds, verdicts, story)
    elif stalled:
        # A process waiting for work loses to one stuck in something.
        pick = min(stalled, key=lambda v: (v.waiting_for_work, -v.signature.priority, v.frozen is not True, -len(v.evidence)))  # type: ignore[union-attr]
    else:
        unknown = [v for v in with_stacks if v.state == "unknown"]
        if unknown:
            pick = min(unknown, key=lambda v: _telling_rank((v.thread, v.frozen), v.pid))  # type: ignore[arg-type]
            return _result(pick, None, UNKNOWN_TITLE, UNKNOWN_ADVICE, pick.evidence, rounds, verdicts, story)
        pick = next((v for v in with_stacks if v.waiting_for_work), with_stacks[0])
        children = _lone_parent(pick, with_stacks, signatures) or _lone_worker(pick, with_stacks, signatures)
        if children is not None:
            return _result(pick, children.id, children.title, children.advice, pick.evidence or pick.top_frames(3), rounds, verdicts,
                           story, children.reference)
        return _result(pick, ALL_IDLE_ID, ALL_IDLE_TITLE, ALL_IDLE_ADVICE, pick.evidence or pick.top_frames(3), rounds, verdicts, story)
    sig = pick.signature
    assert sig is not None
    return _result(pick, sig.id, sig.title, sig.advice, pick.evidence, rounds, verdicts, story, sig.reference)


def _lone_parent(pick: ProcessVerdict, with_stacks: Sequence[ProcessVerdict], signatures: Sequence[Signature]) -> Signature | None:
    """``child-process-wait`` when the only process dumped is a launcher waiting for its
    children (torch.multiprocessing.spawn's join, a Pool's map): that wait is idle next to
    its children's stacks, which decide, but alone it is no lost wake-up: the children it
    waits for are stuck and are the ones to dump."""
    if len(with_stacks) != 1 or pick.thread is None:
        return None
    idle = _idle_signature(pick, signatures)
    if idle is not None and idle.id in _LAUNCHERS:
        return idle  # (whatever it sleeps or polls in between, a launcher waits for its ranks)
    w = wait_of(pick.thread)
    if w is None or w.category != "subprocess-wait":
        return None
    # The launcher's own idle signature when it says what to do alone (spawn's parent).
    return idle or find(tuple(signatures), "child-process-wait")


#: Launchers' idle loops: the processes they started are the ones to dump.
_LAUNCHERS = frozenset(("spawn-launcher-wait", "torchrun-agent-monitor"))


def _idle_signature(pick: ProcessVerdict, signatures: Sequence[Signature]) -> Signature | None:
    """The idle signature ``pick`` idles in, when it has advice of its own to give alone."""
    return next((sig for sig in signatures if sig.kind == "idle" and sig.title == pick.idle_label and sig.advice), None)


#: Idle loops of a worker that a parent process feeds: alone in a paste, the worker is
#: parked between tasks and the parent (or the driver), not dumped, is the one to look at.
_FED_WORKERS = frozenset(("pool-worker-idle", "dataloader-worker-idle", "task-queue-worker-idle"))
#: Of those, the loops only a worker runs: several processes idle in one are workers without
#: their feeder. (Celery's consumer idles in the same signature as its pool's children: the
#: consumer and a child idle together are a whole idle worker, a lost wake-up.)
_WORKER_ONLY = frozenset(("pool-worker-idle", "dataloader-worker-idle"))
#: A pool child's own loop (billiard's worker), not its parent's consumer.
_POOL_CHILD = re.compile(r"(^|/)billiard/(pool|connection)\.py$")


def _lone_worker(pick: ProcessVerdict, with_stacks: Sequence[ProcessVerdict], signatures: Sequence[Signature]) -> Signature | None:
    """The workers' own idle signature when the only processes dumped are workers parked
    in the same loop (Pool workers, DataLoader workers, Celery children) and the process
    that feeds them is not among them: idle workers alone are no lost wake-up of a whole
    job, they say the work is stuck upstream, where the signature's advice looks."""
    if pick.thread is None or any(v.state != "idle" or not v.waiting_for_work or v.idle_label != pick.idle_label
                                  for v in with_stacks):
        return None
    idle = _idle_signature(pick, signatures)
    if idle is None or idle.id not in (_FED_WORKERS if len(with_stacks) == 1 else _WORKER_ONLY):
        return None
    if idle.id not in _WORKER_ONLY and not any(_POOL_CHILD.search(f.file.replace("\\", "/")) for f in pick.thread.frames):
        return None  # Celery's consumer, the feeder itself, idle in the same signature: the whole worker idles
    return idle


def _sender_idle(vs: Sequence[ProcessVerdict]) -> bool:
    """Some process idles in its own work loop and none is stuck elsewhere or unread."""
    return (any(v.state == "idle" and v.waiting_for_work for v in vs)
            and not any(v.state in ("unknown", NO_STACKS) for v in vs))


def _best_stalled(vs: Sequence[ProcessVerdict]) -> ProcessVerdict:
    return min(vs, key=lambda v: (-v.signature.priority, v.frozen is not True, -len(v.evidence)))  # type: ignore[union-attr]


def _result(v: ProcessVerdict, sid, title, advice, evidence, rounds, verdicts, story: Story, reference: str = "") -> Classification:
    also = []
    for other in verdicts:
        for t, sig, frames in other.matches:
            if other is v and t is v.thread and sig.id == sid:
                continue
            also.append(Match(sig.id, other.pid, t.name, frames))
    suspect = None
    if story.suspect is not None:
        s = story.suspect
        suspect = Suspect(s.pid, s.source, story.reason, s.signature_id if s.state == "stalled" else None, s.rank)
    elif story.note:
        suspect = Suspect(None, "", story.note, None, present=False)
    t = v.thread
    return Classification(
        signature_id=sid,
        title=title,
        advice=advice,
        pid=v.pid,
        cmdline=v.cmdline,
        thread_name=t.name if t is not None else "",
        thread_ident=t.ident if t is not None else "",
        evidence=tuple(evidence),
        stack=t.frames if t is not None else (),
        frozen=v.frozen,
        rounds=rounds,
        also=tuple(also),
        suspect=suspect,
        processes=len(verdicts),
        reference=reference,
        process_rows=tuple(p.compact_row() for p in verdicts[:64]),
    )


@dataclass(frozen=True)
class Overview:
    """Every process of every input, and the suspect among them."""

    verdicts: tuple[ProcessVerdict, ...] = field(default_factory=tuple)
    story: Story = field(default_factory=lambda: Story(None, ""))

    def to_json(self) -> dict[str, Any]:
        s = self.story
        return {
            "processes": [v.to_row() for v in self.verdicts],
            "suspect": ({"pid": s.suspect.pid, "source": s.suspect.source, "rank": s.suspect.rank, "reason": s.reason,
                         "signature_id": s.suspect.signature_id if s.suspect.state == "stalled" else None}
                        if s.suspect is not None else None),
            "note": s.note or None,
        }


def overview(verdicts: Sequence[ProcessVerdict]) -> Overview:
    return Overview(tuple(verdicts), find_suspect(verdicts))
