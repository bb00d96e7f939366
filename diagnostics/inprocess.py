"""In-process stacks: the capture's fallback where py-spy is refused or times out.

A trainer process that imports ``hangwatch.trainer`` (and the engine worker, and with
``--in-process-stacks all`` every Python process) has registered a ``faulthandler``
dump on a signal into its own file of the attempt dir (``contract.stackdump``). For
each process py-spy could not dump, ``collect``:

1. proves the process is the one that registered, and ours: it is a member of the
   supervised tree (pid and create time, checked as everywhere else), a pidfd pins
   it, its file is a regular file (never through a link) whose header names its pid
   and start time, and ``/proc/PID/status`` says it catches the signal (a real-time
   signal it does not catch would end it);
2. sends the signal, once, through the pidfd, to every such process at once;
3. waits, within the deadline, until what was appended to each file stops growing,
   reads it (size-capped) and parses it with the pasted-dump reader, which knows
   faulthandler's format.

Each answer is an ``InProcessResult``: a ``ProcessDump`` (the thread that is the main
thread, named in the header, is called ``MainThread``), or why there is none. Pure
apart from the files, ``/proc`` and the signal; the clock, the sleep and the sender
are injected, so a test drives the deadline with a fake clock.

What it costs: one signal per process; Python frames only (no native frames: the
handler walks the interpreter's thread states); it needs the process to return to
user space to run the handler (a thread in uninterruptible sleep delays it); and a
process that does not import hangwatch is covered only with ``--in-process-stacks all``.
"""

from __future__ import annotations

import os
import signal
import stat
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Sequence

from hangwatch.contract.capture import TreeProcess
from hangwatch.contract.stackdump import MAX_HEADER_BYTES, Header, catches, read_header, signal_name, stack_file, start_ticks
from hangwatch.diagnostics.errors import InputError
from hangwatch.diagnostics.pastes import read_text
from hangwatch.diagnostics.proctable import verify
from hangwatch.diagnostics.pyspy import DumpResult
from hangwatch.diagnostics.stacks import ProcessDump, ThreadDump

#: py-spy problems after which the process's own dump is asked for (not_python and gone: no use).
FALLBACK_PROBLEMS = frozenset({"ptrace_denied", "timeout", "missing", "failed", "unparseable"})
#: The most read of one dump: faulthandler writes at most 100 threads of 100 frames, a few
#: hundred KiB; a file grown past this is not a dump of ours.
MAX_DUMP_BYTES = 4 << 20
#: A dump is complete when the file has stopped growing for this long (faulthandler writes it
#: in one go from the signal handler, in microseconds to milliseconds).
SETTLE_S = 0.1
POLL_S = 0.02

Send = Callable[[int, int], None]  # (pidfd, signal)


@dataclass(frozen=True)
class InProcessResult(DumpResult):
    """One process's own dump, or why there is none (``problem``: unregistered, unreadable,
    stale, not_caught, gone, send_failed, no_dump, unparseable); a py-spy result that also
    names the signal that asked for it."""

    signal: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {**super().to_json(), "signal": self.signal}


@dataclass
class _Target:
    tp: TreeProcess
    fd: int  # the stack file, read-only
    pidfd: int | None
    header: Header
    offset: int
    size: int = -1
    stable_since: float | None = None
    sent: bool = False


def collect(tree: Sequence[TreeProcess], attempt_dir: Path | None, round_no: int, deadline: float, *,
            clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep,
            send: Send | None = None) -> list[InProcessResult]:
    """Each process's own dump, asked for by one signal each, bounded by ``deadline`` (``clock``'s)."""
    started = clock()
    results: list[InProcessResult] = []
    targets: list[_Target] = []
    for tp in tree:
        got = _prepare(tp, attempt_dir, round_no)
        (targets if isinstance(got, _Target) else results).append(got)  # type: ignore[arg-type]
    try:
        for target in targets:
            problem = _send(target, send or _pidfd_send)
            if problem is not None:
                results.append(_failed(target, round_no, 0.0, "send_failed", problem))
        waiting = [t for t in targets if t.sent]
        results.extend(_wait(waiting, round_no, deadline, started, clock, sleep))
    finally:
        for target in targets:
            _close(target)
    results.sort(key=lambda r: r.pid)
    return results


def _failed(target: _Target, round_no: int, duration: float, problem: str, message: str) -> InProcessResult:
    return InProcessResult(target.tp.pid, round_no, "", duration, problem=problem, message=message,
                           signal=signal_name(target.header.signal))


def _prepare(tp: TreeProcess, attempt_dir: Path | None, round_no: int) -> _Target | InProcessResult:
    """The process, proven to be the one that registered its dump; or why it cannot be asked."""
    def no(problem: str, message: str) -> InProcessResult:
        return InProcessResult(tp.pid, round_no, "", 0.0, problem=problem, message=message)

    if attempt_dir is None:
        return no("unregistered", "no attempt directory to find its stack file in")
    path = stack_file(attempt_dir, tp.pid)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return no("unregistered", "it registered no in-process dump (it does not import hangwatch.trainer; "
                  "`hangwatch run --in-process-stacks all` covers every Python process)")
    except OSError as exc:
        return no("unreadable", f"{path.name}: {exc.strerror or exc} (a link or not ours: not read)")
    pidfd: int | None = None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _Refused("unreadable", f"{path.name} is not a regular file")
        header = read_header(os.pread(fd, MAX_HEADER_BYTES, 0).split(b"\n", 1)[0].decode("ascii", "replace"))
        if header is None or header.pid != tp.pid:
            raise _Refused("unreadable", f"{path.name} has no header of this process")
        pidfd = _pidfd(tp.pid)
        # The pidfd pins the process; checked after it is taken, the identity cannot change under us.
        if verify(tp) is None or start_ticks(tp.pid) != header.start_ticks:
            raise _Refused("stale", f"{path.name} was written by another process with pid {tp.pid} (an earlier one, "
                           "or this one is no longer the tree's)")
        if not catches(tp.pid, header.signal):
            raise _Refused("not_caught", f"it no longer catches {signal_name(header.signal)} (exec'd since it "
                           "registered?): not sent, the signal would end it")
        return _Target(tp, fd, pidfd, header, offset=st.st_size)
    except _Refused as refused:
        _close_fds(fd, pidfd)
        return no(refused.problem, refused.message)
    except OSError as exc:
        _close_fds(fd, pidfd)
        return no("gone", f"{exc.strerror or exc}")


