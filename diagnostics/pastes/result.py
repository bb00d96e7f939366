"""The end of a paste: what is still open is closed, what was kept aside is used when
the paste has no other stack, and the drafts become the report's ``ProcessDump``s.

Kept aside, each used only where nothing before it is a stack: fenced lists of
native-shaped names, error tracebacks, torch's C++ error backtraces. Processes known
only from log lines (NCCL watchdog, Horovod, vLLM's shm_broadcast waits) come last.
"""

from __future__ import annotations

import re
from dataclasses import replace

from hangwatch.contract.redact import redact_text
from hangwatch.diagnostics.pastes.builder import Builder, ProcessDraft, ThreadDraft
from hangwatch.diagnostics.pastes.cxx_traces import numbered_line, raised_from
from hangwatch.diagnostics.pastes.handwritten import end_arrow, end_bare
from hangwatch.diagnostics.pastes.logs import end_trace
from hangwatch.diagnostics.pastes.macos import end_graph
from hangwatch.diagnostics.pastes.parse_report import ParseReport
from hangwatch.diagnostics.pastes.tracebacks import blocked_call
from hangwatch.diagnostics.waits import primitive_of
from hangwatch.diagnostics.pastes.patterns import (
    DUMPER, HANDLER, MAX_PROCESSES, NATIVE_DUMPER, SIGNAL_HANDLER,
)
from hangwatch.diagnostics.pastes.tracebacks import end_pdb, end_pytest, end_pytrace, end_traceback
from hangwatch.diagnostics.pastes.unwrap import StreamKey
from hangwatch.diagnostics.stacks import Frame, ProcessDump, ThreadDump
from hangwatch.diagnostics.waits import wait_of


def finish(b: Builder) -> ParseReport:
    """Close what is open and put the processes read into the report."""
    _close_open_blocks(b)
    _bare_runs(b)
    pending_used = _pending_tracebacks(b)
    _cxx_backtraces(b, pending_used)
    out = _process_dumps(b)
    _watchdog_ranks(b, out)
    _shm_waiters(b, out)
    _message_waiters(b, out)
    _horovod_waiters(b, out)
    b.report.processes = tuple(out)
    return b.report


def _has_frames(b: Builder) -> bool:
    return any(t.frames for p in b.processes for t in p.threads)


def _close_open_blocks(b: Builder) -> None:
    # Traceback-shaped blocks without an exception line (cut, or format_stack dumps of
    # every thread) are kept only when the paste has no other stack ("not a dump"
    # would say less than their frames do).
    end_traceback(b, keep=False)
    end_trace(b)
    end_arrow(b)
    end_pdb(b)
    end_pytest(b)
    end_pytrace(b)
    end_graph(b)
    if b.numbered:
        numbered_line(b, "")  # a C++ traceback that ends the paste
    end_bare(b)


def _bare_runs(b: Builder) -> None:
    if b.bare_runs and not b.tb_pending and not _has_frames(b):
        # Nothing in the paste is a stack but a fenced list of native-shaped names, one
        # per line, as people copy a `py-spy dump --native` or a gdb bt by hand
        # (sglang#17870: "THPStorage_dealloc / ... / cudaStreamSynchronize /
        # cuStreamSynchronize <- never returns"): each list is one thread, as written.
        for run in b.bare_runs:
            b.report.skipped -= len(run)
            b.report.bare_frames += len(run)
            b.start_thread(None, "unknown", "")
            b.report.thread_headers -= 1  # no header was pasted
            b.add_frames(run)


