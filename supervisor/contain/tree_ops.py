"""The supervised tree's side effects, behind one small interface.

``TreeOps`` is everything the runner does to processes: launch the trainer,
reap it, sample the tree, describe it for the capture, forward a signal, kill
it, record its members for the guardian. ``LocalTree`` is the real
implementation (Popen, /proc, signals, NVML through the probe); tests drive the
runner with a fake that records what was asked of it.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Protocol, Sequence

import psutil

from hangwatch.contract import env as names
from hangwatch.contract.capture import TreeProcess
from hangwatch.contract.samples import Sample
from hangwatch.supervisor.contain.cgroup import AttemptCgroup, Containment
from hangwatch.supervisor.contain.guardian import MARK_SLACK_S
from hangwatch.supervisor.contain.killer import KillReport, TreeKiller
from hangwatch.supervisor.contain.launcher import Reaper, TrainerProcess, launch
from hangwatch.supervisor.contain.prewarm import Prewarmer
from hangwatch.supervisor.watch.probes import GpuProbe
from hangwatch.supervisor.watch.proctree import ProcessTree, describe
from hangwatch.supervisor.watch.sampler import Sampler
from hangwatch.supervisor.contain.members_file import TreeFile


class Trainer(Protocol):
    """A launched trainer command (``launcher.TrainerProcess`` is the real one)."""

    pid: int
    create_time: float
    stdout_path: Path
    stderr_path: Path

    def join_output(self, timeout: float) -> None: ...


class TreeOps(Protocol):
    def launch(self, argv: Sequence[str], env: Mapping[str, str], attempt_dir: Path) -> Trainer:
        """Start the trainer in its own session; raises ``launcher.LaunchError``."""

    def exit_code(self, trainer: Trainer) -> int | None:
        """Reap what has exited; the trainer's status (``-N``: signal N) or None while it runs."""

    def watch(self, heartbeat: Path) -> None:
        """Start a fresh sampling series (a new attempt) that reads ``heartbeat``."""

    def sample(self) -> Sample:
        """One tick: the tree's CPU, the GPU, the heartbeat; also records the members."""

    def describe(self) -> list[TreeProcess]:
        """The tree's processes now, for the capture."""

    def forward(self, sig: int, trainer: Trainer) -> None:
        """Pass a signal we received to the trainer's process group (if it is still ours)."""

    def kill(self, grace: float, kill_timeout: float, launcher: int | None = None) -> KillReport | None:
        """Kill every process of the tree; None when there was nothing to kill. ``launcher``:
        the root's pid when it is only a launcher, SIGKILLed once everything else is gone."""

    def kill_groups(self, pgids: frozenset[int], grace: float, kill_timeout: float) -> KillReport | None:
        """Kill only the members in ``pgids`` (an engine worker's group); None when none was there."""


