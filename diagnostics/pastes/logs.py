"""Log lines that say where a process waits without printing its stack: PyTorch's
NCCL watchdog timeouts, Horovod's stall warnings, vLLM's shared-memory broadcast
waits, torch's flight recorder, and vLLM's ``VLLM_TRACE_FUNCTION`` call log.

A watchdog line is one process per rank waiting in that collective at that sequence
number; the calls a trace log left open are the stack the process hung in. Both
become processes only at the end (see ``result``), where a rank's pasted stack wins.
"""

from __future__ import annotations

import re

from hangwatch.diagnostics.pastes.builder import Builder, Line
from hangwatch.diagnostics.pastes.patterns import (
    HOROVOD_OP, HOROVOD_STALL, MAX_FRAMES, MAX_PROCESSES, PID_IN_PREFIX, RANK_PREFIX, SHM_WAIT, TRACE_CALL,
    WATCHDOG,
)
from hangwatch.diagnostics.stacks import Frame


def watchdog_line(b: Builder, s: str, prefix: str, rank: re.Match[str] | None) -> None:
    m = WATCHDOG.search(s)
    if rank is None:
        rank = RANK_PREFIX.search(s)
    if m is None:
        # "[rank7]: Watchdog caught collective operation timeout:" with the WorkNCCL(...)
        # on the next line (a reporter re-wrapping the log).
        b.watchdog_pending = int(rank.group(1)) if rank else None
        return
    key = int(rank.group(1)) if rank else b.watchdog_pending
    b.watchdog_pending = None
    if key not in b.watchdog and len(b.watchdog) < MAX_PROCESSES:
        pid = PID_IN_PREFIX.search(prefix)
        b.watchdog[key] = (int(pid.group(1)) if pid else None, m.group(2).lower(), m.group(1) or "?")


def horovod_stall_line(b: Builder, s: str) -> bool:
    """Horovod's stall warning: each rank ready in a stalled collective is a process
    waiting in it (like a watchdog line); the ranks that never submitted it are the
    ones missing below the highest (the suspects)."""
    found = False
    for m in HOROVOD_STALL.finditer(s):
        before = s[max(0, m.start() - 304):m.start()].rstrip(" \t")[-300:]
        at = max(before.rfind(c) for c in " \t,[]") + 1
        name = before[at:]
        if not name:
            continue
        found = True
        mo = HOROVOD_OP.search(name)
        op = "horovod:" + (mo.group(1) or mo.group(2)).lower() if mo else "horovod:collective"
        if mo and mo.group(1):
            name = name[mo.end():]  # "allreduce.conv1.weight": the tensor is after the op
        ranks = [int(r) for r in m.group(2).replace(",", " ").split()][:MAX_PROCESSES]
        if m.group(1) == "missing":
            if b.horovod_missing is None:
                b.horovod_missing = (op, name, tuple(sorted(set(ranks))))
            continue
        for key in ranks:
            if key not in b.watchdog and len(b.watchdog) < MAX_PROCESSES:
                b.watchdog[key] = (None, op, name)
    return found


def trace_line(b: Builder, m: re.Match[str]) -> None:
    """One VLLM_TRACE_FUNCTION line: the open calls are kept as a stack."""
    kind, fn, path, line, caller, cpath, cline = m.groups()
    stack = b.trace if b.trace is not None else []
    b.trace = stack
    if kind == "Call to":
        if caller is None:
            pass  # (no caller written: the call alone)
        elif stack and stack[-1].function == caller:
            top = stack[-1]
            stack[-1] = Frame(top.function, top.file, int(cline))  # the caller's line now
        elif len(stack) < MAX_FRAMES:
            stack.append(Frame(caller, cpath.replace("\\", "/"), int(cline)))
        if len(stack) < MAX_FRAMES:
            stack.append(Frame(fn, path.replace("\\", "/"), int(line)))
    else:
        for k in range(len(stack) - 1, max(len(stack) - 64, -1), -1):
            if stack[k].function == fn:
                del stack[k:]
                break


def end_trace(b: Builder) -> None:
    stack, b.trace = b.trace, None
    if stack:
        b.traceback_thread("MainThread", stack)  # outermost first, like a traceback


