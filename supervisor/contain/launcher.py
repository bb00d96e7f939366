"""Starting the trainer, and reaping what the tree leaves behind.

The only place that creates the trainer process. Each attempt runs:
* in its own session and process group, so a signal to the supervisor's
  terminal does not hit it behind our back and its group can be signalled;
* with a parent-death signal (SIGKILL), so a supervisor that dies (even by
  SIGKILL) takes the trainer with it. The kernel delivers it when the *thread*
  that forked exits, so ``launch`` must be called from the main thread. With the
  tree walk and an armed guardian it is SIGSTOP instead (``tree.LocalTree``): the
  root is held, alive, until the guardian kills it with all it started;
* with stdout/stderr teed into per-attempt log files and the console.

``set_child_subreaper`` makes the supervisor the reaper of every orphan in the
tree: processes that escape with setsid and a double fork come back to us, so
they stay visible, killable, and we collect their exit status (no zombies).
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Callable, Iterable, Mapping, Sequence

import psutil

from hangwatch.contract.private import open_private
from hangwatch.contract.ptracer import PR_SET_PTRACER
from hangwatch.supervisor.watch.proctree import ProcessTree
from hangwatch.contract.tools import helper_pids

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36

_libc = ctypes.CDLL(None, use_errno=True)


def set_child_subreaper() -> bool:
    """Become the reaper of orphaned descendants (Linux >= 3.4)."""
    if not sys.platform.startswith("linux"):
        return False
    return _libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0


class LaunchError(RuntimeError):
    """The trainer command could not be started (not found, not executable)."""


@dataclass
class TrainerProcess:
    pid: int
    create_time: float
    popen: subprocess.Popen
    stdout_path: Path
    stderr_path: Path
    _pumps: list[threading.Thread] = field(default_factory=list, repr=False)
    #: how the root was started, for the journal: {"mode": "cold"} or, through ``prewarm``, "warm"
    launch: dict[str, Any] = field(default_factory=lambda: {"mode": "cold"})

    def join_output(self, timeout: float) -> None:
        """Wait (bounded) for the output pumps to drain: a surviving grandchild
        holding the pipe must not hold up the supervisor."""
        for pump in self._pumps:
            pump.join(timeout=timeout)


def child_setup(cgroup_procs: str | None = None, death_signal: int = signal.SIGKILL) -> Callable[[], None]:
    """What the trainer's root runs between fork and exec (``preexec_fn``): the
    parent-death signal, the supervisor as its ptracer, then the attempt's cgroup.
    Shared by a cold ``launch`` and the warm process (``prewarm``), which joins its
    cgroup later, when used.

    The ptracer (Yama's ``PR_SET_PTRACER``, ``contract.ptracer``): under
    ``ptrace_scope=1`` the supervisor's py-spy, its child, may then attach to the root,
    which it could not as a sibling. It survives exec; where Yama is absent the call
    fails with EINVAL and changes nothing.

    ``death_signal`` SIGSTOP instead of SIGKILL (only while an armed guardian will kill
    the tree should we die, see ``launch``): the root stops, alive, at the instant of our
    death, so none of its descendants sees its parent die and reacts (a double fork of a
    bare worker into a new session, gone from the tree before the guardian looks)."""
    parent = os.getpid()
    cgroup_procs_path = os.fsencode(cgroup_procs) if cgroup_procs else None

    def arm_parent_death_signal() -> None:
        # Runs in the child between fork and exec: async-signal-safe calls only.
        _libc.prctl(PR_SET_PDEATHSIG, death_signal, 0, 0, 0)
        _libc.prctl(PR_SET_PTRACER, parent, 0, 0, 0)  # its answer does not matter: see above
        if os.getppid() != parent:
            # The supervisor died before the signal was armed: nobody will ever
            # deliver it, so do not start a trainer nobody watches.
            os._exit(127)
        if cgroup_procs_path is not None:
            # Into the attempt's cgroup before exec: nothing the trainer forks,
            # however fast, can be born outside it ("0" moves the writer).
            try:
                fd = os.open(cgroup_procs_path, os.O_WRONLY)
                os.write(fd, b"0")
                os.close(fd)
            except OSError:
                os.write(2, b"hangwatch: cannot join the attempt's cgroup; not starting the trainer\n")
                os._exit(127)

    return arm_parent_death_signal


def launch(
    argv: Sequence[str],
    env: Mapping[str, str],
    attempt_dir: Path,
    *,
    cwd: str | None = None,
    echo: bool = True,
    cgroup_procs: str | None = None,
    log_limit: Callable[[], int] = lambda: LOG_MAX_BYTES,
    death_signal: int = signal.SIGKILL,
) -> TrainerProcess:
    """Start ``argv``; with ``cgroup_procs`` (a cgroup's ``cgroup.procs`` path) the
    child moves itself into that cgroup before it execs. ``log_limit`` gives the
    cap of each log file (``CappedLog``), read at every write. ``death_signal``: the
    root's parent-death signal (``child_setup``)."""
    logs = open_logs(attempt_dir)
    try:
        popen = subprocess.Popen(
            list(argv),
            env=dict(env),
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            preexec_fn=child_setup(cgroup_procs, death_signal),
        )
    except BaseException as exc:
        logs.close()
        if isinstance(exc, FileNotFoundError):
            raise LaunchError(f"cannot start {argv[0]!r}: command not found") from exc
        if isinstance(exc, PermissionError):
            raise LaunchError(f"cannot start {argv[0]!r}: permission denied (is it executable?)") from exc
        if isinstance(exc, OSError):
            raise LaunchError(f"cannot start {argv[0]!r}: {exc}") from exc
        raise

    try:
        create_time = psutil.Process(popen.pid).create_time()
    except psutil.NoSuchProcess:
        create_time = 0.0
    return tee(popen, create_time, logs, echo=echo, log_limit=log_limit)


@dataclass
class AttemptLogs:
    """An attempt's stdout.log and stderr.log, open for ``tee``."""

    stdout_path: Path
    stderr_path: Path
    sinks: list[BinaryIO]

    def close(self) -> None:
        for sink in self.sinks:
            sink.close()


def open_logs(attempt_dir: Path) -> AttemptLogs:
    """Open (append) the attempt's log files; raises ``LaunchError``."""
    attempt_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    paths = (attempt_dir / "stdout.log", attempt_dir / "stderr.log")
    try:
        # O_NOFOLLOW, 0600 whatever the umask: the logs hold whatever the trainer prints (tokens too).
        # Read-write: CappedLog cuts the middle out in place.
        sinks = [os.fdopen(open_private(p, os.O_RDWR | os.O_APPEND | os.O_CREAT), "ab", buffering=0) for p in paths]
    except OSError as exc:
        raise LaunchError(f"cannot open the attempt's log files in {attempt_dir}: {exc}") from exc
    return AttemptLogs(paths[0], paths[1], sinks)


def tee(popen: subprocess.Popen, create_time: float, logs: AttemptLogs, *, echo: bool = True,
        log_limit: Callable[[], int] = lambda: LOG_MAX_BYTES) -> TrainerProcess:
    """Pump a started trainer's stdout/stderr pipes into the attempt's logs and the console.
    A cold ``launch`` and a warm start (``prewarm``) both end here, so their logs are alike."""
    assert popen.stdout is not None and popen.stderr is not None
    pumps = [
        _pump(popen.stdout, logs.sinks[0], sys.stdout.buffer if echo else None, "stdout", log_limit),
        _pump(popen.stderr, logs.sinks[1], sys.stderr.buffer if echo else None, "stderr", log_limit),
    ]
    return TrainerProcess(popen.pid, create_time, popen, logs.stdout_path, logs.stderr_path, pumps)


#: default per-attempt cap of each of stdout.log and stderr.log (--log-max-bytes)
LOG_MAX_BYTES = 256 * 1024 * 1024
CUT_MARKER = b"\n[hangwatch: output cut here to keep this log under --log-max-bytes; the newest output follows]\n"


class CappedLog:
    """An attempt's log file that keeps the head and the most recent tail under a cap.

    Below ``limit()`` bytes it is a plain copy. When a write would pass the cap,
    the middle is dropped in place: the first half of the cap stays (how the
    run started), then ``CUT_MARKER``, then the newest quarter of the cap, and
    writing goes on after it. So the file stays under the cap (the tail is
    re-cut each time it fills), its end is always the latest output (what an
    incident bundle copies), and each byte is copied at most once more.
    ``limit`` is read per write: the disk watch lowers it when space runs out.
    """

    MIN_BYTES = 4096

    def __init__(self, sink: BinaryIO, limit: Callable[[], int]) -> None:
        self._sink = sink
        self._fd = sink.fileno()
        self._limit = limit
        self.size = os.fstat(self._fd).st_size
        self._head: int | None = None  # end of the original head once a cut was made
        self.cuts = 0

    def write(self, chunk: bytes) -> None:
        cap = max(self.MIN_BYTES, self._limit())
        if self._head is None and self.size < cap // 2 < self.size + len(chunk):
            fill = chunk[: cap // 2 - self.size]  # the head is the run's first output, even from one big read
            self._sink.write(fill)
            self.size += len(fill)
            chunk = chunk[len(fill):]
        if self.size + len(chunk) > cap:
            tail = cap // 4
            chunk = chunk[-tail:]
            self._cut(cap // 2, tail - len(chunk))
        self._sink.write(chunk)
        self.size += len(chunk)

    def _cut(self, head: int, keep: int) -> None:
        """Keep bytes [0, head) and the last ``keep`` bytes, with the marker between."""
        fd = self._fd
        head = min(head, self._head if self._head is not None else self.size)
        src, dst = max(head, self.size - keep), head + len(CUT_MARKER)
        flags = fcntl.fcntl(fd, fcntl.F_GETFL)
        fcntl.fcntl(fd, fcntl.F_SETFL, flags & ~os.O_APPEND)  # pwrite ignores its offset under O_APPEND
        try:
            os.pwrite(fd, CUT_MARKER, head)
            # Forward copy in chunks; dst < src, so nothing is overwritten before it is read.
            while src < self.size:
                block = os.pread(fd, min(1 << 20, self.size - src), src)
                if not block:
                    break
                os.pwrite(fd, block, dst)
                src += len(block)
                dst += len(block)
            os.ftruncate(fd, dst)
        finally:
            fcntl.fcntl(fd, fcntl.F_SETFL, flags)
        self.size, self._head = dst, head
        self.cuts += 1


def _pump(source: BinaryIO, sink: BinaryIO, console: BinaryIO | None, name: str,
          limit: Callable[[], int] = lambda: LOG_MAX_BYTES) -> threading.Thread:
    def run() -> None:
        out = console
        fd = source.fileno()
        with sink:
            log = CappedLog(sink, limit)
            while True:
                try:
                    chunk = os.read(fd, 65536)
                except OSError:
                    break
                if not chunk:
                    break
                try:
                    log.write(chunk)
                except OSError:
                    pass  # a full disk loses log lines, never the run
                if out is not None:
                    try:
                        out.write(chunk)
                        out.flush()
                    except (OSError, ValueError):
                        out = None  # a closed console stops the echo, not the log
        source.close()

    thread = threading.Thread(target=run, name=f"pump-{name}", daemon=True)
    thread.start()
    return thread


class Reaper:
    """Collects the exit status of our direct children that belong to the tree.

    Only pid-specific ``waitpid`` calls, never ``waitpid(-1)``: that would also
    steal the status of helper tools whose own ``subprocess`` waits on them.
    The candidates come from the tree's latest /proc scan, so reaping costs no
    scan of its own; a child born since is reaped after the next scan.
    """

    #: statuses kept (the trainer's is read on the tick it is reaped; the rest are orphans')
    KEEP = 256

    def __init__(self, tree: ProcessTree, exclude: Callable[[], Iterable[int]] = helper_pids) -> None:
        self._tree = tree
        self._exclude = exclude
        self.statuses: dict[int, int] = {}

    def reap(self, also: Iterable[int] = ()) -> None:
        me = os.getpid()
        children = {st.pid for st in self._tree.last_stats.values() if st.ppid == me}
        for pid in children.union(also) - set(self._exclude()):
            try:
                done, status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                continue  # not our child (any more): a status already collected for it stays valid
            if done:
                self.statuses[pid] = os.waitstatus_to_exitcode(status)
            else:
                # A live child of ours holds this pid now: a status kept for it was
                # a previous process's (pids wrap over days of forking), and must
                # not end the new trainer's attempt as if it had exited.
                self.statuses.pop(pid, None)
        while len(self.statuses) > self.KEEP:
            del self.statuses[next(iter(self.statuses))]  # oldest first: orphans nobody asks about

    def exit_code(self, pid: int) -> int | None:
        """Like Popen.returncode: -N for death by signal N."""
        return self.statuses.get(pid)
