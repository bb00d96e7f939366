"""The guardian process: kills the tree if the supervisor itself dies.

Why it exists, and what the supervisor tells it over the pipe it reads (one JSON line per
change: the attempt's cgroup, the members with their groups and sessions, the marks), is
in ``guardian``, the supervisor's side, which starts it and holds the pipe.

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

Usage (by the supervisor only): ``python -m hangwatch.supervisor.contain.guardian_process``
with stdin connected to a pipe the supervisor holds open.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from typing import Any, Iterable, Mapping, Sequence

import psutil

from hangwatch.contract.procid import ProcKey, initial_environ, kill_verified, same_process, same_start


ARMED = b"armed\n"
#: a line larger than this is not a message from the supervisor
MAX_LINE = 4 * 1024 * 1024


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
        if len(buffer) > MAX_LINE:
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


def _carries(pid: int, born: float, marks: Sequence[tuple[str, float]]) -> bool:
    """Whether process ``pid`` (born at ``born``) was started with one of ``marks`` (set before it was born)."""
    # fsencode: a run dir's path may hold bytes that are not UTF-8 (surrogates here); encode() raised
    # and the guardian died with the tree it had just stopped.
    wanted = [(os.fsencode(m), since) for m, since in marks if born >= since]
    if not wanted:
        return False
    entries = set(initial_environ(pid))
    return any(mark in entries for mark, _ in wanted)


def groups_and_sessions(pids: Iterable[int]) -> tuple[set[int], set[int]]:
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
    held_groups, held_sessions = groups_and_sessions(p.pid for p in procs)
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
