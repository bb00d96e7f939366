"""Process identity: "is this still the process we mean?", decided once for all of hangwatch.

A pid alone is not an identity: pids are reused. A process is named by its pid
plus its create time (``ProcKey``), and we only ever signal a process whose
key still matches.

Two rules every caller shares:

* **Create-time slack** is ``CREATE_TIME_SLACK`` (50 ms). psutil derives the
  create time from the boot time plus the start in clock ticks (10 ms), so two
  readings of one process agree to well under that; a reused pid would have to
  be handed out again within 50 ms of the first start to fool it.
* **AccessDenied** means the process *exists* but its identity cannot be
  verified. Existence questions (``pid_exists``, ``is_running``) answer yes, so
  nothing is swept or reported dead that may still be there; identity
  questions (``same_process``) answer no, so nothing unverified is signalled.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass
from typing import Any, Mapping

import psutil

CREATE_TIME_SLACK = 0.05


@dataclass(frozen=True, order=True)
class ProcKey:
    pid: int
    create_time: float

    @classmethod
    def of(cls, proc: psutil.Process) -> "ProcKey":
        return cls(proc.pid, proc.create_time())

    def to_json(self) -> dict[str, Any]:
        return {"pid": self.pid, "create_time": self.create_time}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "ProcKey":
        return cls(int(data["pid"]), float(data["create_time"]))


def same_start(create_time: float, expected: float) -> bool:
    return abs(create_time - expected) <= CREATE_TIME_SLACK


def same_process(key: ProcKey) -> psutil.Process | None:
    """The live process ``key`` names; None if it is gone, the pid was reused, or it cannot be verified."""
    try:
        proc = psutil.Process(key.pid)
        return proc if same_start(proc.create_time(), key.create_time) else None
    except psutil.Error:  # NoSuchProcess, ZombieProcess, AccessDenied: not provably ours
        return None


def is_running(proc: psutil.Process, key: ProcKey) -> bool:
    """Whether ``key``'s process is still there and not a zombie (AccessDenied: assume it is)."""
    try:
        if not same_start(proc.create_time(), key.create_time):
            return False
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:  # ZombieProcess is a subclass: reaped or about to be
        return False
    except psutil.AccessDenied:
        return True


def pid_exists(pid: int) -> bool:
    """Whether any process has ``pid`` (one we may not signal counts: it exists)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def pid_running(pid: int) -> bool:
    """Whether ``pid`` exists and is not a zombie (AccessDenied: assume it runs)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:
        return True


def kill_verified(procs: "list[psutil.Process]", grace: float) -> None:
    """SIGKILL processes already verified by ``same_process`` and wait (at most ``grace``) until
    they are gone or zombies. psutil re-checks each one's identity before it signals."""
    for proc in procs:
        try:
            proc.send_signal(signal.SIGKILL)
        except psutil.Error:
            pass  # gone already, or no longer the process we verified
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(_alive(p) for p in procs):
        time.sleep(0.05)


#: the most of a process's initial environment read (``initial_environ``)
MAX_ENVIRON = 1 << 20


def initial_environ(pid: int) -> list[bytes]:
    """The ``NAME=value`` entries a process was started with (``/proc/PID/environ``, capped):
    what exec laid out, unchanged by ``setenv``/``os.environ`` (which copy it elsewhere). Not
    proof: the block is the process's own memory, which it can overwrite or move
    (``PR_SET_MM_MAP``) without a privilege. Raises ``OSError`` when gone or not readable."""
    with open(f"/proc/{pid}/environ", "rb") as handle:
        return handle.read(MAX_ENVIRON).split(b"\0")


#: the most of a process's command line read or kept (``read_cmdline``, ``capped_argv``)
MAX_CMDLINE = 64 * 1024
CMDLINE_CUT = "[command line cut]"


def read_cmdline(pid: int, limit: int = MAX_CMDLINE) -> list[str]:
    """``psutil.Process.cmdline()``, read from ``/proc/PID/cmdline`` up to ``MAX_CMDLINE``
    bytes (then ``CMDLINE_CUT`` as a last argument). Any process can point its command line
    at its own memory without a privilege (``prctl(PR_SET_MM, PR_SET_MM_MAP)``): a trainer's
    user made theirs 256 MiB, which psutil reads whole (half a GB in root's supervisor per
    read, a GiB one several GB), and the capture's redaction of a 32 MiB one took 168 s past
    a 20 s deadline. Raises ``OSError`` when gone or not readable."""
    with open(f"/proc/{pid}/cmdline", "rb") as handle:
        data = handle.read(limit + 1)
    cut = len(data) > limit
    text = os.fsdecode(data[:limit])
    if text.endswith("\0"):
        text = text[:-1]
    if not text:
        return [CMDLINE_CUT] if cut else []
    args = text.split("\0")
    if len(args) == 1 and " " in text and not cut:
        args = text.split(" ")  # a title set over argv (setproctitle), as psutil reads it
    return args + [CMDLINE_CUT] if cut else args


def capped_argv(argv: Any, limit: int = MAX_CMDLINE) -> list[str]:
    """``argv`` held to ``limit`` characters in all (a cut argument, then
    ``CMDLINE_CUT``): a command line read elsewhere before it is redacted or written."""
    out: list[str] = []
    left = limit
    for arg in argv:
        arg = str(arg)
        if len(arg) > left:
            out += ([arg[:left]] if left else []) + [CMDLINE_CUT]
            return out
        out.append(arg)
        left -= len(arg) + 1
        if left < 0:
            return out + [CMDLINE_CUT]
    return out


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False
