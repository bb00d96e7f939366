"""In-process stack dumps: the evidence where py-spy may not attach.

Many hosts forbid ptrace to the supervisor (Yama's ``ptrace_scope`` 2 or 3, containers
without ``CAP_SYS_PTRACE``, non-dumpable processes): py-spy is refused and the bundle
had no stacks. Python's ``faulthandler`` dumps every thread's stack from a C signal
handler without taking the GIL, so it answers while the main thread is blocked in a
C call, as a wedged rank is. A trainer process therefore arms (``arm``):

* ``faulthandler.register(SIG, file, all_threads=True)`` into its own file of the
  attempt directory, ``stacks-pid-<pid>.txt`` (0600, created without following a
  link, only ever our own regular file), which starts with one header line saying
  who wrote it (pid, process start time in clock ticks, signal, main thread id,
  Python version): the capture checks it before it sends anything;
* the same again in a fork's child (its own file), which faulthandler and Yama do not
  give it;
* the supervisor as its ptracer (``contract.ptracer``).

The capture (``diagnostics.inprocess``) sends ``SIG`` only to a process of the
supervised tree whose file header matches its pid and start time and whose
``/proc/PID/status`` says the signal is caught, then reads what was appended.

The signal: ``SIGRTMIN+7`` unless ``HANGWATCH_STACKS_SIGNAL`` says otherwise. Slurm and
NVIDIA's resiliency extension use SIGUSR1/SIGUSR2, torchrun SIGTERM; terminals send
SIGWINCH on a resize (and TUI libraries handle it); profilers take SIGPROF; POSIX timers
take SIGRTMIN itself. A real-time signal well above SIGRTMIN is sent by none of them.
Its default action would end the process, which is why the capture checks that it is
caught before sending it.

Standard library only: ``hangwatch.trainer`` and the startup hook import it.
"""

from __future__ import annotations

import faulthandler
import os
import re
import signal
import stat
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from hangwatch.contract import ptracer
from hangwatch.contract.env import ATTEMPT_DIR, IN_PROCESS_STACKS, STACKS_SIGNAL

DEFAULT_SIGNAL = "SIGRTMIN+7"
MODES = ("hangwatch", "all", "off")
FILE_PREFIX = "stacks-pid-"
HEADER_MARK = "# hangwatch in-process stacks"
#: A header is one short line; a longer first line is no header of ours.
MAX_HEADER_BYTES = 512

# Signals that would do harm or that the process needs for itself: the fatal ones
# (faulthandler refuses them), the uncatchable ones, job control, termination, children.
_REFUSED = {"SIGKILL", "SIGSTOP", "SIGSEGV", "SIGFPE", "SIGABRT", "SIGBUS", "SIGILL", "SIGINT", "SIGTERM",
            "SIGQUIT", "SIGHUP", "SIGCHLD", "SIGCONT", "SIGTSTP", "SIGTTIN", "SIGTTOU", "SIGPIPE", "SIGALRM", "SIGTRAP",
            "SIGSYS"}
_RT = re.compile(r"^(?:SIG)?RT(MIN|MAX)([+-]\d{1,2})?$")


def parse_signal(text: str) -> int:
    """A signal by number, name (``SIGWINCH``) or real-time offset (``SIGRTMIN+7``);
    ``ValueError`` for one that is unknown or must not be used."""
    spec = text.strip().upper()
    m = _RT.match(spec)
    if m:
        base = signal.SIGRTMIN if m.group(1) == "MIN" else signal.SIGRTMAX
        number = int(base) + int(m.group(2) or 0)
    elif spec.isdigit():
        number = int(spec)
    else:
        name = spec if spec.startswith("SIG") else f"SIG{spec}"
        try:
            number = int(signal.Signals[name])
        except KeyError:
            raise ValueError(f"unknown signal {text!r}; e.g. {DEFAULT_SIGNAL}") from None
    if not 1 <= number <= int(signal.SIGRTMAX):
        raise ValueError(f"signal {text!r} is out of range (1..{int(signal.SIGRTMAX)})")
    if signal_name(number) in _REFUSED:
        raise ValueError(f"signal {text!r} is needed for other things; use e.g. {DEFAULT_SIGNAL}")
    return number


def signal_name(number: int) -> str:
    """``SIGWINCH``, or ``SIGRTMIN+7`` for a real-time signal."""
    if int(signal.SIGRTMIN) <= number <= int(signal.SIGRTMAX):
        return f"SIGRTMIN+{number - int(signal.SIGRTMIN)}"
    try:
        return signal.Signals(number).name
    except ValueError:
        return str(number)


def stack_file(attempt_dir: str | os.PathLike[str], pid: int) -> Path:
    """Where process ``pid`` of the attempt dumps its stacks."""
    return Path(attempt_dir) / f"{FILE_PREFIX}{pid}.txt"


