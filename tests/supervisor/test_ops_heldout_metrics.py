"""Held-out metrics cases: what a textfile says once nobody rewrites it."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(60)

ROOT = Path(__file__).resolve().parents[2]


def _metrics(text: str) -> dict[str, float]:
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


def test_the_textfile_keeps_the_last_heartbeats_time_so_a_rule_can_age_it(tmp_path):
    """The textfile carried the heartbeat's age as computed at its last write: once the
    supervisor was gone (OOM-killed) the file said "watching, last beat 0.04 s ago" forever and
    no "no heartbeat" rule could fire. It now also carries the beat's own wall-clock time."""
    textfile = tmp_path / "hangwatch.prom"
    run_dir = tmp_path / "run"
    trainer = ("import time\nfrom hangwatch.trainer import beat\n"
               "for i in range(1, 4):\n    beat(step=i, phase='train'); time.sleep(0.3)\n")
    proc = subprocess.run([sys.executable, "-m", "hangwatch.cli", "run", "--run-dir", str(run_dir), "--gpu-probe",
                           "none", "--interval", "0.1", "--quiet", "--metrics-textfile", str(textfile), "--",
                           sys.executable, "-c", trainer],
                          cwd=tmp_path, env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True, text=True,
                          timeout=50)
    assert proc.returncode == 0, proc.stderr
    metrics = _metrics(textfile.read_text())
    beat = json.loads(next(run_dir.glob("attempts/*/heartbeat.json")).read_text())
    stamp = metrics.get("hangwatch_last_heartbeat_timestamp_seconds", math.nan)
    assert stamp == pytest.approx(beat["ts"], abs=1e-3), metrics
    assert metrics["hangwatch_last_heartbeat_step"] == beat["step"] == 3