def _pending_tracebacks(b: Builder) -> bool:
    """The tracebacks kept aside, as threads when the paste has no other stack; True if so."""
    pending_used = bool(b.tb_pending) and not _has_frames(b)
    if pending_used:
        stream: StreamKey = None
        last_rank: int | None = None
        for n, (caption, frames, lines, error, pid, rank) in enumerate(b.tb_pending):
            b.report.skipped -= lines
            b.report.error_tracebacks += error
            fresh = pid != stream or (n > 0 and rank is not None and rank != last_rank)
            if fresh:
                # each interleaved process its own, and each rank's traceback ("[rank1]:"
                # after "[rank0]:"); after them, a traceback no prefix claims is not theirs
                b.enter_stream(pid)
            stream, last_rank = pid, rank
            b.traceback_thread(caption or ("MainThread" if n == 0 or pid is not None or fresh else ""), frames,
                               inner=raised_from(b.cxx_of.get(n, [])), rank=rank)
    return pending_used


def _cxx_backtraces(b: Builder, pending_used: bool) -> None:
    """torch's C++ error backtraces not used under a traceback: threads when the paste has
    no other stack, else skipped text."""
    used = {id(block) for block in b.cxx_of.values()} if pending_used else set()
    cxx_lines = sum(len(block) for block in b.cxx_blocks if id(block) not in used)
    if b.cxx_blocks and not b.watchdog and not _has_frames(b):
        # Only torch's C++ error backtrace was pasted: the raising thread's native stack
        # (where a store get or a communicator setup was waiting when it timed out).
        for block in b.cxx_blocks:
            if id(block) in b.cxx_watchdog or any("watchdog" in f.function.lower() or "checkTimeout" in f.function for f in block):
                continue  # the NCCL watchdog thread's own stack, never the hung one
            b.group = []
            b.add_frames(raised_from(block) or block)
        if b.cxx_watchdog and not _has_frames(b):
            # Only the NCCL watchdog's own backtraces, and torch's header says the
            # watchdog raised ("Exception raised from run at ...ProcessGroupNCCL.cpp"): a
            # collective timed out or failed. That is all the paste says (no rank's stack,
            # no WorkNCCL line): one rank known only from the watchdog, in a collective.
            # (A frame list alone that merely names the watchdog says no such thing.)
            b.watchdog[None] = (None, "collective", "?")
            b.report.watchdog_raised = True
    else:
        b.report.skipped += cxx_lines


def _process_dumps(b: Builder) -> list[ProcessDump]:
    """Every process with a thread that has frames; a pid seen again is another round."""
    rounds: dict[int | None, int] = {}
    out = []
    flip = _outermost_first(b.processes)
    for p in b.processes:
        threads = _thread_dumps(p, flip)
        if not threads:
            continue
        key = p.pid
        rounds[key] = rounds.get(key, 0) + 1 if key is not None else 1
        # A pasted command line is echoed in the verdict and its JSON: its secrets
        # (--hf_token hf_..., WANDB_API_KEY=...) never are, as in a bundle.
        out.append(ProcessDump(p.pid, tuple(threads), redact_text(p.cmdline), p.python, rounds[key], rank=p.rank))
        if p.rank is not None and p.pid is not None:
            b.report.ranks[p.pid] = p.rank
    return out


#: Where a thread's stack starts: the thread's or the process's entry point.
_ENTRY = re.compile(r"^(_{1,2}bootstrap(_inner)?|<module>|_run_module_as_main|_run_code|start_thread|clone3?|thread_start|"
                    r"_?main|run_module|invoke)$")


def _outermost_first(processes: list[ProcessDraft]) -> bool:
    """Whether the threads read from a shape that does not say its order (see
    ``ThreadDraft.orient_guess``) list the outermost frame first: one paste is one tool's
    or one writer's, so its threads vote together, each by which end its entry point
    (``_bootstrap``, ``<module>``) sits at. A tie keeps py-spy's order, innermost first."""
    votes = 0
    for p in processes:
        for t in p.threads:
            if not t.orient_guess or len(t.frames) < 2:
                continue
            first, last = bool(_ENTRY.match(t.frames[0].function)), bool(_ENTRY.match(t.frames[-1].function))
            votes += (first and not last) - (last and not first)
    return votes > 0


#: Frame lines in a row, each indented further than the one before, that make a call tree.
MIN_STAIRCASE = 4


