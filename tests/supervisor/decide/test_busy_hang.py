"""A busy hang with real processes: the trainer beats, then spins the CPU forever.
The whole-tree-idle rule never fired on it; the progress rule must, within the
progress timeout + 1 interval of the last beat it saw."""

from __future__ import annotations

import sys

import pytest

from hangwatch.contract.journal import read_journal
from hangwatch.supervisor.recover.fallback_capture import SamplesOnlyCapture
from hangwatch.supervisor.config import SETTINGS, build
from hangwatch.supervisor.watch.probes import NoProbe
from hangwatch.supervisor.runner import Supervisor

pytestmark = pytest.mark.timeout(60)

PRELUDE = "import os, threading, time\nfrom hangwatch.trainer import beat\nstep = 0\n"
STEPS = "for step in range(5):\n    beat(step=step, phase='train'); time.sleep(0.1)\n"
# Each spins until a deadline and then exits 0: a hang the supervisor misses ends as "done".
SPIN_UNTIL = "end = time.time() + 15\nwhile time.time() < end:\n    pass\n"
HANGS = {
    "spin": PRELUDE + STEPS + SPIN_UNTIL,
    # A child spins while the trainer sleeps waiting for it.
    "child_spins": PRELUDE + STEPS + "if os.fork() == 0:\n    " + SPIN_UNTIL.replace("\n", "\n    ")
    + "os._exit(0)\nos.wait()\n",
}
INTERVAL, TIMEOUT = 0.5, 2.0


@pytest.mark.slow
@pytest.mark.parametrize("hang", sorted(HANGS))
def test_a_spinning_hang_is_detected_within_the_progress_timeout_plus_one_interval(tmp_path, hang):
    values = {k: v[1] for k, v in SETTINGS.items()}
    values.update(run_dir=str(tmp_path / "run"), gpu_probe="none", interval=INTERVAL, progress_timeout=TIMEOUT,
                  max_restarts=0, grace=2.0, quiet=True)
    config = build(values, [sys.executable, "-c", HANGS[hang]])
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
