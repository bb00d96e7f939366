"""The GPU probes: the file probe's missing, malformed and dead-holder cases."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from hangwatch.supervisor.watch.probes import FileProbe


pytestmark = pytest.mark.timeout(30)


def test_file_probe_missing_malformed_and_dead_holders(tmp_path):
    path = tmp_path / "gpu.json"
    probe = FileProbe(path)
    assert probe.sample() is None
    path.write_text("{oops")
    assert probe.sample() is None
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    path.write_text(json.dumps({"devices": [
        {"index": 0, "util_pct": 100, "mem_used_mib": 40000, "pids": [os.getpid()]},
        {"index": 1, "util_pct": 100, "mem_used_mib": 40000, "pids": [dead.pid]},
        {"index": 2, "util_pct": 100, "mem_used_mib": 10},
    ]}))
    d0, d1, d2 = probe.sample()
    assert (d0.util_pct, d0.pids) == (100.0, (os.getpid(),))
    assert (d1.util_pct, d1.mem_used_mib, d1.pids) == (0.0, 0.0, ()), "a dead process holds nothing"
    assert d2.pids is None, "no pids listed means ownership unknown"