def _staircase(t: ThreadDraft) -> bool:
    """The thread's frame lines indent each under the one before, at least
    ``MIN_STAIRCASE`` in a row, and never step back out that way: a call tree written by
    hand, each call under its caller, outermost first ("_dl_open / _dl_init / NUMAWrapper
    / exit / join", one space deeper each line). Not when its ends say the list is
    innermost first already (an entry point last, or a blocking call first and none last)."""
    if len(t.frames) < MIN_STAIRCASE or _ENTRY.match(t.frames[-1].function) or (
            primitive_of(t.frames[0]) is not None and primitive_of(t.frames[-1]) is None):
        return False
    steps = list(zip(t.indents, t.indents[1:]))
    return _longest_run([b > a for a, b in steps]) >= MIN_STAIRCASE and _longest_run([b < a for a, b in steps]) < MIN_STAIRCASE


def _longest_run(steps: list[bool]) -> int:
    """Lines in the longest run of steps that hold (a run of k steps spans k + 1 lines)."""
    best = run = 0
    for step in steps:
        run = run + 1 if step else 0
        best = max(best, run)
    return best + 1 if best else 0


def _thread_dumps(p: ProcessDraft, flip: bool = False) -> list[ThreadDump]:
    threads = []
    pybt: list[bool] = []
    for n, t in enumerate(p.threads):
        if not t.frames:
            continue
        ident = t.ident if t.ident is not None else (f"?{n + 1}")
        if ident.lower().startswith("0x"):
            ident = ident.lower()
        active = None if t.state in (None, "unknown") else (t.state not in ("idle", "sleeping", "waiting"))
        reverse = t.outermost_first or (flip and t.orient_guess) or _staircase(t)
        frames = _without_dumper(tuple(reversed(t.frames)) if reverse else tuple(t.frames))
        if t.source and frames and not frames[0].native:
            # pystack shows no frame for a C call (a lock's acquire, a sleep): the call on
            # the innermost source line is where the thread is blocked, as under Ctrl-C.
            frames = tuple(blocked_call(list(reversed(frames)), t.source)) + frames
        threads.append(ThreadDump(ident, t.name, frames, active, "gil" in (t.state or "")))
        pybt.append(t.pybt)
    return _one_thread_in_two_halves(threads, pybt)


#: The interpreter's frames in a native backtrace: where the Python frames of py-bt go.
_EVAL = re.compile(r"^_?(PyEval_EvalFrame\w*|PyEval_EvalCode\w*|_PyEval_Vector|call_function|fast_function|_PyFunction_\w+|"
                   r"function_code_fastcall|method_vectorcall\w*|_PyObject_\w*Call\w*|PyObject_\w*Call\w*|cfunction_\w+|"
                   r"_PyCFunction_\w+)(\.\w+)*$")


def _one_thread_in_two_halves(threads: list[ThreadDump], pybt: list[bool]) -> list[ThreadDump]:
    """gdb's ``bt`` of a thread and its ``py-bt`` (a debugging session's usual two steps,
    either first, no thread header between them): one thread, read as two, its native wait
    in one (``select`` under ``time_sleep``, ``drop_gil``) and its Python frames in the
    other. Joined: the native frames down to the interpreter's first, then the Python
    frames, then the native rest (less the Python frames python-gdb already showed there).
    Only for two threads in a row that no header named, one native with the interpreter in
    it, the other py-bt's (``pybt``), both starting at the same kind of entry (a process's
    main, or a thread's start). A py-bt read on after the bt of the same thread is moved
    likewise (``_python_after_entry``)."""
    out: list[ThreadDump] = []
    i = 0
    while i < len(threads):
        a = threads[i]
        b = threads[i + 1] if i + 1 < len(threads) else None
        merged = None
        if b is not None and a.ident.startswith("?") and b.ident.startswith("?"):
            merged = (_halves(a, b) if pybt[i + 1] else None) or (_halves(b, a) if pybt[i] else None)
        if merged is not None:
            out.append(merged)
            i += 2
            continue
        out.append(_python_after_entry(a) if pybt[i] else a)
        i += 1
    return out


