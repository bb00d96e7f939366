"""The per-rank progress rule's bookkeeping: each trainer process's last progress, judged on its own.

Every process that imports ``hangwatch.trainer`` beats into its own file (``Sample.beats``), so one
stuck rank is seen while another beats. Each process (by pid; a verdict names it by its rank where
``RANK``/``LOCAL_RANK`` say it) that has beaten, is alive in the tree and has not sent its final beat
is judged against the progress timeout of its own last beat's phase.

Ranks wait for one another. When rank 0 evaluates or saves alone (its beats in a phase other than
train), the others sit in a collective, silent and healthy, for as long as that takes. So a process's
clock is held while another live process is in a non-train phase that began after this process's last
beat (it may be waiting for it), and runs again from that phase's end. A phase that began before (a
rollout worker that beats ``generate`` all along, beside the trainer) holds nothing: it cannot be what
the silent process waits for. A rank stuck meanwhile is caught one timeout after the other is back.
Pure: samples and time in; the detector asks ``stuck`` at each tick.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from hangwatch.contract.heartbeat import Heartbeat
from hangwatch.contract.samples import Sample
from hangwatch.supervisor.decide.learned_timeout import TRAIN_PHASES


@dataclass
class _Process:
    token: tuple[int, int]
    since: float  # when its beat last changed (read)
    beat: Heartbeat
    # Its latest run of beats in a non-train phase: (start, end; None while it lasts), or None.
    other_phase: tuple[float, float | None] | None = None


class RankClocks:
    """Each beating process's last progress; ``observe`` returns the one closest to its timeout."""

    def __init__(self) -> None:
        self._procs: dict[int, _Process] = {}

    def __len__(self) -> int:
        return len(self._procs)

    def shift(self, seconds: float) -> None:
        """Time the supervisor did not run (``Detector.unobserved``) is no silence of any process."""
        for proc in self._procs.values():
            proc.since += seconds
            if proc.other_phase is not None:
                start, end = proc.other_phase
                proc.other_phase = (start + seconds, end + seconds if end is not None else None)

    def observe(self, sample: Sample, timeout_for: Callable[[str | None], float | None],
                learn: Callable[[float, str | None, float], None]) -> tuple[float, float, Heartbeat] | None:
        """Note this tick's beats; (since, timeout, beat) of the judged process with the least time
        left, or None. ``learn(previous beat's time, its phase, now)`` is told each new beat. A process
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
                    proc.other_phase = (t, None)
            elif proc.token != hb.token:
                learn(proc.since, proc.beat.phase, t)
                was_train = proc.beat.phase in TRAIN_PHASES
                if hb.phase not in TRAIN_PHASES and was_train:
                    proc.other_phase = (t, None)
                elif hb.phase in TRAIN_PHASES and not was_train and proc.other_phase is not None:
                    proc.other_phase = (proc.other_phase[0], t)
                proc.token, proc.since, proc.beat = hb.token, t, hb
        worst: tuple[float, float, Heartbeat] | None = None
        worst_left = 0.0
        for pid, proc in procs.items():
            hb = proc.beat
            if hb.final or pid not in sample.cpu_pct:
                continue
            timeout = timeout_for(hb.phase)
            if timeout is None:
                continue
            since = self._held_until(pid, proc, sample)
            if since is None:
                continue
            left = since + timeout - t
            if worst is None or left < worst_left:
                worst, worst_left = (since, timeout, hb), left
        return worst

    def _held_until(self, pid: int, proc: _Process, sample: Sample) -> float | None:
        """When ``proc``'s clock started: its last progress, or the end of another live process's
        non-train phase that began after it; None while such a phase lasts."""
        since = proc.since
        for other_pid, other in self._procs.items():
            if other_pid == pid or other.other_phase is None or other_pid not in sample.cpu_pct or other.beat.final:
                continue
            start, end = other.other_phase
            if start < proc.since:
                continue  # it began before this process's last beat: not what it waits for
            if end is None:
                return None
            since = max(since, end)
        return since
