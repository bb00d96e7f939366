"""The guardian: kills the tree if the supervisor itself dies.

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

On EOF: ``cgroup.kill`` on the cgroup (nothing in it escapes), SIGKILL to each
recorded member that is still the same process, and to every process in a
recorded group or session that started after the run's first member (what was
forked between the last tick and the supervisor's death). Each is stopped (SIGSTOP) as it
is found and all are killed together, with every descendant of theirs: a worker forked after
the last tick into a new session with an empty environment is still its live parent's child,
and a stopped process forks no more while the guardian looks.
A worker handed off with a double fork has no parent of ours left, but an intermediate that
its (stopped) parent has not reaped still leads the worker's session: every process in a
session that a found process leads is taken too.

With the tree walk the root is not killed by the supervisor's death but stopped (its
parent-death signal is SIGSTOP while we are armed, ``tree.LocalTree``): nothing below it
sees a parent die and reacts. The members we were told are pinned by pidfd as they arrive
(``Pinned``) and stopped first at the EOF, before any scan: one the supervisor adopted (an
escaped worker) sees its parent die, and races only the guardian's wake-up.

And to every process that carries one of the state's marks in the environment
it was started with (``/proc/PID/environ``) and was born after the mark was
set: ``HANGWATCH_ATTEMPT_DIR=<this attempt's dir>``, which every process of the
attempt inherits, however it left the session or group, forked while nobody
looked (during a capture or a kill, between two ticks); and, only when the
supervisor died (not at a normal stop), ``HANGWATCH_SUPERVISOR=<token>``, a
random token in the supervisor's own environment, which every helper it starts
(py-spy, nvidia-smi) inherits: a helper stuck on a target in state D would
otherwise outlive it. A mark is no proof against a process that clears its
environment (or overwrites it, as ``setproctitle`` does); that is what the
cgroup is for. A process that copies a mark into its own environment only gets
itself killed.

Usage (by the supervisor only): ``python -m hangwatch.supervisor.contain.guardian``
with stdin connected to a pipe the supervisor holds open.
"""

from __future__ import annotations

import json
import os
import secrets
import select
import signal
import subprocess
import sys
import threading
import time
from typing import Any, Callable, Iterable, Mapping, Sequence

import psutil

from hangwatch.contract.env import ATTEMPT_DIR, SUPERVISOR
from hangwatch.contract.procid import ProcKey, initial_environ, kill_verified, same_process, same_start
from hangwatch.contract.pyexec import module_command
from hangwatch.contract.tools import add_helper, forget_helper


ARMED = b"armed\n"
#: a line larger than this is not a message from the supervisor
_MAX_LINE = 4 * 1024 * 1024
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
        """Whether it is still there to kill the tree should we die (not lost, not exited)."""
        return not self.lost and self.proc is not None and self.proc.poll() is None

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
        if len(self._pending) > _MAX_LINE:
            self._pending = self._pending[-_MAX_LINE:]


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


def rearm_delay(failures: int, retry: float, cap: float) -> float:
    """Seconds before the next start after ``failures`` failed ones in a row: ``retry``, doubling
    to ``cap``. A guardian that can never start (a process limit, a broken interpreter) once cost a
    Python start and a ``guardian_lost`` record every 10 s for a multi-day run."""
    return min(cap, retry * 2.0 ** min(max(failures - 1, 0), 32))


