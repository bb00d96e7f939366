"""Killing the whole tree: SIGTERM, a grace period, SIGKILL, reap, confirm.

Safety: a process is signalled only while it is provably ours, i.e. the pid
still has the create time we recorded when we found it in the tree (psutil's
``send_signal`` re-checks it). A whole process group is signalled with
``killpg`` only when every process in it is such a member, so a group that an
unrelated process joined is signalled member by member instead.

The grace is adaptive. It exists for processes that use SIGTERM to clean up
(an emergency checkpoint, flushing logs); a wedged process that neither exits
nor runs after SIGTERM gains nothing from the wait. So once every remaining
process has used no CPU time, done no I/O, not been in disk sleep and not
exited for ``quiet_s`` (the clock restarts whenever one of them does any of
these, or a newcomer appears), SIGKILL goes out early. A process that is busy
after SIGTERM keeps the whole ``grace``. One more early rule: the ``launcher``
(the tree's root, named by the caller when it never sent a heartbeat while other
processes did, e.g. torchrun's agent) once every other process is gone. A launcher's
cleanup after SIGTERM is about its workers, which are dead; the workers, who write
the emergency checkpoints, kept their grace. The report's ``grace_rule`` says which
rule applied: ``exited`` (all gone within the grace), ``quiet`` (SIGKILL early),
``launcher`` (SIGKILL early: only the launcher left), ``grace`` (SIGKILL when the full
grace ended), ``none`` (a grace of 0: SIGKILL first, no SIGTERM; the engine-level kill,
whose worker holds nothing worth saving).

Processes forked while we wait are picked up by rescanning the tree on every
poll. Zombies count as dead (they hold no memory, no GPU), and we reap the
ones that are our children. A process in uninterruptible sleep (state D) can
survive SIGKILL for as long as its I/O hangs: after ``kill_timeout`` we stop
waiting and report it as a survivor, so the supervisor's wait stays bounded.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass
from typing import Any, Callable

import psutil
import structlog

from hangwatch.contract.procid import ProcKey, is_running, same_process
from hangwatch.supervisor.watch.proctree import ProcessTree

log = structlog.get_logger("hangwatch.kill")

# How long every remaining process must be still after SIGTERM before SIGKILL goes
# out early: a few of the supervisor's sampling intervals at fast settings, 100
# ticks of the kernel's CPU-time clock. A Python SIGTERM handler that runs at all
# shows CPU time within milliseconds.
QUIET_S = 1.0
# CPU time below this over the quiet period is "none" (the clock ticks at 10 ms).
_CPU_EPS_S = 0.005
# The least wait after SIGKILL before anything is called a survivor: even SIGKILL takes a
# moment (the exit, the reap); with no wait at all every target would read as unkillable.
MIN_KILL_TIMEOUT_S = 0.5


@dataclass(frozen=True)
class KillReport:
    targets: tuple[dict[str, Any], ...]
    signals: tuple[dict[str, Any], ...]
    escalated: tuple[int, ...]
    survivors: tuple[dict[str, Any], ...]
    duration_s: float
    grace_rule: str = "exited"  # exited | quiet | launcher | grace | none (see the module docstring)
    grace_s: float | None = None
    quiet_s: float | None = None
    sigkill_after_s: float | None = None
    #: how the tree was contained (tree walk or cgroup, with the cgroup's CPU/memory figures)
    containment: dict[str, Any] | None = None

    @property
    def confirmed(self) -> bool:
        return not self.survivors

    @property
    def pids(self) -> tuple[int, ...]:
        return tuple(t["pid"] for t in self.targets)

    def to_json(self) -> dict[str, Any]:
        return {
            "pids": list(self.pids),
            "targets": list(self.targets),
            "signals": list(self.signals),
            "escalated": list(self.escalated),
            "survivors": list(self.survivors),
            "confirmed": self.confirmed,
            "duration_s": round(self.duration_s, 3),
            "grace_rule": self.grace_rule,
            "grace_s": self.grace_s,
            "quiet_s": self.quiet_s,
            "sigkill_after_s": None if self.sigkill_after_s is None else round(self.sigkill_after_s, 3),
            **({"containment": self.containment} if self.containment is not None else {}),
        }


class TreeKiller:
    def __init__(
        self,
        tree: ProcessTree,
        reap: Callable[[], None],
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        poll_s: float = 0.05,
        quiet_s: float | None = QUIET_S,
    ) -> None:
        self.tree = tree
        self.reap = reap
        self.clock = clock
        self.sleep = sleep
        self.poll_s = poll_s
        self.quiet_s = quiet_s  # None: always the full grace
        #: the attempt's cgroup (``cgroup.AttemptCgroup``) when the kernel contains the tree
        self.cgroup: Any = None
        #: told the tree's members whenever a poll finds a new one (the guardian must know what
        #: a SIGTERM handler forked while we wait, should we die before the kill ends)
        self.on_members: Callable[[list[psutil.Process]], None] | None = None

    def forward(self, sig: int, pid: int, create_time: float) -> bool:
        """Pass ``sig`` (one we received) to the process group led by ``pid``.

        Only while ``pid`` is still the process that was launched (pid plus
        create time) and still a member of the tree; returns whether it was sent.
        """
        key = ProcKey(pid, create_time)
        proc = next((p for p in self.tree.members() if p.pid == pid), None)
        if proc is None or not is_running(proc, key) or same_process(key) is None:
            return False
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            return False  # exited between the check and the signal
        except PermissionError:
            return False
        return True

    def kill(self, grace: float, kill_timeout: float = 5.0, first_signal: int = signal.SIGTERM,
             pgids: frozenset[int] | None = None, launcher: int | None = None) -> KillReport:
        """Kill the tree; with ``pgids``, only the members in those process groups (an
        engine worker's group for an engine-level recovery: the rest of the tree lives on).
        ``launcher``: the root's pid when it is only a launcher (see the module docstring).
        A ``grace`` of 0 sends SIGKILL first: nobody is given time to clean up.

        The steps: the first signal (TERM), the grace (``_KillRun.wait_until``, adaptive), KILL
        for what is left (``_KillRun.escalate``), the wait after it, reaping, the report."""
        start = self.clock()
        kill_timeout = max(kill_timeout, MIN_KILL_TIMEOUT_S)
        if grace <= 0:
            first_signal = signal.SIGKILL
        run = _KillRun(self, start, grace, pgids, launcher)
        run.refresh()
        run.send(first_signal, run.alive())
        escalated: list[int] = []
        if first_signal == signal.SIGKILL:
            rule, sigkill_after = "none", 0.0
            self._kill_cgroup(pgids, run.signals, start)
            remaining, _ = run.wait_until(start + kill_timeout, signal.SIGKILL)
        else:
            remaining, early = run.wait_until(start + grace, first_signal, adaptive=True)
            rule = run.early_rule if early else ("grace" if remaining else "exited")
            sigkill_after = self.clock() - start if remaining else None
            if remaining:
                escalated = run.escalate(remaining, first_signal, rule)
                remaining, _ = run.wait_until(self.clock() + kill_timeout, signal.SIGKILL)
        self.reap()
        return KillReport(
            targets=tuple(run.described[k] for k in sorted(run.described)),
            signals=tuple(run.signals),
            escalated=tuple(escalated),
            survivors=run.survivors(remaining, kill_timeout),
            duration_s=self.clock() - start,
            grace_rule=rule,
            grace_s=grace,
            quiet_s=run.quiet,
            sigkill_after_s=sigkill_after,
        )

    def _kill_cgroup(self, pgids: frozenset[int] | None, signals: list[dict[str, Any]], start: float) -> None:
        """SIGKILL everything in the attempt's cgroup, seen or not yet, atomically with fork
        (a whole-tree kill only: an engine-level kill leaves the rest of the cgroup alive)."""
        if pgids is None and self.cgroup is not None and self.cgroup.kill():
            signals.append(_sig_record(f"cgroup {self.cgroup.path.name}", signal.SIGKILL, self.clock() - start))


class _KillRun:
    """One kill in progress: what it found (``known``, ``described``), what it sent to whom
    (``signals``, ``signalled``), and the grace's stillness clock."""

    def __init__(self, killer: TreeKiller, start: float, grace: float, pgids: frozenset[int] | None,
                 launcher: int | None) -> None:
        self.killer = killer
        self.start = start
        self.pgids = pgids
        self.launcher = launcher
        self.known: dict[ProcKey, psutil.Process] = {}
        self.described: dict[ProcKey, dict[str, Any]] = {}
        self.signals: list[dict[str, Any]] = []
        self.signalled: dict[ProcKey, int] = {}
        self.leaders: dict[ProcKey, psutil.Process] = {}  # targets that lead a session of their own (``_of_groups``)
        self.quiet = killer.quiet_s if killer.quiet_s is not None and killer.quiet_s < grace else None
        self.still = _Stillness()
        self.early_rule = "quiet"

    def _since_start(self) -> float:
        return self.killer.clock() - self.start

    def refresh(self) -> None:
        """Rescan the tree: newcomers become targets (with ``pgids``, only the groups' and
        the sessions they lead, escaped ones included: ``_of_groups``)."""
        killer = self.killer
        members = killer.tree.members()
        found = False
        targets = members if self.pgids is None else _of_groups(
            members, self.pgids, getattr(killer.tree, "last_stats", None), self.leaders,
            [p for k, p in self.known.items() if is_running(p, k)])
        for proc in targets:
            try:
                key = ProcKey.of(proc)
            except (psutil.Error, OSError):
                continue
            if key not in self.known:
                self.known[key] = proc
                self.described[key] = _describe(proc, key)
                found = True
        if found and killer.on_members is not None:
            killer.on_members(members)

    def alive(self) -> list[ProcKey]:
        return [k for k, p in self.known.items() if is_running(p, k)]

    def send(self, sig: int, keys: list[ProcKey]) -> None:
        """``sig`` to each of ``keys`` not sent it yet: by whole group where the group is ours, else by pid."""
        fresh = [k for k in keys if self.signalled.get(k) != sig]
        if not fresh:
            return
        ours = {k.pid for k in self.known}
        # The group as it is now, not as recorded: a process that left its group
        # (setsid in a SIGTERM handler) is not reached by the old group's killpg.
        current = {k: _pgid(k.pid) for k in fresh}
        for pgid in sorted({g for g in current.values() if g > 0}):
            if _group_is_ours(pgid, ours):
                try:
                    os.killpg(pgid, sig)
                    self.signals.append(_sig_record(f"pgid {pgid}", sig, self._since_start()))
                    for k in fresh:
                        if current[k] == pgid:
                            self.signalled[k] = sig
                except ProcessLookupError:
                    pass  # the whole group died between the check and the signal
        for key in fresh:
            # SIGKILL goes to every pid as well: it may have left the group between
            # the look and the killpg, and it is never reported unkillable unsent.
            covered = self.signalled.get(key) == sig
            if covered and sig != signal.SIGKILL:
                continue
            try:
                self.known[key].send_signal(sig)  # psutil re-verifies pid + create time
                if not covered:
                    self.signals.append(_sig_record(f"pid {key.pid}", sig, self._since_start()))
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                pass  # gone already, or not ours after all: never retry by pid
            self.signalled[key] = sig

    def wait_until(self, deadline: float, sig: int, adaptive: bool = False) -> tuple[list[ProcKey], bool]:
        """Poll until nothing is left or ``deadline``; the remaining, and whether an early rule
        (``adaptive``: the quiet rule, the launcher rule; ``early_rule`` says which) ended the wait."""
        killer = self.killer
        while True:
            killer.reap()
            self.refresh()
            self.send(sig, self.alive())  # newcomers forked while we wait
            remaining = self.alive()
            if not remaining or killer.clock() >= deadline:
                return remaining, False
            if adaptive and self.quiet is not None \
                    and self.still.for_(killer.clock(), remaining, self.known) >= self.quiet:
                return remaining, True
            if adaptive and self.launcher is not None and len(self.known) > 1 \
                    and [k.pid for k in remaining] == [self.launcher]:
                self.early_rule = "launcher"
                return remaining, True
            killer.sleep(killer.poll_s)

    def escalate(self, remaining: list[ProcKey], first_signal: int, rule: str) -> list[int]:
        """SIGKILL (the cgroup first, when the kernel contains the tree) for what outlived the
        grace, each one logged with the rule that ended it; their pids."""
        waited = self._since_start()
        escalated = []
        for key in remaining:
            d = self.described[key]
            why = {"quiet": f"with no CPU and no exit for {self.quiet or 0:g} s (wedged)",
                   "launcher": "after every other process was gone (a launcher)"}.get(rule, "for the full grace")
            log.warning(
                "ignored_sigterm",
                message=(
                    f"{d['name']} (pid {key.pid}, pgid {d['pgid']}) ignored "
                    f"{signal.Signals(first_signal).name} {why}, {waited:.1f} s; sending SIGKILL"
                ),
            )
            escalated.append(key.pid)
        self.killer._kill_cgroup(self.pgids, self.signals, self.start)
        self.send(signal.SIGKILL, remaining)
        return escalated

    def survivors(self, remaining: list[ProcKey], kill_timeout: float) -> tuple[dict[str, Any], ...]:
        """What outlived SIGKILL too, with its state (D: I/O that hangs), each one logged."""
        out = []
        for key in remaining:
            d = dict(self.described[key])
            d["state"] = _state(self.known[key])
            out.append(d)
            log.error(
                "survived_sigkill",
                message=f"{d['name']} (pid {key.pid}) still alive {kill_timeout:.0f} s after SIGKILL, state {d['state']}",
            )
        return tuple(out)


def _of_groups(members: list[psutil.Process], pgids: frozenset[int], stats: Any,
               leaders: dict[ProcKey, psutil.Process], targeted: list[psutil.Process]) -> list[psutil.Process]:
    """What a kill of the process groups ``pgids`` (an engine worker's) must take: the members in
    them, the members in a session one of them leads (the worker starts its own), and every member
    descended from any of these or from a process ``targeted`` already, to a fixed point (a
    descendant's own session, a zombie leader's too). A child of the worker that
    left its group (``setpgid``, ``setsid``: a compile helper, an engine core of its own) is still
    the worker's: killing the group alone left it running, orphaned, holding what it held (GPU
    memory) until the whole attempt ended. ``leaders`` (updated here) are the session leaders
    among the targets: a session counts only while its leader is the same process, so a session
    id reused since is never taken for the worker's. ``stats``: the tree's last /proc scan
    (pid -> ``proctree.ProcStat``), for the parents; psutil's where it has none."""
    def pgid_sid(pid: int) -> tuple[int, int]:
        try:
            return os.getpgid(pid), os.getsid(pid)
        except OSError:
            return -1, -1

    ids = {p.pid: pgid_sid(p.pid) for p in members}
    by_pid = {p.pid: p for p in members}
    chosen = {p.pid for p in members if ids[p.pid][0] in pgids}
    children: dict[int, list[int]] = {}
    for proc in members:
        st = stats.get(proc.pid) if isinstance(stats, dict) else None
        try:
            ppid = st.ppid if st is not None else proc.ppid()
        except psutil.Error:
            continue
        children.setdefault(ppid, []).append(proc.pid)
    stack = [*chosen, *(p.pid for p in targeted)]
    # To a fixed point: a descendant that leads a session of its own (a child that left the worker's
    # group with setsid, forked the real helper and exited, unreaped) holds in it what no walk reaches
    # (the helper was reparented to us). Taken only from the groups' members, such a session was missed.
    for _ in range(len(members) + 1):
        while stack:
            for child in children.get(stack.pop(), ()):
                if child not in chosen:
                    chosen.add(child)
                    stack.append(child)
        for pid in chosen:
            if ids.get(pid, (-1, -1))[1] == pid:
                try:
                    leaders.setdefault(ProcKey.of(by_pid[pid]), by_pid[pid])
                except (psutil.Error, OSError, KeyError):
                    continue
        # Still the same process, a zombie too: its pid, and so its session's id, is not free while it is one.
        sessions = {k.pid for k in leaders if same_process(k) is not None}
        stack = [pid for pid, (_, sid) in ids.items() if sid in sessions and pid not in chosen]
        if not stack:
            break
        chosen.update(stack)
    return [p for p in members if p.pid in chosen]


def _describe(proc: psutil.Process, key: ProcKey) -> dict[str, Any]:
    try:
        name = proc.name()
    except psutil.Error:
        name = "?"
    try:
        pgid = os.getpgid(key.pid)
    except OSError:
        pgid = -1
    return {"pid": key.pid, "create_time": key.create_time, "pgid": pgid, "name": name}


def _pgid(pid: int) -> int:
    try:
        return os.getpgid(pid)
    except OSError:
        return -1


def _state(proc: psutil.Process) -> str:
    try:
        return proc.status()
    except psutil.Error:
        return "gone"


def _group_is_ours(pgid: int, our_pids: set[int]) -> bool:
    if pgid not in our_pids:
        # The leader is gone or not ours: a group whose leader we cannot vouch
        # for is signalled member by member.
        return False
    for proc in psutil.process_iter():
        try:
            if os.getpgid(proc.pid) == pgid and proc.pid not in our_pids:
                return False
        except (OSError, psutil.Error):
            continue
    return True


def _sig_record(target: str, sig: int, at: float) -> dict[str, Any]:
    return {"target": target, "signal": signal.Signals(sig).name, "t": round(at, 3)}


class _Stillness:
    """How long the remaining processes have all been still: no CPU time, no I/O,
    not in disk sleep, none exited and none new. Anything unreadable counts as
    activity (the safe side: the full grace)."""

    def __init__(self) -> None:
        self.since: float | None = None
        self.last: dict[ProcKey, tuple[float, int]] = {}

    def for_(self, now: float, remaining: list[ProcKey], known: dict[ProcKey, psutil.Process]) -> float:
        current: dict[ProcKey, tuple[float, int]] = {}
        active = False
        for key in remaining:
            reading = _activity(known[key])
            if reading is None:
                active = True
                continue
            current[key] = reading
            before = self.last.get(key)
            if before is None or reading[0] - before[0] > _CPU_EPS_S or reading[1] != before[1]:
                active = True
        if set(current) != set(self.last):
            active = True  # an exit or a newcomer
        self.last = current
        if active or self.since is None:
            self.since = now
        return now - self.since


def _activity(proc: psutil.Process) -> tuple[float, int] | None:
    """(CPU seconds, characters read + written), or None when the process is in
    disk sleep (I/O in flight) or cannot be read."""
    try:
        with proc.oneshot():
            if proc.status() == psutil.STATUS_DISK_SLEEP:
                return None
            times = proc.cpu_times()
        try:
            io = proc.io_counters()
            chars = int(getattr(io, "read_chars", io.read_bytes)) + int(getattr(io, "write_chars", io.write_bytes))
        except (psutil.Error, AttributeError, NotImplementedError):
            chars = 0
        return times.user + times.system, chars
    except Exception:  # noqa: BLE001  (psutil errors, or a stand-in without these methods)
        return None
