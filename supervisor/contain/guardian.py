"""The guardian, the supervisor's side: start it, tell it the tree, re-arm it, stop it.

The guardian kills the tree if the supervisor itself dies.

A supervisor that is SIGKILLed (OOM killer, a scheduler's hard kill) runs no
cleanup. The trainer dies with it through its parent-death signal, but
processes that escaped into their own sessions would be orphaned, holding GPU
memory. The guardian is a tiny separate process that blocks reading a pipe
from the supervisor; the kernel closes the pipe when the supervisor dies,
however it dies, and the guardian then kills what the supervisor last told it.

What it kills comes over that same pipe, never from a file: a file in the run
directory is something another user might write, and the guardian SIGKILLs
what it names. The supervisor sends one JSON line per change (``TreeState``):
the attempt's cgroup, sent before the trainer is started, so no fork can beat
it; and, for the tree-walk fallback, the members it has seen (pid + create
time) with their process groups and sessions.

The guardian process itself (what it does at the EOF) is ``guardian_process``; the
``--resume`` kill of what a dead supervisor left when its guardian died too is ``left_behind``.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import select
import signal
import subprocess
import threading
import time
from typing import Any, Callable, Mapping

from hangwatch.contract.env import SUPERVISOR
from hangwatch.contract.pyexec import module_command
from hangwatch.contract.tools import add_helper, forget_helper
from hangwatch.supervisor.contain.guardian_process import ARMED, MAX_LINE

#: a mark's "born since" is its setting time less this: psutil's create time counts from a
#: boot time in whole seconds, so it can read up to a second early
MARK_SLACK_S = 2.0


class GuardianError(RuntimeError):
    """The guardian could not be started or did not report itself armed."""


class Guardian:
    """The supervisor's end: the process and the pipe the tree goes over."""

    def __init__(self, proc: subprocess.Popen | None, helper_mark: list[Any] | None = None) -> None:
        #: None until one is armed (``start(later=True)``: the first did not arm; ``keep_armed`` retries)
        self.proc = proc
        self._pending = b""
        self.lost = proc is None
        #: [mark, born since] of the supervisor's helpers, added to every state; None at a normal stop
        self.helper_mark = helper_mark
        self._state: dict[str, Any] = {}
        self._env_before: str | None = None
        self._lock = threading.Lock()  # the supervisor's main thread and its busy watcher both send
        self._stopping = threading.Event()  # a normal stop: no re-arming (``keep_armed``)
        self.start_error: GuardianError | None = None  # why the first start did not arm (``start(later=True)``)
        self._mourned: subprocess.Popen | None = None  # a dead guardian the keeper was woken for once

    def send(self, state: Mapping[str, Any]) -> None:
        """Tell the guardian the tree's current state (replaces what it had).

        Never blocks the supervisor: the pipe is non-blocking, and what does not
        fit now goes out with the next call. A guardian that died is noted once.
        """
        with self._lock:
            # Kept even while no guardian hears it: the one ``keep_armed`` starts is told the
            # latest state, never one from before the loss (another attempt's cgroup and marks).
            self._state = dict(state)
            if self.lost or self.proc is None or self.proc.stdin is None or self.proc.stdin.closed:
                return
            message = dict(state)
            if self.helper_mark is not None:
                message["marks"] = [*(message.get("marks") or []), self.helper_mark]
            self._pending += json.dumps(message, separators=(",", ":")).encode() + b"\n"
            self.flush()

    def armed(self) -> bool:
        """Whether it is still there to kill the tree should we die (not lost, not exited, not stopped:
        a SIGSTOPped guardian hears our death only once continued, and what escaped the trainer's
        session ran on until then)."""
        return not self.lost and self.proc is not None and self.proc.poll() is None and not is_stopped(self.proc.pid)

    def _wake_if_stopped(self, on_event: Callable[[str, str], None]) -> None:
        """A stopped guardian (state T or t) is resumed (SIGCONT); one that stays stopped is killed,
        and the keeper replaces it. Either way the journal says so."""
        proc = self.proc
        if proc is None or proc.poll() is not None or not is_stopped(proc.pid):
            return
        with contextlib.suppress(OSError):
            os.kill(proc.pid, signal.SIGCONT)
        deadline = time.monotonic() + 0.5
        while is_stopped(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.01)
        if not is_stopped(proc.pid):
            on_event("guardian_resumed", f"the guardian (pid {proc.pid}) was stopped (SIGSTOP, or traced); "
                                         "resumed with SIGCONT: it is armed again")
            return
        with contextlib.suppress(OSError):
            os.kill(proc.pid, signal.SIGKILL)  # stopped by a tracer, or stopped again at once: replaced
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=2)

    def keep_armed(self, on_event: Callable[[str, str], None], every: float = 1.0, retry: float = 10.0,
                   retry_cap: float = 600.0) -> None:
        """Watch the guardian (a daemon thread, woken by its death: ``_wait_for_loss``) and start a
        new one, told the same state, when it dies (a user's ``kill``, the OOM killer). Without it
        the tree-walk root, whose parent-death signal is SIGSTOP while a guardian is armed, would
        stay stopped, holding its memory, should we die too; and what escaped the trainer's session
        would be orphaned.
        ``on_event(event, message)``: ``guardian_rearmed``, or ``guardian_lost`` (not re-armed;
        tried again after ``rearm_delay``: ``retry`` s, doubling to ``retry_cap``)."""
        def watch() -> None:
            next_try = 0.0
            failures = 0
            while not self._wait_for_loss(every):
                self._wake_if_stopped(on_event)
                if self.armed() or time.monotonic() < next_try:
                    continue
                had = self.proc is not None  # else none has armed yet (``start(later=True)``)
                old = f"the guardian (pid {self.proc.pid}) is gone" if self.proc is not None else "no guardian is armed"
                try:
                    self._rearm()
                except GuardianError as exc:
                    failures += 1
                    next_try = time.monotonic() + rearm_delay(failures, retry, retry_cap)
                    stopped = "the trainer's root stays stopped and " if had else ""
                    on_event("guardian_lost", f"{old} and a new one could not be started "
                                              f"({exc}): if this supervisor dies now, {stopped}escaped workers "
                                              f"live on until hangwatch run --resume kills them")
                    continue
                failures = 0
                if self.proc is not None:
                    on_event("guardian_rearmed", f"{old}; a new one (pid {self.proc.pid}) is armed with the same state")

        threading.Thread(target=watch, name="guardian-keeper", daemon=True).start()

    def _wait_for_loss(self, every: float) -> bool:
        """Wait ``every`` s, or less: until the guardian exits (its stdout, which it never closes,
        reads EOF once it is gone, however it went). Polled every ``every`` s, a guardian killed
        a moment before us left the whole tree unguarded for up to that second more than its
        replacement's start (0.09 s): a user's ``kill`` of the guardian and then of the supervisor
        within it left the root stopped and every escaped worker alive. True once a normal stop
        began."""
        proc = self.proc
        if proc is not None and proc.poll() is None and is_stopped(proc.pid):
            return self._stopping.is_set()  # stopped, not dead: the keeper resumes or replaces it now
        if proc is None or not self.armed():  # one look: the two could differ
            if proc is not None and proc is not self._mourned:
                self._mourned = proc  # dead before we waited on it (killed as the watch began): at once
                return self._stopping.is_set()
            return self._stopping.wait(every)  # none armed: the retries keep their own schedule
        out = proc.stdout
        if out is None or out.closed:
            return self._stopping.wait(every)
        try:
            ready, _, _ = select.select([out], [], [], every)
        except (OSError, ValueError):
            return self._stopping.wait(every)
        if ready:
            deadline = time.monotonic() + 1.0  # its fds close a moment before it can be reaped
            while proc.poll() is None and time.monotonic() < deadline and not self._stopping.is_set():
                time.sleep(0.005)
            if proc.poll() is None:  # alive after all (never seen): do not spin on the readable pipe
                return self._stopping.wait(every)
            self._mourned = proc
        return self._stopping.is_set()

    def _rearm(self) -> None:
        # Never with our helpers' token in its environment, as the first one: it kills what carries it.
        env = {k: v for k, v in os.environ.items() if k != SUPERVISOR}
        if self._env_before is not None:
            env[SUPERVISOR] = self._env_before
        proc = _spawn(env=env)
        with self._lock:
            if self._stopping.is_set():  # a normal stop came meanwhile: this one is not needed
                _close(proc)
                return
            dead, self.proc = self.proc, proc
            self.lost, self._pending = False, b""
        if dead is not None:
            forget_helper(dead.pid)
            try:
                dead.wait(timeout=0)
            except subprocess.TimeoutExpired:
                pass
        self.send(self._state)

    def flush(self) -> None:
        assert self.proc.stdin is not None
        fd = self.proc.stdin.fileno()
        while self._pending:
            try:
                n = os.write(fd, self._pending)
            except BlockingIOError:
                return
            except OSError:
                self.lost = True  # EPIPE: the guardian is gone; the caller's warning said so at start
                return
            self._pending = self._pending[n:]
        if len(self._pending) > MAX_LINE:
            self._pending = self._pending[-MAX_LINE:]


