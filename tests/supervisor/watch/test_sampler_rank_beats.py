"""The sampler reads every trainer process's own beat file into ``Sample.beats``, beside the shared
heartbeat; a file older than the process that now holds its pid is a dead process's, not read."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from hangwatch.contract.heartbeat import rank_beacon_file
from hangwatch.supervisor.watch.probes import NoProbe
from hangwatch.supervisor.watch.proctree import ProcessTree
from hangwatch.supervisor.watch.sampler import Sampler

pytestmark = pytest.mark.timeout(30)


def _write(path: str, pid: int, ts: float, rank: int | None = None) -> None:
    record = {"pid": pid, "seq": 1, "ts": ts, "step": 1, "phase": "train", "info": {}}
    if rank is not None:
        record["rank"] = rank
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(record, handle)


def test_each_process_beat_file_reaches_the_sample_and_a_dead_ones_stale_file_does_not(tmp_path):
    heartbeat = tmp_path / "heartbeat.json"
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        _write(str(heartbeat), child.pid, time.time(), rank=1)
        _write(rank_beacon_file(heartbeat, child.pid), child.pid, time.time(), rank=1)
        sampler = Sampler(ProcessTree(os.getpid()), NoProbe(), heartbeat)
        sample = sampler.tick()
        assert [(b.pid, b.rank) for b in sample.beats] == [(child.pid, 1)]
        assert sample.heartbeat is not None and sample.heartbeat.rank == 1
        # The child's pid, but a beat from long before it started: a dead process's file left behind.
        _write(rank_beacon_file(heartbeat, child.pid), child.pid, 1.0, rank=1)
        assert sampler.tick().beats == ()
    finally:
        child.kill()
        child.wait(timeout=10)