class LocalTree:
    """The real tree: a subreaper's descendants, scanned from /proc."""

    def __init__(self, run_dir: Path, probe: GpuProbe, *, echo: bool = True,
                 clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep,
                 containment: Containment | None = None, log_limit: Callable[[], int] | None = None) -> None:
        self.probe = probe
        self.echo = echo
        self.clock = clock
        self.tree = ProcessTree()
        self.reaper = Reaper(self.tree)
        self.killer = TreeKiller(self.tree, self.reaper.reap, clock=clock, sleep=sleep)
        self.treefile = TreeFile(run_dir / "tree.json")
        self._sampler: Sampler | None = None
        #: the run's cgroup when the kernel contains the tree (``cgroup.detect``); None: the tree walk
        self.containment = containment
        self.log_limit = log_limit  # the trainer logs' cap, read per write (launcher.CappedLog)
        self._cgroup: AttemptCgroup | None = None
        self._members: list[psutil.Process] = []
        self._marks: list[list[Any]] = []  # the guardian's marks of this attempt's processes (guardian.py)
        self._guardian: Callable[[dict[str, Any]], None] | None = None
        self._guardian_armed: Callable[[], bool] | None = None
        self._guardian_lock = threading.Lock()  # the main thread and the busy watcher both tell it
        self._last_look = time.monotonic()  # when the members were last read (a tick, a kill's poll)
        self._cadence = 1.0  # the time between the last two ticks
        self._closed = threading.Event()
        self.killer.on_members = self._seen
        #: the next attempt's warm launcher (``--prewarm-launcher``); None: every launch is cold
        self.prewarm: Prewarmer | None = None
        #: why every launch is cold when there is no ``prewarm`` (journaled with each attempt)
        self.cold_reason: str | None = None

    @property
    def containment_name(self) -> str:
        return "cgroup" if self.containment is not None else "tree"

    def attach_guardian(self, send: Callable[[dict[str, Any]], None], armed: Callable[[], bool] | None = None) -> None:
        """Keep the guardian told what to kill should we die (``guardian.Guardian.send``);
        ``armed`` says whether it is still there (``launch`` relies on it to kill a stopped root)."""
        self._guardian = send
        self._guardian_armed = armed
        self._tell_guardian()
        threading.Thread(target=self._watch_while_busy, name="guardian-watch", daemon=True).start()

    def _seen(self, members: list[psutil.Process]) -> None:
        """New members found by a look outside the tick (the killer's polls): the guardian first."""
        self._last_look = time.monotonic()
        self._tell_guardian(members)

    def _watch_while_busy(self) -> None:
        """While nothing else looks at the tree (a capture, a backoff, an engine restart: no
        ticks), look every ``WATCH_POLL_S`` and tell the guardian what is new, so that a worker
        that escaped meanwhile (a new session, and an environment without the attempt's mark)
        is not unknown to it should we die. With a cgroup too: a worker that moved itself out of
        the attempt's cgroup is beyond ``cgroup.kill`` (``proctree``). Its own ``ProcessTree``:
        the main thread's is not shared across threads."""
        tree = ProcessTree(source=lambda: self._cgroup.pids() if self._cgroup is not None else ())
        told: set[tuple[int, float]] = set()
        while not self._closed.wait(WATCH_POLL_S):
            if time.monotonic() - self._last_look < max(WATCH_IDLE_S, 2 * self._cadence):
                continue
            try:
                members = tree.members()
                keys = {(p.pid, p.create_time()) for p in members}
            except (OSError, psutil.Error):
                continue
            if keys - told:
                self._tell_guardian(members)
            told = keys

    def launch(self, argv: Sequence[str], env: Mapping[str, str], attempt_dir: Path) -> TrainerProcess:
        procs = None
        if self.containment is not None:
            self._cgroup = self.containment.new_attempt(attempt_dir.name)
            self.tree.source = self._cgroup.pids
            self.killer.cgroup = self._cgroup
            procs = self._cgroup.procs_file
        # Every process of the attempt inherits this from the trainer's environment, whatever it
        # does to its session or group, and however briefly nobody looked at the tree.
        mark = env.get(names.ATTEMPT_DIR)
        self._marks = [[f"{names.ATTEMPT_DIR}={mark}", time.time() - MARK_SLACK_S]] if mark else []
        if self.prewarm is not None and self.prewarm.warm_mark is not None:
            # A warm root's environment was fixed before it knew the attempt: its own mark (harmless
            # if it is not taken: an unused warm process is killed anyway).
            self._marks.append(self.prewarm.warm_mark)
        self._tell_guardian()  # before the trainer exists: no fork can beat it
        limit = {"log_limit": self.log_limit} if self.log_limit else {}
        trainer, how = None, {"mode": "cold", **({"reason": self.cold_reason} if self.cold_reason else {})}
        if self.prewarm is not None:
            trainer, how = self.prewarm.take(argv, env, attempt_dir, echo=self.echo, cgroup_procs=procs,
                                             death_signal=self._root_death_signal(), **limit)
        if trainer is None:
            trainer = launch(argv, env, attempt_dir, echo=self.echo, cgroup_procs=procs,
                             death_signal=self._root_death_signal(), **limit)
        trainer.launch = how  # journaled with attempt_started: warm, or cold and why
        if self.prewarm is not None:
            self.prewarm.launched(argv, env)  # the next attempt's warm process, once this one is up
        try:
            self._members = [psutil.Process(trainer.pid)]
        except psutil.Error:
            self._members = []
        self._tell_guardian()
        return trainer

    def _root_death_signal(self) -> int:
        """The root's parent-death signal. With the tree walk and an armed guardian: SIGSTOP.
        A root SIGKILLed by our death orphans its children at once, and one that reacts (a
        double fork of a bare worker: new session, no mark, its intermediate gone) is out of
        every tree before the guardian has read its EOF. Stopped, the root lives until the
        guardian kills it with everything under it, and nobody below sees a parent die. With a
        cgroup (nothing escapes it) or no guardian (nobody would kill a stopped root): SIGKILL."""
        armed = self._guardian_armed
        if self.containment is None and self._guardian is not None and armed is not None and armed():
            return signal.SIGSTOP
        return signal.SIGKILL

    def _tell_guardian(self, procs: list[psutil.Process] | None = None) -> None:
        if self._guardian is None:
            return
        with self._guardian_lock:
            self._tell_guardian_locked(self._members if procs is None else procs)

    def _tell_guardian_locked(self, procs: list[psutil.Process]) -> None:
        assert self._guardian is not None
        members, groups, sessions = [], set(), set()
        for proc in procs:
            try:
                members.append([proc.pid, proc.create_time()])
                groups.add(os.getpgid(proc.pid))
                sessions.add(os.getsid(proc.pid))
            except (OSError, psutil.Error):
                continue
        self._guardian({
            "cgroup": str(self._cgroup.path) if self._cgroup is not None else None,
            "members": members,
            "groups": sorted(groups),
            "sessions": sorted(sessions),
            "marks": self._marks,
        })

    def exit_code(self, trainer: Trainer) -> int | None:
        self.reaper.reap(also=[trainer.pid])
        code = self.reaper.exit_code(trainer.pid)
        if code is not None and isinstance(trainer, TrainerProcess):
            trainer.popen.returncode = code  # we reaped it; keep Popen consistent
        return code

    def watch(self, heartbeat: Path) -> None:
        self._sampler = Sampler(self.tree, self.probe, heartbeat, self.clock)

    def sample(self) -> Sample:
        assert self._sampler is not None, "watch() first"
        sample = self._sampler.tick()
        now = time.monotonic()
        self._cadence = min(5.0, max(0.01, now - self._last_look))
        self._last_look = now
        if self.prewarm is not None:
            self.prewarm.tick(beat_seen=sample.heartbeat is not None)  # here: the main thread, as spawning needs
        if self.treefile.update(self._sampler.last_members):
            self._members = list(self._sampler.last_members)
            self._tell_guardian()  # each new member as soon as it is seen
        return sample

    def describe(self) -> list[TreeProcess]:
        return [d for d in (describe(p) for p in self.tree.members()) if d is not None]

    def forward(self, sig: int, trainer: Trainer) -> None:
        self.killer.forward(sig, trainer.pid, trainer.create_time)

    def kill_groups(self, pgids: frozenset[int], grace: float, kill_timeout: float) -> KillReport | None:
        members = [p for p in self.tree.members() if _pgid(p.pid) in pgids]
        if not members:
            return None
        report = self.killer.kill(grace=grace, kill_timeout=kill_timeout, pgids=pgids)
        self._members = self.tree.members()
        self.treefile.update(self._members)
        return report

    def kill(self, grace: float, kill_timeout: float, launcher: int | None = None) -> KillReport | None:
        cg = self._cgroup
        if not self.tree.members():
            report = None
        else:
            report = self.killer.kill(grace=grace, kill_timeout=kill_timeout, launcher=launcher)
        self._members = self.tree.members()
        self.treefile.update(self._members)
        if cg is not None:
            if cg.populated():
                # Forked in the killer's last poll and never seen: the kernel still knows.
                cg.kill()
                deadline = self.clock() + kill_timeout
                while cg.populated() and self.clock() < deadline:
                    self.reaper.reap(also=cg.pids())
                    time.sleep(0.02)
            usage = cg.usage()
            if not cg.populated() and cg.remove(timeout=0.5):
                self._cgroup = self.killer.cgroup = None
            if report is not None:
                report = dataclasses.replace(report, containment={"kind": "cgroup", "cgroup": str(cg.path), **usage})
        elif report is not None:
            report = dataclasses.replace(report, containment={"kind": "tree"})
        self._tell_guardian()
        return report

    def close(self) -> None:
        """Kill an unused warm launcher; remove the run's (empty) cgroups."""
        self._closed.set()
        if self.prewarm is not None:
            self.prewarm.close()
        if self.containment is not None:
            self.containment.close()


# The busy watcher (tree walk only): how often it wakes, and how long nobody must have looked
# at the tree (at least two of the ticks' own intervals) before it looks itself.
WATCH_POLL_S = 0.25
WATCH_IDLE_S = 0.5


def _pgid(pid: int) -> int:
    try:
        return os.getpgid(pid)
    except OSError:
        return -1