def start(timeout: float = 10.0, later: bool = False) -> Guardian:
    """Start the guardian and wait (at most ``timeout``) until it says it is armed.

    Raises ``GuardianError`` when it cannot start or does not confirm: the
    caller must then say that a SIGKILLed supervisor would leave orphans. With
    ``later``, an unarmed ``Guardian`` instead (``armed()`` False, ``start_error`` says
    why), which ``keep_armed`` goes on trying to arm: a start that failed once (a fork
    refused under a process limit, a start slower than ``timeout`` on a loaded node) left
    the whole run without one.
    """
    proc, error = None, None
    try:
        proc = _spawn(timeout)
    except GuardianError as exc:
        if not later:
            raise
        error = exc
    # From here on every helper we start carries our token (the guardian itself started without it).
    guardian = Guardian(proc, [f"{SUPERVISOR}={os.getpid()}-{secrets.token_hex(8)}", time.time() - MARK_SLACK_S])
    guardian.start_error = error
    guardian._env_before = os.environ.get(SUPERVISOR)
    os.environ[SUPERVISOR] = guardian.helper_mark[0].partition("=")[2]
    guardian.send({})
    return guardian


def _close(proc: subprocess.Popen) -> None:
    """A guardian process not needed: its pipe closed with nothing told, it kills nothing."""
    try:
        if proc.stdin is not None:
            proc.stdin.close()
        proc.wait(timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        proc.kill()
    forget_helper(proc.pid)


def is_stopped(pid: int) -> bool:
    """Whether ``pid`` is stopped (its state in /proc is T, stopped, or t, stopped by a tracer)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2:stat.rfind(b")") + 3] in (b"T", b"t")


def rearm_delay(failures: int, retry: float, cap: float) -> float:
    """Seconds before the next start after ``failures`` failed ones in a row: ``retry``, doubling
    to ``cap``. A guardian that can never start (a process limit, a broken interpreter) once cost a
    Python start and a ``guardian_lost`` record every 10 s for a multi-day run."""
    return min(cap, retry * 2.0 ** min(max(failures - 1, 0), 32))


def _spawn(timeout: float = 10.0, env: Mapping[str, str] | None = None) -> subprocess.Popen:
    """A guardian process, armed (it said so within ``timeout``), its pipe non-blocking."""
    try:
        proc = subprocess.Popen(
            module_command("hangwatch.supervisor.contain.guardian_process"),
            env=None if env is None else dict(env),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            start_new_session=True,
        )
    except OSError as exc:
        raise GuardianError(f"cannot start the guardian: {exc}") from exc
    assert proc.stdout is not None and proc.stdin is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    line = os.read(proc.stdout.fileno(), len(ARMED)) if ready else b""
    if line != ARMED:
        proc.kill()
        proc.wait(timeout=timeout)
        why = f"it exited with {proc.returncode}" if line == b"" and ready else f"no confirmation within {timeout:g} s"
        raise GuardianError(f"the guardian did not arm ({why})")
    os.set_blocking(proc.stdin.fileno(), False)
    # Never part of the supervised tree: not sampled, not captured, not killed.
    add_helper(proc.pid)
    return proc


def stop(guardian: Guardian, timeout: float = 5.0) -> None:
    """Normal shutdown: closing the pipe is the same signal as our death."""
    guardian._stopping.set()
    with guardian._lock:  # a re-arm in progress has finished (or will not replace the process)
        proc = guardian.proc
    # A normal stop: our helpers are done (or were aborted); a later start gets a new token.
    guardian.helper_mark = None
    if guardian._env_before is None:
        os.environ.pop(SUPERVISOR, None)
    else:
        os.environ[SUPERVISOR] = guardian._env_before
    if proc is None:  # never armed: nothing to close
        return
    try:
        if not guardian.lost and proc.stdin is not None:
            guardian.send(guardian._state)
        with guardian._lock:  # no send after this one: the pipe closes
            if proc.stdin is not None and not proc.stdin.closed:
                os.set_blocking(proc.stdin.fileno(), True)
                guardian.flush()
                proc.stdin.close()
        proc.wait(timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        proc.kill()
    forget_helper(proc.pid)