#: The native frames a thread's stack starts at: a process's main, or a thread's start.
_NATIVE_MAIN = re.compile(r"^(_start|__libc_start_main|__libc_start_call_main|main|Py_BytesMain|Py_Main|Py_RunMain)$")
_NATIVE_THREAD = re.compile(r"^(start_thread|clone3?|thread_run|pythread_wrapper|t_bootstrap)$")
#: The Python frames a stack starts at: a script's or module's, or a thread's.
_PYTHON_MAIN = re.compile(r"^(<module>|_run_module_as_main|_run_code)$")
_PYTHON_THREAD = re.compile(r"^(_bootstrap|_bootstrap_inner|__bootstrap|__bootstrap_inner)$")


def _same_entry(native: ThreadDump, python: ThreadDump) -> bool:
    """The two halves do not start at different kinds of entry (a main thread's and a
    started thread's)."""
    n = next((f.function for f in reversed(native.frames) if f.native), "")
    p = python.frames[-1].function if python.frames else ""
    return not ((_NATIVE_THREAD.match(n) and _PYTHON_MAIN.match(p)) or (_NATIVE_MAIN.match(n) and _PYTHON_THREAD.match(p)))


def _python_after_entry(t: ThreadDump) -> ThreadDump:
    """One thread's ``bt`` with its ``py-bt`` read on after it: the Python frames follow the
    native entry point (``main``, ``_start``). They go where the interpreter runs them."""
    frames = t.frames
    k = len(frames)
    while k > 0 and not frames[k - 1].native:
        k -= 1
    if k == 0 or k == len(frames) or not (_NATIVE_MAIN.match(frames[k - 1].function) or _NATIVE_THREAD.match(frames[k - 1].function)):
        return t
    return _halves(replace(t, frames=frames[:k]), replace(t, frames=frames[k:])) or t


def _halves(native: ThreadDump, python: ThreadDump) -> ThreadDump | None:
    """``native`` and ``python`` as one thread (see ``_one_thread_in_two_halves``), or None."""
    if not native.frames or not python.frames or not native.frames[0].native:
        return None
    if any(f.native and f.file not in ("?", "<call>") for f in python.frames) or all(f.native for f in python.frames):
        return None
    if sum(f.native for f in native.frames) * 2 < len(native.frames) or not _same_entry(native, python):
        return None
    at = next((k for k, f in enumerate(native.frames) if f.native and _EVAL.match(f.function)), None)
    if at is None:
        return None
    shown = {(f.function, f.file, f.line) for f in python.frames if not f.native}
    rest = tuple(f for f in native.frames[at:] if f.native or (f.function, f.file, f.line) not in shown)
    return replace(native, name=native.name or python.name, frames=native.frames[:at] + python.frames + rest)


def _without_dumper(frames: tuple[Frame, ...]) -> tuple[Frame, ...]:
    """A thread that printed the dump itself (a SIGINT/SIGUSR1 handler calling
    traceback.extract_stack or a "dumpstacks" helper) has that code innermost, over
    the place the signal interrupted: the dumper's frames and the handler under them
    are dropped, so the wait they interrupted is what decides."""
    n = 0
    while n < len(frames) and n < 8 and (NATIVE_DUMPER if frames[n].native else DUMPER).match(frames[n].function):
        n += 1
    if n == 0 and len(frames) > 1 and not frames[0].native and SIGNAL_HANDLER.match(frames[0].function):
        return frames[1:]  # a signal handler on top of the code it interrupted
    if n and n < len(frames) and HANDLER.search(frames[n].function):
        n += 1
    return frames[n:] if 0 < n < len(frames) else frames


