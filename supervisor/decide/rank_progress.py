"""The per-rank progress rule's bookkeeping: each trainer process's last progress, judged on its own.

Every process that imports ``hangwatch.trainer`` beats into its own file (``Sample.beats``), so one
stuck rank is seen while another beats. Each process (by pid; a verdict names it by its rank where
``RANK``/``LOCAL_RANK`` say it) that has beaten, is alive in the tree and has not sent its final beat
is judged against the progress timeout of its own last beat's phase.

Ranks wait for one another. When rank 0 evaluates or saves alone (its beats in a phase other than
train), the others sit in a collective, silent and healthy, for as long as that takes. So a process's
clock is paused while another live process is in a non-train phase that began after this process's
last beat (it may be waiting for it), and goes on from where it was at that phase's end: its silence
is judged less the time it may have waited. A phase that began before (a rollout worker that beats
``generate`` all along, beside the trainer) pauses nothing: it cannot be what the silent process
waits for. Paused, not restarted: a stuck rank is caught even while rank 0 evaluates or saves more
often than the timeout, only later by the time those took.
Pure: samples and time in; the detector asks ``stuck`` at each tick.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field
from typing import Callable

from hangwatch.contract.heartbeat import Heartbeat
from hangwatch.contract.samples import Sample
from hangwatch.supervisor.decide.learned_timeout import TRAIN_PHASES


@dataclass
class _Process:
    token: tuple[int, int]
    since: float  # when its beat last changed (read)
    beat: Heartbeat
    # Its latest runs of beats in a non-train phase: [start, end], end None while it lasts.
    other_phases: collections.deque[list] = field(default_factory=lambda: collections.deque(maxlen=_RUNS_KEPT))


# Non-train runs kept per process: a silent process waits for those since its last beat, a few at most
# within any timeout (an evaluation, a save); older ones started before any judged silence.
_RUNS_KEPT = 32


class RankClocks:
    """Each beating process's last progress; ``observe`` returns the one closest to its timeout."""

    def __init__(self) -> None:
        self._procs: dict[int, _Process] = {}

    def __len__(self) -> int:
        return len(self._procs)

    def last_progress(self, pid: int, default: float) -> float:
        """When process ``pid`` last beat (as read), ``default`` for one not known."""
        proc = self._procs.get(pid)
        return proc.since if proc is not None else default

    def shift(self, seconds: float) -> None:
        """Time the supervisor did not run (``Detector.unobserved``) is no silence of any process."""
        for proc in self._procs.values():
            proc.since += seconds
            for run in proc.other_phases:
                run[0] += seconds
                if run[1] is not None:
                    run[1] += seconds

    def observe(self, sample: Sample, timeout_for: Callable[[str | None], float | None],
                learn: Callable[[float, str | None, float], None]) -> tuple[float, float, Heartbeat] | None:
        """Note this tick's beats; (since, timeout, beat) of the judged process with the least time
        left, or None. The process whose beat is the shared file's (the newest of all) is left to the
        shared rule: its silence is the whole job's, and that rule's verdict says so. ``learn(previous beat's time, its phase, now)`` is told each new beat. A process
        whose file is gone is forgotten; one missing from the tree this tick is not judged, but keeps
        its clock (one failed read of the tree must not restart it)."""
        procs = self._procs
        if not sample.beats:
            procs.clear()
            return None
        t = sample.t
        seen = {b.pid for b in sample.beats}
        for gone in [pid for pid in procs if pid not in seen]:
            del procs[gone]
        for hb in sample.beats:
            proc = procs.get(hb.pid)
            if proc is None:
                proc = procs[hb.pid] = _Process(hb.token, t, hb)
                if hb.phase not in TRAIN_PHASES:
                    proc.other_phases.append([t, None])
            elif proc.token != hb.token:
                # The interval the rule judged (its silence less the pauses), none while paused.
                start = self._clock_start(hb.pid, proc, sample)
                if start is not None:
                    learn(start, proc.beat.phase, t)
                was_train = proc.beat.phase in TRAIN_PHASES
                if hb.phase not in TRAIN_PHASES and was_train:
                    proc.other_phases.append([t, None])
                elif hb.phase in TRAIN_PHASES and not was_train and proc.other_phases:
                    proc.other_phases[-1][1] = t
                proc.token, proc.since, proc.beat = hb.token, t, hb
        worst: tuple[float, float, Heartbeat] | None = None
        worst_left = 0.0
        shared = sample.heartbeat.token if sample.heartbeat is not None else None
        for pid, proc in procs.items():
            hb = proc.beat
            if hb.final or pid not in sample.cpu_pct or hb.token == shared:
                continue  # the newest beat of all is the shared rule's to judge (a single process's, say)
            timeout = timeout_for(hb.phase)
            if timeout is None:
                continue
            since = self._clock_start(pid, proc, sample)
            if since is None:
                continue
            left = since + timeout - t
            if worst is None or left < worst_left:
                worst, worst_left = (since, timeout, hb), left
        return worst

    def _clock_start(self, pid: int, proc: _Process, sample: Sample) -> float | None:
        """Where ``proc``'s clock would have started had it never been paused: its last progress plus
        the time other live processes spent since then in non-train phases that began after it
        (merged, so two ranks saving at once count once); None while such a phase lasts."""
        t = sample.t
        runs: list[tuple[float, float]] = []
        for other_pid, other in self._procs.items():
            if other_pid == pid or other_pid not in sample.cpu_pct or other.beat.final:
                continue
            for start, end in other.other_phases:
                if start < proc.since:
                    continue  # it began before this process's last beat: not what it waits for
                if end is None:
                    return None
                runs.append((start, end))
        if not runs:
            return proc.since
        runs.sort()
        paused, cur_start, cur_end = 0.0, runs[0][0], runs[0][1]
        for start, end in runs[1:]:
            if start > cur_end:
                paused += cur_end - cur_start
                cur_start, cur_end = start, end
            else:
                cur_end = max(cur_end, end)
        paused += min(cur_end, t) - cur_start
        return proc.since + paused
