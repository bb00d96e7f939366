"""The metrics textfile once nobody rewrites it, and two runs given one textfile."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(60)

ROOT = Path(__file__).resolve().parents[3]


def _metrics(text: str) -> dict[str, float]:
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


@pytest.mark.slow
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


@pytest.mark.slow
def test_a_second_run_on_the_same_textfile_is_refused_while_the_first_writes_it(tmp_path):
    """Several runs on one host from one config file shared the textfile and rewrote it in turn:
    each run's values (and a finished run's outcome) came and went with the other's."""
    textfile = tmp_path / "hangwatch.prom"
    go = tmp_path / "go"
    waiter = (f"import os, time\nend = time.monotonic() + 40\n"
              f"while not os.path.exists({str(go)!r}) and time.monotonic() < end:\n    time.sleep(0.05)\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    common = ["--gpu-probe", "none", "--quiet", "--heartbeat-warning", "0", "--interval", "0.2",
              "--metrics-textfile", str(textfile)]
    first = subprocess.Popen([sys.executable, "-m", "hangwatch.cli", "run", "--run-dir", str(tmp_path / "a"), *common,
                              "--", sys.executable, "-c", waiter], cwd=tmp_path, env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while not textfile.exists() and time.monotonic() < deadline:
            time.sleep(0.05)  # written once claimed
        second = subprocess.run([sys.executable, "-m", "hangwatch.cli", "run", "--run-dir", str(tmp_path / "b"),
                                 *common, "--", sys.executable, "-c", "pass"],
                                cwd=tmp_path, env=env, capture_output=True, text=True, timeout=40)
        assert second.returncode == 2 and "another run writes it" in second.stderr, second.stderr
        assert str(tmp_path / "a") in second.stderr  # names the run that holds it
    finally:
        go.touch()
        _, err = first.communicate(timeout=40)
    assert first.returncode == 0, err
    assert _metrics(textfile.read_text())["hangwatch_supervisor_running"] == 0
