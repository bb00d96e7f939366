"""A busy hang with real processes: the trainer beats, then spins the CPU forever.
The whole-tree-idle rule never fired on it; the progress rule must, within the
progress timeout + 1 interval of the last beat it saw."""

from __future__ import annotations

import sys

import pytest

from hangwatch.contract.journal import read_journal
from hangwatch.supervisor.capture import SamplesOnlyCapture
from hangwatch.supervisor.config import SETTINGS, build
from hangwatch.supervisor.probes import NoProbe
from hangwatch.supervisor.runner import Supervisor

pytestmark = pytest.mark.timeout(60)

SPIN = (
    "import time\n"
    "from hangwatch.trainer import beat\n"
    "for step in range(5):\n"
    "    beat(step=step, phase='train'); time.sleep(0.1)\n"
    "while True:\n"
    "    pass\n"
)
INTERVAL, TIMEOUT = 0.5, 2.0


def test_a_spinning_hang_is_detected_within_the_progress_timeout_plus_one_interval(tmp_path):
    values = {k: v[1] for k, v in SETTINGS.items()}
    values.update(run_dir=str(tmp_path / "run"), gpu_probe="none", interval=INTERVAL, progress_timeout=TIMEOUT,
                  max_restarts=0, grace=2.0, quiet=True)
    config = build(values, [sys.executable, "-c", SPIN])
    config.run_dir.mkdir(parents=True)
    sup = Supervisor(config, NoProbe(), SamplesOnlyCapture())
    sup.run()
    records = read_journal(config.run_dir / "journal.jsonl")
    incidents = [r for r in records if r["event"] == "incident"]
    assert len(incidents) == 1, [r["event"] for r in records]
    incident = incidents[0]
    assert incident["kind"] == "silent_hang"
    assert incident["evidence"]["rule"] == "progress" and incident["evidence"]["tree"] == "busy"
    # Busy by the detector's own measure (a loaded machine shares the core): the idle rule would not fire.
    assert incident["evidence"]["tree_cpu_pct"] > config.detector.cpu_idle_pct, "the trainer was spinning"
    # Measured from the tick that saw the last beat, on the supervisor's own clock.
    assert TIMEOUT - 0.05 * INTERVAL <= incident["latency_s"] <= TIMEOUT + INTERVAL
    kill = next(r for r in records if r["event"] == "kill")
    assert kill["confirmed"]
