"""One sampling tick: the tree's CPU, the GPU probe and the heartbeats (the shared one and each
trainer process's own), as a ``Sample``;
and the bounded window of recent samples an incident bundle keeps as evidence."""

from __future__ import annotations

import collections
import time
from pathlib import Path
from typing import Callable

import psutil

from hangwatch.contract.heartbeat import (Heartbeat, engine_heartbeat_path, read_engine_beacons, read_heartbeat,
                                          read_rank_beacons)
from hangwatch.supervisor.watch.probes import GpuProbe
from hangwatch.supervisor.watch.proctree import CpuMeter, ProcessTree
from hangwatch.contract.samples import Sample


class Sampler:
    def __init__(
        self,
        tree: ProcessTree,
        probe: GpuProbe,
        heartbeat_path: Path | None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.tree = tree
        self.probe = probe
        self.heartbeat_path = heartbeat_path
        self.engine_path = engine_heartbeat_path(heartbeat_path) if heartbeat_path else None
        self.clock = clock
        self.cpu = CpuMeter(clock)
        self.last_members: list[psutil.Process] = []
        self._parents: dict[int, int] = {}

    def tick(self) -> Sample:
        members = self.tree.members()
        self.last_members = members
        cpu = self.cpu.measure([p.pid for p in members], self.tree.last_stats)
        gpu = self.probe.sample()
        # Each trainer process's own beat: a dead process's file left under a reused pid is not the new one's.
        # Read before the shared file, which a beat writes after its own: the shared rule never sees
        # a beat later than the per-rank rule does.
        beats = own_beats(read_rank_beacons(self.heartbeat_path), members) if self.heartbeat_path else ()
        hb = read_heartbeat(self.heartbeat_path) if self.heartbeat_path else None
        engine = read_engine_beacons(self.engine_path) if self.engine_path else ()
        parents: dict[int, int] = {}
        if engine:
            engine = own_beats(engine, members)
            # From the scan the members came from: no extra system call.
            stats = self.tree.last_stats
            parents = {p.pid: stats[p.pid].ppid for p in members if p.pid in stats}
            if parents == self._parents:  # the usual tick: one dict shared by the window's samples
                parents = self._parents
            self._parents = parents
        return Sample(t=self.clock(), wall=time.time(), cpu_pct=cpu, gpu=gpu, heartbeat=hb, tree_size=len(members),
                      engine=engine, parents=parents, beats=beats)


# A beat is written after its process started; psutil's start time is good to about a
# second (the boot time it counts from is whole seconds). Older than this: not that process's.
_BEAT_BEFORE_START_S = 5.0


def own_beats(beats: tuple[Heartbeat, ...], members: list[psutil.Process]) -> tuple[Heartbeat, ...]:
    """The beats (an engine's, a trainer process's) written by the process that holds their pid now. A beat from before
    that process started is a dead worker's file left behind under a reused pid: judged as
    the new process's, its stale "in flight" would read as a stuck engine."""
    started: dict[int, float] = {}
    for proc in members:
        try:
            started[proc.pid] = proc.create_time()
        except psutil.Error:
            continue
    return tuple(b for b in beats if b.pid not in started or b.ts >= started[b.pid] - _BEAT_BEFORE_START_S)


class SampleWindow:
    """The last ``span_s`` seconds of samples, in bounded memory at any interval.

    The capture needs the window that led to a verdict (up to the progress
    timeout, 600 s by default). Kept tick by tick, that is 630 samples at the
    default 1 s interval but 120,000 (~120 MB) at 0.005 s, which made the
    supervisor's RSS climb for the first ten minutes of every attempt. So the
    newest ``recent`` (1024) samples are kept whole and older ones thinned to
    one per ``span_s / older`` seconds (5.25 s at the defaults): at most
    ``recent + older + 1`` samples (~1.2 MB), and at the default interval
    nothing is thinned. Thinned samples stay inside the detector's gap
    tolerance (>= 10 s), so a replay of the bundle still sees the whole window.
    """

    def __init__(self, span_s: float, *, recent: int = 1024, older: int = 120) -> None:
        self.span_s = span_s
        self._recent: collections.deque[Sample] = collections.deque(maxlen=recent)
        self._older: collections.deque[Sample] = collections.deque(maxlen=older + 1)
        self._step = span_s / older

    def append(self, sample: Sample) -> None:
        recent = self._recent
        if len(recent) == recent.maxlen:
            evicted = recent[0]
            older = self._older
            if not older or evicted.t - older[-1].t >= self._step:
                older.append(evicted)
        recent.append(sample)
        horizon = sample.t - self.span_s
        older = self._older
        while older and older[0].t < horizon:
            older.popleft()
        while not older and recent[0].t < horizon:
            recent.popleft()

    def __len__(self) -> int:
        return len(self._older) + len(self._recent)

    def snapshot(self) -> list[Sample]:
        """Oldest first, as the bundle stores them."""
        return [*self._older, *self._recent]