def _spawn(timeout: float = 10.0, env: Mapping[str, str] | None = None) -> subprocess.Popen:
    """A guardian process, armed (it said so within ``timeout``), its pipe non-blocking."""
    try:
        proc = subprocess.Popen(
            module_command("hangwatch.supervisor.contain.guardian"),
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


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # Armed from here on: whatever ends our stdin makes us kill what we were told.
    os.write(sys.stdout.fileno(), ARMED)
    state: dict[str, Any] = {}
    pinned = Pinned()
    buffer = b""
    while True:
        chunk = sys.stdin.buffer.read1(65536)
        if not chunk:
            break
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        for line in lines:
            try:
                message = json.loads(line)
            except ValueError:
                continue  # a fragment; the next whole message replaces it
            if isinstance(message, dict):
                state = message
        pinned.update(state.get("members"))
        if len(buffer) > _MAX_LINE:
            buffer = b""
    pinned.stop()  # first, before any scan: microseconds after the EOF, not milliseconds
    killed = kill_state(state)
    if killed:
        print(f"hangwatch guardian: supervisor gone; killed {killed}", file=sys.stderr)
    return 0


#: the most recorded members held by a pidfd (each is a file descriptor of the guardian's)
MAX_PINNED = 256


class Pinned:
    """A pidfd for each recorded member, opened when it is told and identity-checked once, so
    that the EOF can SIGSTOP them all at once with no /proc scan in between. The supervisor's
    death orphans its adopted children (workers that escaped with a double fork): one that
    reacts to it (a bare worker forked into a new session) has only the guardian's start-up
    to win against; each scan-free microsecond narrows that race. A pidfd names its process
    for good, never a reused pid."""

    def __init__(self) -> None:
        self.fds: dict[tuple[int, float], int] = {}

    def update(self, members: Any) -> None:
        wanted: set[tuple[int, float]] = set()
        for m in members if isinstance(members, list) else []:
            if isinstance(m, list) and len(m) == 2 and isinstance(m[0], int) and isinstance(m[1], (int, float)):
                wanted.add((m[0], float(m[1])))
        for key in [k for k in self.fds if k not in wanted]:
            os.close(self.fds.pop(key))
        for pid, born in sorted(wanted - set(self.fds)):
            if len(self.fds) >= MAX_PINNED or pid <= 1 or pid == os.getpid():  # (never ourselves: ``_stopped``)
                continue
            try:
                fd = os.pidfd_open(pid)
            except (OSError, AttributeError):
                continue  # gone already, or no pidfds here: the scan at the EOF still finds it
            # Opened first, checked second: the fd names whoever held the pid at the open.
            if same_process(ProcKey(pid, born)) is None:
                os.close(fd)
                continue
            self.fds[(pid, born)] = fd

    def stop(self) -> None:
        for fd in self.fds.values():
            try:
                signal.pidfd_send_signal(fd, signal.SIGSTOP)
            except OSError:
                pass  # exited: nothing left to stop


def kill_state(state: Mapping[str, Any], grace: float = 2.0, spare: Iterable[int] = ()) -> list[int]:
    """Kill everything ``state`` describes, never ``spare`` (nor ourselves); returns the pids signalled."""
    from hangwatch.supervisor.contain import cgroup  # noqa: PLC0415  (small; only needed now)

    killed: list[int] = []
    path = state.get("cgroup")
    if isinstance(path, str) and path:
        killed += cgroup.kill_path(path, max(grace, 10.0))
    members = [ProcKey(int(m[0]), float(m[1])) for m in state.get("members") or [] if isinstance(m, list) and len(m) == 2]
    groups = {int(g) for g in state.get("groups") or [] if isinstance(g, int) and g > 1}
    sessions = {int(s) for s in state.get("sessions") or [] if isinstance(s, int) and s > 1}
    since = min((k.create_time for k in members), default=None)
    marks = [(str(m[0]), float(m[1])) for m in state.get("marks") or []
             if isinstance(m, list) and len(m) == 2 and isinstance(m[0], str) and "=" in m[0]
             and isinstance(m[1], (int, float))]
    # Stopped as found, killed together: a process of ours that forks while we look (its parent
    # died with the supervisor and it reacts: a bare helper in a new session, no mark) must not
    # slip out between our look and our kill; its children are ours too, and a stopped one forks
    # no more.
    spared = frozenset({os.getpid(), *spare})
    procs = _stopped([p for p in (same_process(k) for k in members) if p is not None], spared)  # first: no scan
    procs += _stopped(members_of(members, groups, sessions, since, marks), spared)
    if marks:
        procs += _stopped(marked_processes(marks), spared)
    procs += _stopped_descendants(procs, spared)
    procs += _stopped_led_sessions(procs, spared)
    kill_verified(procs, grace)
    killed += [p.pid for p in procs]
    return sorted(set(killed))


#: a bound on the descendant walk's passes (each finds a generation forked before its parent stopped)
_MAX_GENERATIONS = 32


def _stopped(procs: list[psutil.Process], spared: frozenset[int] = frozenset()) -> list[psutil.Process]:
    """SIGSTOP ``procs`` (identity-checked by psutil) so that none forks again before the kill.
    Never ourselves: a guardian started while the supervisor ran (``Guardian.keep_armed``) may be
    told as a member of the tree before it is known as a helper. Nor ``spared``."""
    me = os.getpid()
    procs = [p for p in procs if p.pid != me and p.pid not in spared]
    for proc in procs:
        try:
            proc.send_signal(signal.SIGSTOP)
        except psutil.Error:
            pass  # gone already, or no longer the process we verified: the kill skips it too
    return procs


def _stopped_descendants(procs: list[psutil.Process], spared: frozenset[int] = frozenset()) -> list[psutil.Process]:
    """Every descendant of ``procs``, stopped: a child forked (and escaped into its own session,
    with an empty environment) before its parent stopped is still that parent's child while the
    parent lives, and stopped parents live until the kill."""
    me = os.getpid()
    seen = {p.pid for p in procs}
    parents = set(seen)
    found: list[psutil.Process] = []
    for _ in range(_MAX_GENERATIONS):
        if not parents:
            break
        new = []
        for proc in psutil.process_iter(["ppid"]):
            if proc.info.get("ppid") in parents and proc.pid not in seen and proc.pid != me:
                seen.add(proc.pid)
                new.append(proc)
        found += _stopped(new, spared)
        parents = {p.pid for p in new}
    return found


def _stopped_led_sessions(procs: list[psutil.Process], spared: frozenset[int] = frozenset()) -> list[psutil.Process]:
    """Every process in a session that one of ``procs`` leads (and each one's descendants), stopped:
    a worker that escaped with a double fork (setsid, fork, the intermediate exits at once) is in
    the intermediate's session, but its parent is gone (it was reparented to the supervisor, then
    to init), so no descendant walk reaches it; the intermediate, a zombie while its own parent
    (stopped) has not reaped it, still leads that session. Only processes descended from a
    session's leader can be in it, so this takes nothing the walk would not have, had the lineage
    held; and no other session can take that id while the leader (or a member) holds it."""
    me = os.getpid()
    seen = {p.pid for p in procs}
    scanned: set[int] = set()
    found: list[psutil.Process] = []
    frontier = procs
    for _ in range(_MAX_GENERATIONS):
        leaders: dict[int, psutil.Process] = {}
        for proc in frontier:
            try:
                # Asked of the pid, so checked to be the process found, a zombie too, after the ask: one
                # gone (reaped outside the tree) whose pid another session's leader took is not ours.
                if os.getsid(proc.pid) == proc.pid and proc.pid not in scanned and proc.is_running():
                    leaders[proc.pid] = proc
            except (OSError, psutil.Error):
                continue  # gone (reaped): its session's members are beyond proof
        if not leaders:
            break
        scanned |= set(leaders)
        in_led: list[tuple[psutil.Process, int]] = []
        for proc in psutil.process_iter():
            try:
                sid = os.getsid(proc.pid)
                if proc.pid not in seen and proc.pid != me and sid in leaders:
                    in_led.append((proc, sid))
            except (OSError, psutil.Error):
                continue
        # Each leader still the same process after the scan: the session ids read were its.
        led = {pid for pid, proc in leaders.items() if proc.is_running()}
        new = [proc for proc, sid in in_led if sid in led]
        new = _stopped(new, spared)
        new += _stopped_descendants(new, spared)
        new = [p for p in new if p.pid not in seen]
        seen |= {p.pid for p in new}
        found += new
        frontier = new
    return found


def marked_processes(marks: list[tuple[str, float]]) -> list[psutil.Process]:
    """Processes born at or after a mark's time whose initial environment holds that mark
    (``NAME=value``, a whole entry), this guardian excepted."""
    earliest = min(since for _, since in marks)
    me = os.getpid()
    found = []
    for proc in psutil.process_iter():
        try:
            born = proc.create_time()
            if proc.pid != me and born >= earliest and _carries(proc.pid, born, marks):
                found.append(proc)
        except (OSError, psutil.Error):
            continue  # gone, or not readable to us: never ours to prove
    return found


def kill_left_behind(members: Sequence[ProcKey], marks: Sequence[tuple[str, float]], grace: float = 2.0) -> list[int]:
    """``--resume``: kill what a dead supervisor left, as its guardian would have (for when the
    guardian died too: both killed by one ``kill -9``, the node's OOM kill, a guardian killed and
    the supervisor within the second before its replacement armed). ``members``: ``tree.json``'s,
    which name only what a tick saw; ``marks``: ``resume_marks``. Killing just those left what was
    forked after the last tick without a mark (an ``exec`` with an empty environment,
    ``setproctitle``) alive: with the tree walk the root stays stopped and its children run on,
    forking. So, as the guardian does: the recorded members stopped first, then everything in the
    sessions and groups they are in now (which only our tree's processes can be in: the root
    started its own session) born since the first of them, the marked, and every descendant of
    those, all stopped before the kill. Never the caller or its ancestors (a shell that inherited a
    mark). Returns the pids signalled."""
    live = [k for k in members if same_process(k) is not None]
    groups, sessions = _groups_and_sessions(k.pid for k in live)
    state = {"members": [[k.pid, k.create_time] for k in live], "groups": sorted(groups),
             "sessions": sorted(sessions), "marks": [[m, since] for m, since in marks]}
    return kill_state(state, grace, spare=_caller_and_ancestors())


def _caller_and_ancestors() -> set[int]:
    try:
        return {os.getpid(), *(p.pid for p in psutil.Process().parents())}
    except psutil.Error:
        return {os.getpid(), os.getppid()}


def resume_marks(records: Sequence[Mapping[str, Any]], run_dir: str) -> list[tuple[str, float]]:
    """``--resume``: the marks of a dead supervisor's attempts, from its journal, for when its
    guardian died with it (a node's OOM kill, a kill of every process the user owns).
    ``tree.json`` names only what a tick saw; what was forked and escaped after the last one
    (a new session, so no parent-death signal reaches it) still carries its attempt's mark.
    Each mark is ``HANGWATCH_ATTEMPT_DIR=<the dir>`` as the attempt's environment had it, kept
    only when that dir is one of ``run_dir``'s attempts (the journal names the path; a path
    elsewhere is no mark of this run's), born since the run's first record."""
    if not records:
        return []
    try:
        since = float(records[0].get("ts", 0.0)) - MARK_SLACK_S
        attempts = os.path.realpath(os.path.join(run_dir, "attempts"))
    except (TypeError, ValueError, OSError):
        return []
    marks = []
    for record in records:
        env = record.get("env") if record.get("event") == "attempt_started" else None
        value = env.get(ATTEMPT_DIR) if isinstance(env, dict) else None
        if isinstance(value, str) and value and os.path.dirname(os.path.realpath(value)) == attempts:
            marks.append((f"{ATTEMPT_DIR}={value}", since))
    return marks


def _carries(pid: int, born: float, marks: Sequence[tuple[str, float]]) -> bool:
    """Whether process ``pid`` (born at ``born``) was started with one of ``marks`` (set before it was born)."""
    # fsencode: a run dir's path may hold bytes that are not UTF-8 (surrogates here); encode() raised
    # and the guardian died with the tree it had just stopped.
    wanted = [(os.fsencode(m), since) for m, since in marks if born >= since]
    if not wanted:
        return False
    entries = set(initial_environ(pid))
    return any(mark in entries for mark, _ in wanted)


def _groups_and_sessions(pids: Iterable[int]) -> tuple[set[int], set[int]]:
    """The process groups and sessions these processes are in now (one gone since: none)."""
    groups, sessions = set(), set()
    for pid in pids:
        try:
            groups.add(os.getpgid(pid))
            sessions.add(os.getsid(pid))
        except OSError:
            continue
    return groups, sessions


def members_of(members: list[ProcKey], groups: set[int], sessions: set[int], since: float | None,
               marks: Sequence[tuple[str, float]] = ()) -> list[psutil.Process]:
    """The recorded members that are still the same processes, and every process of a
    recorded group or session born since the first member (so never an older process that
    shares a reused group id) whose id still names ours (``_still_ours``: never a stranger's
    group that took a reused id since)."""
    procs = [p for p in (same_process(k) for k in members) if p is not None]
    # A group or session one of our live members is in now is ours (no process joins a
    # group outside its own session); any other id must prove it still names ours.
    held_groups, held_sessions = _groups_and_sessions(p.pid for p in procs)
    groups = (groups & held_groups) | _still_ours(groups - held_groups, members, marks)
    sessions = (sessions & held_sessions) | _still_ours(sessions - held_sessions, members, marks)
    if since is not None and (groups or sessions):
        me = os.getpid()
        for proc in psutil.process_iter():
            try:
                if proc.pid == me or proc.create_time() < since - 0.01:
                    continue
                if os.getpgid(proc.pid) in groups or os.getsid(proc.pid) in sessions:
                    procs.append(proc)
            except (OSError, psutil.Error):
                continue
    return procs


def _still_ours(ids: set[int], members: list[ProcKey], marks: Sequence[tuple[str, float]]) -> set[int]:
    """The recorded group or session ids that provably still name ours. The id is its leader's
    pid, and the kernel never hands out a pid that a live group or session still uses: so with
    no process holding that pid the group is the one we recorded, and so it is when the holder
    is our recorded member or carries our mark. Any other holder means ours all died and the
    id went to a stranger after the last tell (a pid reused within a tick, or a tiny pid_max)."""
    kept = set()
    for gid in ids:
        try:
            holder = psutil.Process(gid)
            born = holder.create_time()
        except psutil.NoSuchProcess:
            kept.add(gid)
            continue
        except psutil.Error:
            continue  # cannot be read: not provably ours
        try:
            if any(m.pid == gid and same_start(born, m.create_time) for m in members) \
                    or (marks and _carries(gid, born, marks)):
                kept.add(gid)
        except OSError:
            continue
    return kept


if __name__ == "__main__":
    os.environ.pop("HANGWATCH_HEARTBEAT", None)
    sys.exit(main(sys.argv[1:]))
