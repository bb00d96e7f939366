"""The supervised process tree: who belongs to the run, and how much CPU each uses.

Membership: every descendant of the supervisor except the helpers it runs
itself (py-spy, nvidia-smi; see ``supervisor.tools``). Because the supervisor
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

from supervisor.capture import TreeProcess
from supervisor.tools import helper_pids


@dataclass(frozen=True, order=True)
class ProcKey:
    pid: int
    create_time: float

    @classmethod
    def of(cls, proc: psutil.Process) -> "ProcKey":
        return cls(proc.pid, proc.create_time())


def same_process(key: ProcKey) -> psutil.Process | None:
    """The live process ``key`` names, or None if it is gone or the pid was reused."""
    try:
        proc = psutil.Process(key.pid)
        if abs(proc.create_time() - key.create_time) > 0.01:
            return None
        return proc
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None


class ProcessTree:
    """Lists the tree under ``root_pid`` (default: this process), helpers excluded."""

    def __init__(self, root_pid: int | None = None, exclude: Callable[[], Iterable[int]] = helper_pids) -> None:
        self.root_pid = root_pid if root_pid is not None else os.getpid()
        self._exclude = exclude
        self._cache: dict[ProcKey, psutil.Process] = {}

    def members(self) -> list[psutil.Process]:
        """Live members (zombies included: they still need reaping), in a stable order."""
        excluded = set(self._exclude())
        try:
            root = psutil.Process(self.root_pid)
            direct = root.children(recursive=False)
        except psutil.NoSuchProcess:
            return []
        found: list[psutil.Process] = []
        stack = [p for p in direct if p.pid not in excluded]
        seen: set[int] = set()
        while stack:
            proc = stack.pop()
            if proc.pid in seen:
                continue
            seen.add(proc.pid)
            try:
                key = ProcKey.of(proc)
                children = proc.children(recursive=False)
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
            # Reuse the cached Process object: psutil keeps the previous
            # cpu_percent baseline on it, and it remembers the create time.
            found.append(self._cache.setdefault(key, proc))
            stack.extend(children)
        live = {ProcKey.of(p) for p in found}
        for key in [k for k in self._cache if k not in live]:
            del self._cache[key]
        found.sort(key=lambda p: p.pid)
        return found


class CpuMeter:
    """CPU use per process between two calls, in percent of one core.

    Computed from CPU-time deltas (user + system), the only measure that is
    right for processes that appear and vanish between ticks.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._last: dict[ProcKey, tuple[float, float]] = {}

    def measure(self, procs: Iterable[psutil.Process]) -> dict[int, float]:
        now = self._clock()
        current: dict[ProcKey, tuple[float, float]] = {}
        result: dict[int, float] = {}
        for proc in procs:
            try:
                key = ProcKey.of(proc)
                times = proc.cpu_times()
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
            total = times.user + times.system
            current[key] = (total, now)
            previous = self._last.get(key)
            if previous is None:
                # First sight: average over the process's life so far, a fair
                # first estimate that does not invent an idle reading.
                age = max(1e-3, time.time() - key.create_time)
                result[proc.pid] = 100.0 * total / age
            else:
                elapsed = max(1e-6, now - previous[1])
                result[proc.pid] = max(0.0, 100.0 * (total - previous[0]) / elapsed)
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
        return proc.cmdline()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return []


def _safe(fn: Callable[[int], int], pid: int) -> int:
    try:
        return fn(pid)
    except OSError:
        return -1
