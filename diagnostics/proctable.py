"""The process table of the tree, kernel-side waits included, and SIGCONT.

Every process is identified by pid plus create time (``TreeProcess``): a pid
reused by an unrelated process after the tree died must never be signalled or
reported as the trainer.
"""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass
from typing import Any, Sequence

import psutil

from hangwatch.contract.redact import redact_argv
from hangwatch.contract.terminal import one_line  # a process sets its own command line: a newline forged rows
from hangwatch.contract.capture import TreeProcess
from hangwatch.contract.procid import MAX_CMDLINE, ProcKey, capped_argv, read_cmdline, same_process

_MAX_TASKS = 256


def verify(tp: TreeProcess) -> psutil.Process | None:
    """The live process behind ``tp``, or None when it is gone, reused or unverifiable."""
    return same_process(ProcKey(tp.pid, tp.create_time))


def resume(tree: Sequence[TreeProcess]) -> list[int]:
    """SIGCONT every verified tree process that is stopped; returns their pids.

    py-spy stops its target while reading it and a py-spy killed at its timeout
    can leave it stopped (py-spy#390, #416). We are about to kill the tree
    anyway, but a stopped process ignores SIGTERM until continued, which would
    turn a graceful stop into a SIGKILL. A running process gets no signal: in
    observe-only mode (``--on-hang observe``) the capture must signal nothing.
    """
    stopped = []
    for tp in tree:
        proc = verify(tp)
        if proc is None:
            continue
        try:
            if proc.status() not in (psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP):
                continue
            stopped.append(tp.pid)
            os.kill(tp.pid, signal.SIGCONT)
        except (ProcessLookupError, psutil.NoSuchProcess, PermissionError):
            pass  # gone between the check and the signal: nothing to resume
    return stopped


@dataclass(frozen=True)
class ProcessRow:
    pid: int
    ppid: int
    pgid: int | None
    sid: int | None
    name: str
    state: str
    wchan: str
    cpu_user_s: float
    cpu_system_s: float
    rss_bytes: int
    num_threads: int
    create_time: float
    cmdline: tuple[str, ...]
    kernel_stack: str | None
    tasks: tuple[dict[str, Any], ...]
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "pid": self.pid,
            "ppid": self.ppid,
            "pgid": self.pgid,
            "sid": self.sid,
            "name": self.name,
            "state": self.state,
            "wchan": self.wchan,
            "cpu_user_s": self.cpu_user_s,
            "cpu_system_s": self.cpu_system_s,
            "rss_bytes": self.rss_bytes,
            "num_threads": self.num_threads,
            "create_time": self.create_time,
            "cmdline": list(self.cmdline),
            "kernel_stack": self.kernel_stack,
            "tasks": list(self.tasks),
            "error": self.error,
        }


def process_table(tree: Sequence[TreeProcess], cmdline_limit: int = MAX_CMDLINE) -> list[dict[str, Any]]:
    """One row per tree process; a vanished process keeps a row saying so. Each command line
    is read up to ``cmdline_limit`` bytes."""
    rows = []
    for tp in tree:
        proc = verify(tp)
        if proc is None:
            rows.append({**tp.to_json(), "cmdline": redact_argv(capped_argv(tp.cmdline, cmdline_limit)), "state": "gone", "error": "process gone or pid reused"})
            continue
        try:
            rows.append(_row(tp, proc, cmdline_limit).to_json())
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            rows.append({**tp.to_json(), "cmdline": redact_argv(capped_argv(tp.cmdline, cmdline_limit)), "state": "gone", "error": "exited during capture"})
        except psutil.AccessDenied as exc:
            rows.append({**tp.to_json(), "cmdline": redact_argv(capped_argv(tp.cmdline, cmdline_limit)), "state": "?", "error": f"access denied: {exc}"})
    return rows


def _row(tp: TreeProcess, proc: psutil.Process, cmdline_limit: int) -> ProcessRow:
    with proc.oneshot():
        times = proc.cpu_times()
        return ProcessRow(
            pid=tp.pid,
            ppid=proc.ppid(),
            pgid=_safe(os.getpgid, tp.pid),
            sid=_safe(os.getsid, tp.pid),
            name=proc.name(),
            state=_stat_state(tp.pid) or proc.status(),
            wchan=_read(f"/proc/{tp.pid}/wchan") or "",
            cpu_user_s=times.user,
            cpu_system_s=times.system,
            rss_bytes=proc.memory_info().rss,
            num_threads=proc.num_threads(),
            create_time=proc.create_time(),
            cmdline=tuple(redact_argv(_cmdline(tp, cmdline_limit))),
            kernel_stack=_read(f"/proc/{tp.pid}/stack"),
            tasks=tuple(_tasks(tp.pid)),
        )


def _cmdline(tp: TreeProcess, limit: int) -> list[str]:
    """Read capped (``read_cmdline``): a process points its command line at as much of its own
    memory as it likes; psutil read all of it, and redacting it outran the capture's deadline."""
    try:
        return read_cmdline(tp.pid, limit)
    except OSError:
        return capped_argv(tp.cmdline, limit)  # exited since it was verified: the supervisor's snapshot


def _tasks(pid: int) -> list[dict[str, Any]]:
    """Per-thread kernel view: name, state letter and wait channel (where a
    thread sleeps in the kernel: futex_wait_queue, do_epoll_wait, ...)."""
    out = []
    try:
        tids = sorted(int(t) for t in os.listdir(f"/proc/{pid}/task"))[:_MAX_TASKS]
    except OSError:
        return out
    for tid in tids:
        out.append(
            {
                "tid": tid,
                "comm": (_read(f"/proc/{pid}/task/{tid}/comm") or "").strip(),
                "state": _stat_state(pid, tid) or "?",
                "wchan": _read(f"/proc/{pid}/task/{tid}/wchan") or "",
            }
        )
    return out


def _stat_state(pid: int, tid: int | None = None) -> str | None:
    path = f"/proc/{pid}/task/{tid}/stat" if tid else f"/proc/{pid}/stat"
    stat = _read(path)
    if not stat:
        return None
    # The command name may contain spaces and parentheses: the state follows the last ')'.
    rest = stat.rsplit(")", 1)[-1].split()
    return rest[0] if rest else None


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return None


def _safe(fn, pid: int) -> int | None:
    try:
        return fn(pid)
    except OSError:
        return None


def render_table(rows: Sequence[dict[str, Any]]) -> str:
    header = f"{'PID':>7} {'PPID':>7} {'PGID':>7} {'SID':>7} S {'WCHAN':<22} {'CPU_S':>8} {'RSS_MB':>8} {'THR':>4}  CMD"
    lines = [header]
    for r in rows:
        cpu = (r.get("cpu_user_s") or 0) + (r.get("cpu_system_s") or 0)
        lines.append(
            f"{r['pid']:>7} {r.get('ppid', ''):>7} {str(r.get('pgid', '')):>7} {str(r.get('sid', '')):>7} "
            f"{r.get('state', '?')[:1]} {(r.get('wchan') or '-')[:22]:<22} {cpu:>8.1f} "
            f"{(r.get('rss_bytes') or 0) / 2**20:>8.1f} {r.get('num_threads', 0):>4}  {one_line(' '.join(r.get('cmdline') or []))[:300]}"
        )
    return "\n".join(lines) + "\n"