@dataclass(frozen=True)
class Header:
    """Who wrote a stack file: the capture signals only the process it names."""

    pid: int
    start_ticks: int  # field 22 of /proc/PID/stat: with the pid, one process for ever
    signal: int
    main_thread: str  # faulthandler's id of the main thread ("0x00007f..."): named MainThread
    python: str

    def line(self) -> str:
        return (f"{HEADER_MARK} pid={self.pid} start={self.start_ticks} signal={self.signal} "
                f"main_thread={self.main_thread} python={self.python}\n")


_HEADER = re.compile(re.escape(HEADER_MARK) + r" pid=(\d{1,10}) start=(\d{1,20}) signal=(\d{1,3}) "
                     r"main_thread=(0x[0-9a-fA-F]{1,16}) python=([\w.+]{0,40})$")


def read_header(line: str) -> Header | None:
    """The header of a stack file's first line; None when it is not one."""
    m = _HEADER.match(line.rstrip("\n"))
    if m is None:
        return None
    return Header(int(m.group(1)), int(m.group(2)), int(m.group(3)), m.group(4).lower(), m.group(5))


def start_ticks(pid: int | str = "self") -> int | None:
    """Process start time in clock ticks since boot (``/proc/PID/stat`` field 22); None if gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            text = handle.read(4096)
        return int(text.rsplit(b")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def catches(pid: int, number: int) -> bool:
    """Whether ``pid`` has a handler for signal ``number`` (``SigCgt`` of ``/proc/PID/status``):
    sent to a process that does not, a real-time signal ends it."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as handle:
            for line in handle:
                if line.startswith("SigCgt:"):
                    return bool(int(line.split()[1], 16) >> (number - 1) & 1)
    except (OSError, ValueError, IndexError):
        pass
    return False


# -- the trainer's side --------------------------------------------------------------------------

#: what this process armed: (pid, the open file faulthandler writes to, its path, the signal)
_armed: dict[str, Any] = {}
_fork_hook = False


def arm(environ: Mapping[str, str] | None = None) -> Path | None:
    """What a trainer process does at import: the in-process dump (``install``) and the
    supervisor as its ptracer; both again in a fork's child. Never raises: evidence must
    not cost the trainer its start. Returns the stack file, or None when none is armed."""
    global _fork_hook
    env = os.environ if environ is None else environ
    try:
        ptracer.declare_supervisor(env)
        path = install(env)
    except Exception:  # noqa: BLE001 - a read-only attempt dir, an odd signal: no fallback, same trainer
        path = None
    if not _fork_hook and hasattr(os, "register_at_fork"):
        _fork_hook = True
        os.register_at_fork(after_in_child=_rearm_in_child)
    return path


def _rearm_in_child() -> None:
    if not _armed or _armed.get("pid") == os.getpid():
        return
    inherited = _armed.get("signal")
    if arm() is None and inherited is not None:
        # The parent's file names the parent: the child must not write into it.
        faulthandler.unregister(inherited)
        _armed.clear()


def install(environ: Mapping[str, str]) -> Path | None:
    """Register the dump of this process's stacks on the attempt's signal, into its own file;
    None outside hangwatch or with ``HANGWATCH_IN_PROCESS_STACKS=off``."""
    attempt_dir = environ.get(ATTEMPT_DIR)
    if not attempt_dir or environ.get(IN_PROCESS_STACKS, "hangwatch") == "off":
        return None
    pid = os.getpid()
    if _armed.get("pid") == pid:
        return _armed["path"]
    number = parse_signal(environ.get(STACKS_SIGNAL) or DEFAULT_SIGNAL)
    path = stack_file(attempt_dir, pid)
    handle = _open_own(path)
    try:
        import threading  # noqa: PLC0415 - already imported by any program that runs threads

        main = f"0x{threading.main_thread().ident or 0:016x}"
        header = Header(pid, start_ticks() or 0, number, main, ".".join(map(str, sys.version_info[:3])))
        handle.write(header.line().encode("ascii"))
        faulthandler.register(number, file=handle, all_threads=True, chain=_has_handler(number))
    except BaseException:
        handle.close()
        raise
    previous = _armed.get("file")
    _armed.update(pid=pid, file=handle, path=path, signal=number)
    if previous is not None:
        previous.close()  # the parent's, inherited through fork: faulthandler now writes to ours
    return path


def _has_handler(number: int) -> bool:
    """Whether the process already handles ``number``: ``chain=True`` keeps that handler. With
    none, chaining would re-raise the signal with its default action after the dump, which
    ends the process for a real-time signal (and for SIGUSR1/2)."""
    previous = signal.getsignal(number)
    return previous is None or callable(previous)  # None: a handler set outside Python


def _open_own(path: Path) -> Any:
    """``path`` opened for writing, emptied: created 0600, never through a link, and only a
    regular file of our own (the attempt dir is the supervisor's; a file there that is not
    ours is not written)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o600)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
            raise PermissionError(f"{path} is not a regular file of ours")
        os.ftruncate(fd, 0)
        os.fchmod(fd, 0o600)
        os.set_blocking(fd, True)
        return open(fd, "wb", buffering=0)  # noqa: SIM115 - kept open: faulthandler writes to it
    except BaseException:
        os.close(fd)
        raise