class _Refused(Exception):
    def __init__(self, problem: str, message: str) -> None:
        super().__init__(message)
        self.problem, self.message = problem, message


def _pidfd(pid: int) -> int | None:
    """A pidfd for ``pid`` (Linux 5.3+); None where there is none (then the pid is signalled)."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError) as exc:
        if isinstance(exc, ProcessLookupError):
            raise
        return None


def _send(target: _Target, send: Send) -> str | None:
    try:
        if target.pidfd is not None:
            send(target.pidfd, target.header.signal)
        else:
            os.kill(target.tp.pid, target.header.signal)
    except OSError as exc:
        return f"{signal_name(target.header.signal)} not delivered: {exc.strerror or exc}"
    target.sent = True
    return None


def _pidfd_send(pidfd: int, number: int) -> None:
    signal.pidfd_send_signal(pidfd, number)


def _wait(targets: list[_Target], round_no: int, deadline: float, started: float, clock: Callable[[], float],
          sleep: Callable[[float], None]) -> list[InProcessResult]:
    """Poll the files until each dump has settled or ``deadline`` passes."""
    out: list[InProcessResult] = []
    pending = list(targets)
    while pending:
        now = clock()
        for target in list(pending):
            if _settled(target, now):
                pending.remove(target)
                out.append(_read(target, round_no, now - started))
        if not pending:
            break
        if now >= deadline:
            for target in pending:
                if target.size > target.offset:  # began but still growing: what there is
                    out.append(_read(target, round_no, now - started))
                else:
                    out.append(_failed(target, round_no, now - started, "no_dump",
                                       f"no dump within {now - started:.1f} s of {signal_name(target.header.signal)} "
                                       "(the process may be in uninterruptible sleep, or stopped)"))
            break
        sleep(min(POLL_S, max(0.0, deadline - now)))
    return out


def _settled(target: _Target, now: float) -> bool:
    try:
        size = os.fstat(target.fd).st_size
    except OSError:
        return False
    if size != target.size:
        target.size, target.stable_since = size, now
        return False
    return size > target.offset and target.stable_since is not None and now - target.stable_since >= SETTLE_S


def _read(target: _Target, round_no: int, duration: float) -> InProcessResult:
    length = min(max(0, target.size - target.offset), MAX_DUMP_BYTES)
    try:
        data = os.pread(target.fd, length, target.offset)
    except OSError as exc:
        return _failed(target, round_no, duration, "unreadable", f"{exc.strerror or exc}")
    text = data.decode("utf-8", "backslashreplace")
    try:
        dump = parse_dump(text, target.header, target.tp.pid, round_no)
    except InputError as exc:
        return replace(_failed(target, round_no, duration, "unparseable", str(exc)), raw=text)
    return InProcessResult(target.tp.pid, round_no, text, duration, dump=dump, signal=signal_name(target.header.signal))


def parse_dump(text: str, header: Header | None, pid: int, round_no: int = 1) -> ProcessDump:
    """One faulthandler dump of process ``pid`` as a ``ProcessDump``: every thread, the one the
    header names as the main thread called ``MainThread``. ``InputError`` if it holds no stack."""
    report = read_text(text, source=f"in-process dump of pid {pid}")
    main = header.main_thread if header is not None else None
    threads: list[ThreadDump] = []
    for process in report.processes:
        for thread in process.threads:
            name = "MainThread" if main is not None and str(thread.ident).lower() == main else thread.name
            threads.append(replace(thread, name=name))
    if not threads:
        raise InputError(f"in-process dump of pid {pid}: no thread in it")
    threads.sort(key=lambda th: (th.name != "MainThread", th.name, th.ident))
    python = header.python if header is not None else ""
    return ProcessDump(pid, tuple(threads), python=python, round=round_no)


def as_pyspy_json(dump: ProcessDump) -> list[dict[str, Any]]:
    """``dump`` in ``py-spy dump --json``'s shape, so that a bundle's reader, replay and the
    report read an in-process dump like any other (``stacks/round-N/pid-P.json``)."""
    return [{
        "pid": dump.pid,
        "thread_id": t.ident,
        "thread_name": t.name,
        "active": t.active,
        "owns_gil": t.owns_gil,
        "frames": [{"name": f.function, "filename": f.file, "short_filename": f.short_file, "line": f.line,
                    "module": None} for f in t.frames],
    } for t in dump.threads]


def _close(target: _Target) -> None:
    _close_fds(target.fd, target.pidfd)


def _close_fds(*fds: int | None) -> None:
    for fd in fds:
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass
