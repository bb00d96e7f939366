"""One sampling tick: the tree's CPU, the GPU probe and the heartbeat, as a ``Sample``."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

import psutil

from hangwatch.contract.heartbeat import read_heartbeat
from hangwatch.supervisor.probes import GpuProbe
from hangwatch.supervisor.proctree import CpuMeter, ProcessTree
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
        self.clock = clock
        self.cpu = CpuMeter(clock)
        self.last_members: list[psutil.Process] = []

    def tick(self) -> Sample:
        members = self.tree.members()
        self.last_members = members
        cpu = self.cpu.measure([p.pid for p in members], self.tree.last_stats)
        gpu = self.probe.sample()
        hb = read_heartbeat(self.heartbeat_path) if self.heartbeat_path else None
        return Sample(t=self.clock(), wall=time.time(), cpu_pct=cpu, gpu=gpu, heartbeat=hb, tree_size=len(members))