def _watchdog_ranks(b: Builder, out: list[ProcessDump]) -> None:
    # Ranks the paste shows only through the NCCL watchdog: one process each, waiting in
    # that collective (a rank whose stack is also pasted keeps its stack).
    dumped = {d.rank for d in out if d.rank is not None}
    for key, (pid, op, seq) in b.watchdog.items():
        if key is not None and key in dumped:
            continue
        # A Horovod stall line names the tensor, not a sequence number.
        frame = Frame(op, seq, None) if op.startswith("horovod:") else Frame(f"nccl:{op}", f"SeqNum {seq}", None)
        out.append(ProcessDump(pid, (ThreadDump("watchdog", "MainThread", (frame,)),), rank=key))
        b.report.frames += 1
        b.report.watchdog_only += 1
        if pid is not None and key is not None:
            b.report.ranks[pid] = key


def _shm_waiters(b: Builder, out: list[ProcessDump]) -> None:
    # A paste of vLLM's shm_broadcast wait lines and no stack: each process that logged
    # them waits on its shared-memory queue. Only then: next to real stacks, a process
    # known from one log line would stand out from a crowd in a collective and take the
    # suspect from the rank that is really stuck (the engine core waits on its workers).
    for pid, lines in b.shm_waits.items() if not out else ():
        if len(out) >= MAX_PROCESSES:
            break
        frame = Frame("wait", "vllm/distributed/device_communicators/shm_broadcast.py", None)
        out.append(ProcessDump(pid, (ThreadDump("shm_broadcast", "MainThread", (frame,)),)))
        b.report.frames += 1
        b.report.shm_wait_only += 1
        b.report.shm_wait_minutes = max(b.report.shm_wait_minutes, lines)


def _message_waiters(b: Builder, out: list[ProcessDump]) -> None:
    # A paste of a library's wait messages and no stack (torch's store-based barrier, a
    # file lock's retry lines): each process that logged them waits there. Next to real
    # stacks, the stacks say more; unless no thread of them waits in any call the table
    # knows (a Ctrl-C or error traceback cut above the wait, an error's C++ backtrace):
    # then the message names the wait the cut stack was in.
    if b.watchdog or b.horovod_missing is not None or not b.message_waits:
        return
    if out:
        _message_on_cut_stack(b, out)
        return
    for pid, (frame, what, lines) in b.message_waits.items():
        if len(out) >= MAX_PROCESSES:
            break
        out.append(ProcessDump(pid, (ThreadDump("log", "MainThread", (frame,)),)))
        b.report.frames += 1
        b.report.message_waits.append(f"{what} ({lines} line(s))")


def _message_on_cut_stack(b: Builder, out: list[ProcessDump]) -> None:
    if any(wait_of(t) is not None for p in out for t in p.threads):
        return  # the stacks show a wait of their own: they decide
    for i, p in enumerate(out):
        key = p.pid if p.pid in b.message_waits else (None if None in b.message_waits else next(iter(b.message_waits)))
        frame, what, lines = b.message_waits[key]
        threads = list(p.threads)
        at = next((k for k, t in enumerate(threads) if t.name == "MainThread"), 0)
        t = threads[at]
        threads[at] = ThreadDump(t.ident, t.name, (frame, *t.frames), t.active, t.owns_gil)
        out[i] = replace(p, threads=tuple(threads))
        b.report.frames += 1
        b.report.message_on_stack.append(f"{what} ({lines} line(s))")
        return  # the first process only: the one the paste is about


def _horovod_waiters(b: Builder, out: list[ProcessDump]) -> None:
    if b.horovod_missing is not None:
        op, tensor, missing = b.horovod_missing
        b.report.horovod_missing = (tensor, missing)
        if not b.watchdog:
            # Only the missing ranks are named: the ranks that did submit wait in the
            # collective, one process standing for all of them (their ranks unknown).
            out.append(ProcessDump(None, (ThreadDump("horovod", "MainThread", (Frame(op, tensor, None),)),)))
            b.report.frames += 1
