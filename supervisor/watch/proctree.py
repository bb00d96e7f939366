"""The supervised process tree: who belongs to the run, and how much CPU each uses.

Membership: every descendant of the supervisor except the helpers it runs
itself (py-spy, nvidia-smi; see ``hangwatch.contract.tools``). Because the supervisor
is a child subreaper, a process that escapes with setsid and a double fork is
re-parented to the supervisor, not to init, so it stays in this tree.

Identity is pid plus create time (``ProcKey``): a pid alone can be reused by
an unrelated process between two looks, and we must never signal a stranger.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Callable, Iterable

import psutil

from hangwatch.contract.capture import TreeProcess
from hangwatch.contract.procid import read_cmdline
from hangwatch.contract.tools import helper_pids


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class ProcStat:
    """What one read of /proc/PID/stat says about a process."""

    pid: int
    ppid: int
    state: str
    cpu_ticks: int  # utime + stime
    start_ticks: int  # since boot; with the boot time, the create time psutil reports


def scan_proc() -> dict[int, ProcStat]:
    """Every process on the machine, from one pass over /proc.

    One pass per tick is the whole cost of tree discovery: walking the tree with
    psutil's ``children()`` rescans /proc once per node, which for a 64-process
    tree was 60x slower (see scripts/bench_supervisor.py).
    """
    stats: dict[int, ProcStat] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as handle:
                data = handle.read()
        except OSError:
            continue  # exited since listdir
        # comm (field 2) may hold spaces and parentheses: split after the last ')'.
        fields = data[data.rindex(b")") + 2 :].split()
        pid = int(name)
        stats[pid] = ProcStat(pid, int(fields[1]), fields[0].decode(), int(fields[11]) + int(fields[12]), int(fields[19]))
    return stats


class ProcessTree:
    """Lists the tree under ``root_pid`` (default: this process), helpers excluded."""

    def __init__(self, root_pid: int | None = None, exclude: Callable[[], Iterable[int]] = helper_pids,
                 source: Callable[[], Iterable[int]] | None = None) -> None:
        self.root_pid = root_pid if root_pid is not None else os.getpid()
        self._exclude = exclude
        #: where membership comes from besides the walk: the attempt cgroup's pids
        #: (``cgroup.AttemptCgroup.pids``), which no fork or setsid can leave
        self.source = source
        self._cache: dict[tuple[int, int], psutil.Process] = {}
        self.last_stats: dict[int, ProcStat] = {}

    def members(self) -> list[psutil.Process]:
        """Live members (zombies included: they still need reaping), ordered by pid."""
        stats = scan_proc()
        self.last_stats = stats
        excluded = set(self._exclude())
        children: dict[int, list[int]] = {}
        for st in stats.values():
            children.setdefault(st.ppid, []).append(st.pid)
        found: set[int] = set()
        if self.source is not None:
            found = {p for p in self.source() if p in stats and p not in excluded}
        # The walk too, with a source: a process that moved itself out of the attempt's cgroup
        # (as root: ``systemd-run --scope``, a tool writing another ``cgroup.procs``) is out of
        # ``cgroup.kill``'s reach, but still our descendant (we are its subreaper). With the
        # cgroup alone it was no member: the kill never saw it and it outlived the run.
        stack = [p for p in children.get(self.root_pid, []) if p not in excluded]
        walked: set[int] = set()
        while stack:
            pid = stack.pop()
            if pid in walked:
                continue
            walked.add(pid)
            stack.extend(children.get(pid, []))
        found |= walked
        procs = []
        live_keys = set()
        for pid in sorted(found):
            key = (pid, stats[pid].start_ticks)
            live_keys.add(key)
            proc = self._cache.get(key)
            if proc is None:
                try:
                    # Cached per (pid, start time): psutil.Process records the create
                    # time once, and send_signal re-checks it, so a cached object can
                    # never signal a process that reused the pid.
                    proc = self._cache[key] = psutil.Process(pid)
                except psutil.NoSuchProcess:
                    continue
            procs.append(proc)
        for key in [k for k in self._cache if k not in live_keys]:
            del self._cache[key]
        return procs


class CpuMeter:
    """CPU use per process between two calls, in percent of one core.

    Computed from CPU-time deltas (user + system), the only measure that is
    right for processes that appear and vanish between ticks. Reads the stats
    of the tree's last scan, so it costs no extra system calls.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._last: dict[tuple[int, int], tuple[int, float]] = {}
        self._boot = psutil.boot_time()  # read once: psutil rereads /proc/stat per call

    def measure(self, pids: Iterable[int], stats: dict[int, ProcStat]) -> dict[int, float]:
        now = self._clock()
        current: dict[tuple[int, int], tuple[int, float]] = {}
        result: dict[int, float] = {}
        boot = self._boot
        for pid in pids:
            st = stats.get(pid)
            if st is None:
                continue
            key = (pid, st.start_ticks)
            current[key] = (st.cpu_ticks, now)
            previous = self._last.get(key)
            if previous is None:
                # First sight: average over the process's life so far, a fair
                # first estimate that does not invent an idle reading.
                age = max(1e-3, time.time() - (boot + st.start_ticks / CLOCK_TICKS))
                result[pid] = 100.0 * (st.cpu_ticks / CLOCK_TICKS) / age
            else:
                elapsed = max(1e-6, now - previous[1])
                result[pid] = max(0.0, 100.0 * ((st.cpu_ticks - previous[0]) / CLOCK_TICKS) / elapsed)
        self._last = current
        return result


def describe(proc: psutil.Process) -> TreeProcess | None:
    """A snapshot for journals and capture; None when the process vanished."""
    try:
        with proc.oneshot():
            pid = proc.pid
            return TreeProcess(
                pid=pid,
                create_time=proc.create_time(),
                ppid=proc.ppid(),
                pgid=_safe(os.getpgid, pid),
                sid=_safe(os.getsid, pid),
                name=proc.name(),
                cmdline=tuple(_cmdline(proc)),
            )
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None


def _cmdline(proc: psutil.Process) -> list[str]:
    try:
        return read_cmdline(proc.pid)  # capped: a process sizes its own (psutil read 256 MiB whole)
    except OSError:
        return []


def _safe(fn: Callable[[int], int], pid: int) -> int:
    try:
        return fn(pid)
    except OSError:
        return -1