#: Lines that libraries log (or raise) while a process waits, for pastes that hold no stack:
#: (a test on the line, the frame the wait would show on a stack, what waits). The frame is
#: one the primitive table (``primitives``) and the signatures know, so a paste of these
#: lines alone gets the family of that wait. A message names a library's wait in general
#: (torch's store-based barrier, filelock's retry loop), never one report's text.
WAIT_MESSAGES: tuple[tuple[re.Pattern[str], Frame, str], ...] = (
    # torch.distributed: the store-based barrier of init_process_group / new_group
    (re.compile(r"Waiting in store based barrier|Timed out initializing process group in store based barrier|"
                r"store_based_barrier_key:\d{1,9} \(world_size=\d{1,9}, worker_count=\d{1,9}"),
     Frame("_store_based_barrier", "torch/distributed/distributed_c10d.py", None), "torch's store-based barrier"),
    # NCCL's unique id fetched through the store for a new communicator
    (re.compile(r"retrieving ncclUniqueId from \[\d{1,9}\] via c10d key-value store|broadcastUniqueNCCLID"),
     Frame("c10d::ProcessGroupNCCL::broadcastUniqueNCCLID", "libtorch_cuda.so", None, native=True),
     "NCCL communicator setup (rank 0's unique id through the store)"),
    # ProcessGroupNCCL's watchdog after a collective timed out or failed (the lines it logs
    # around the WorkNCCL one, which a paste may have cut): that rank waited in a collective
    (re.compile(r"Some NCCL operations have failed or timed out|we are taking the entire process down|"
                r"Watchdog caught collective operation timeout"),
     Frame("c10d::ProcessGroupNCCL::WorkNCCL::wait", "libtorch_cuda.so", None, native=True),
     "a collective that timed out (ProcessGroupNCCL's watchdog)"),
    # the c10d store's client: connecting to the master, or a get/wait on a key
    (re.compile(r"client socket has timed out after \d{1,12}ms while trying to connect|TCP client failed to connect|"
                r"waitForInput: (?:poll for )?socket SocketImpl|Socket Timeout|wait timeout after \d{1,12}ms, keys:"),
     Frame("c10d::TCPStore::doWait", "libtorch_cpu.so", None, native=True), "the c10d store (TCPStore)"),
    # gloo's transport: a send/recv that never completed
    (re.compile(r"Timed out waiting \d{1,12}ms for (?:recv|send) operation to complete"),
     Frame("c10d::ProcessGroupGloo::recv", "libtorch_cpu.so", None, native=True), "a gloo send/recv"),
    # file locks: filelock's debug lines and huggingface_hub's progress line
    (re.compile(r"(?i)Attempting to acquire lock \d{1,20} on |Lock \d{1,20} not acquired on .{1,4000}, waiting|"
                r"Still waiting to acquire lock on |[Ww]aiting (?:for|on) (?:the )?(?:file ?)?lock(?:file)? "),
     Frame("acquire", "filelock/_api.py", None), "a file lock"),
    # the DataLoader's own timeout
    (re.compile(r"DataLoader timed out after \d{1,9} seconds"),
     Frame("_try_get_data", "torch/utils/data/dataloader.py", None), "a DataLoader worker's batch"),
)


def message_wait(b: Builder, s: str, prefix: str) -> None:
    """A line that says a library waits (``WAIT_MESSAGES``): kept per pid, used at the end
    only when the paste holds no stack (see ``result``)."""
    for rx, frame, what in WAIT_MESSAGES:
        if rx.search(s) is None:
            continue
        pid = PID_IN_PREFIX.search(prefix)
        key = int(pid.group(1)) if pid else (b.stream_pid if isinstance(b.stream_pid, int) else None)
        old = b.message_waits.get(key)
        if old is None and len(b.message_waits) < MAX_PROCESSES:
            b.message_waits[key] = (frame, what, 1)
        elif old is not None:
            b.message_waits[key] = (old[0], old[1], old[2] + 1)
        return


# -- steps of reader.STEPS ----------------------------------------------------
def wait_lines(b: Builder, ln: Line) -> bool:
    """An NCCL watchdog timeout, vLLM's shm_broadcast wait, or Horovod's stall warning."""
    s = ln.s
    if "Watchdog caught collective" in s or "WorkNCCL(" in s:
        watchdog_line(b, s, ln.prefix, ln.rank)
        return True
    if s[:2] == "No" and s.startswith(SHM_WAIT):
        # vLLM's MessageQueue waiting on its shared-memory ring for a minute at a time
        # ("(EngineCore pid=N) INFO ... [shm_broadcast.py:466] No available shared memory
        # broadcast block found in 60 seconds"): where that process waits, without a stack.
        pid = PID_IN_PREFIX.search(ln.prefix)
        key = int(pid.group(1)) if pid else (b.stream_pid if isinstance(b.stream_pid, int) else None)
        if key not in b.shm_waits and len(b.shm_waits) < MAX_PROCESSES:
            b.shm_waits[key] = 0
        if key in b.shm_waits:
            b.shm_waits[key] += 1
        return True
    return " ranks:" in s and horovod_stall_line(b, s)


def failed_collective(b: Builder, ln: Line) -> bool:
    s = ln.s
    if "Stack trace of the failed collective:" in s:
        # torch's flight recorder prints that rank's stack of the collective that timed
        # out ("#0 all_gather_into_tensor from /p/distributed_c10d.py:4186", vlm-training#26):
        # those frames are the rank's own stack, not another process.
        rank = ln.rank or RANK_PREFIX.search(s)
        b.new_process(header=True)
        if rank is not None:
            b.proc.rank = int(rank.group(1))  # type: ignore[union-attr]
        b.start_thread(None, "unknown", "MainThread")
        b.report.thread_headers -= 1  # no thread header was pasted
        return True
    return False


def trace_log(b: Builder, ln: Line) -> bool:
    """A VLLM_TRACE_FUNCTION line; any other line ends the trace log."""
    s = ln.s
    if (s[0] in "CR" and s.startswith(("Call to ", "Return from "))) or (s[0].isdigit() and (" Call to " in s or " Return from " in s)):
        mt = TRACE_CALL.match(s)
        if mt:
            trace_line(b, mt)
            return True
    if b.trace is not None:
        end_trace(b)
    return False
