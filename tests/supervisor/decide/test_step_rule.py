"""The step rule (``--step-timeout``, opt-in): beats that go on while their step does not.

A livelock that beats each retry, or a side thread that beats on a timer while the training
loop is stuck, changes the beat's ``(pid, seq)`` at every beat, so the progress rule never
fires on them. With the step rule, a step that has not changed for ``step_timeout`` is a hang.
"""

from __future__ import annotations

import sys

import pytest

from hangwatch.contract.heartbeat import Heartbeat
from hangwatch.contract.journal import read_journal
from hangwatch.contract.samples import Sample
from hangwatch.contract.verdict import VerdictKind
from hangwatch.supervisor.recover.fallback_capture import SamplesOnlyCapture
from hangwatch.supervisor.config import SETTINGS, build
from hangwatch.supervisor.decide.detector import Detector, DetectorConfig
from hangwatch.supervisor.watch.probes import NoProbe
from hangwatch.supervisor.runner import Supervisor

TRAINER = 100


def _stream(steps, interval=1.0, phase="train", cpu=100.0):
    """One beat per tick, the step of each tick from ``steps``; wall = t (fresh beats)."""
    for i, step in enumerate(steps):
        t = float(i) * interval
        hb = Heartbeat(pid=TRAINER, seq=i + 1, ts=t, step=step, phase=phase)
        yield Sample(t=t, wall=t, cpu_pct={TRAINER: cpu}, gpu=None, heartbeat=hb)


def _first_verdict(config, samples):
    detector = None
    for sample in samples:
        if detector is None:
            detector = Detector(config, start=sample.t)
        verdict = detector.observe(sample)
        if verdict is not None:
            return verdict
    return None


def test_a_step_that_stops_advancing_while_beats_go_on_is_a_hang_within_the_timeout_plus_one_interval():
    config = DetectorConfig(interval=1.0, step_timeout=20.0)
    steps = list(range(10)) + [9] * 40  # step 9 from t=9 on, beats every second
    verdict = _first_verdict(config, _stream(steps))
    assert verdict is not None and verdict.kind is VerdictKind.SILENT_HANG
    assert verdict.evidence["rule"] == "step" and verdict.evidence["tree"] == "busy"
    assert verdict.onset == 9.0 and 29.0 <= verdict.detected_at <= 30.0
    assert "step 9 has not advanced" in verdict.reason


def test_off_by_default_and_never_on_beats_without_a_step_or_a_step_that_advances():
    steps = list(range(10)) + [9] * 40
    assert _first_verdict(DetectorConfig(interval=1.0), _stream(steps)) is None, "opt-in: the default never fires"
    config = DetectorConfig(interval=1.0, step_timeout=20.0)
    stepless = (Sample(t=s.t, wall=s.wall, cpu_pct=s.cpu_pct, gpu=None,
                       heartbeat=Heartbeat(pid=TRAINER, seq=s.heartbeat.seq, ts=s.wall, step=None, phase="train"))
                for s in _stream([0] * 50))
    assert _first_verdict(config, stepless) is None
    slow = [i // 15 for i in range(60)]  # a step every 15 s, each beaten 15 times: healthy
    assert _first_verdict(config, _stream(slow)) is None


def test_a_long_phase_stretches_the_step_timeout_as_it_does_the_progress_timeout():
    config = DetectorConfig(interval=1.0, step_timeout=20.0, phase_timeouts={"checkpoint": 100.0})
    assert _first_verdict(config, _stream([5] * 60, phase="checkpoint")) is None
    verdict = _first_verdict(config, _stream([5] * 120, phase="checkpoint"))
    assert verdict is not None and verdict.window == 100.0


def test_time_the_supervisor_did_not_observe_is_not_a_stuck_step():
    config = DetectorConfig(interval=1.0, step_timeout=20.0)
    samples = list(_stream([3] * 15))
    detector = Detector(config, start=0.0)
    for sample in samples:
        assert detector.observe(sample) is None
    detector.unobserved(100.0)  # the whole job was stopped and continued
    later = Sample(t=115.0, wall=115.0, cpu_pct={TRAINER: 100.0}, gpu=None,
                   heartbeat=Heartbeat(pid=TRAINER, seq=99, ts=115.0, step=3, phase="train"))
    assert detector.observe(later) is None


# Real processes: the loop is stuck (spinning in one case, blocked in the other) while beats go
# on with the same step: from a side thread, or from a retry loop that never gets past its step.
PRELUDE = "import threading, time\nfrom hangwatch.trainer import beat\n"
STEPS = "for step in range(4):\n    beat(step=step, phase='train'); time.sleep(0.1)\n"
END = "end = time.time() + 20\n"
HANGS = {
    "side_thread": PRELUDE + STEPS + END
    + "def side():\n    while time.time() < end:\n        beat(step=step, phase='train'); time.sleep(0.1)\n"
    + "threading.Thread(target=side, daemon=True).start()\nwhile time.time() < end:\n    pass\n",
    "livelock": PRELUDE + STEPS + END
    + "while time.time() < end:\n    beat(step=step, phase='train', retry=True); time.sleep(0.05)\n",
}
INTERVAL, STEP_TIMEOUT = 0.5, 2.0


@pytest.mark.slow
@pytest.mark.timeout(60)
@pytest.mark.parametrize("hang", sorted(HANGS))
def test_beats_without_step_progress_from_a_real_trainer_are_caught(tmp_path, hang):
    values = {k: v[1] for k, v in SETTINGS.items()}
    values.update(run_dir=str(tmp_path / "run"), gpu_probe="none", interval=INTERVAL, step_timeout=STEP_TIMEOUT,
                  max_restarts=0, grace=2.0, quiet=True)
    config = build(values, [sys.executable, "-c", HANGS[hang]])
    assert config.detector.step_timeout == STEP_TIMEOUT
    config.run_dir.mkdir(parents=True)
    Supervisor(config, NoProbe(), SamplesOnlyCapture()).run()
    records = read_journal(config.run_dir / "journal.jsonl")
    incidents = [r for r in records if r["event"] == "incident"]
    assert len(incidents) == 1, [r["event"] for r in records]
    incident = incidents[0]
    assert incident["kind"] == "silent_hang" and incident["evidence"]["rule"] == "step", incident
    # From the beat that first carried the stuck step, on the supervisor's clock: the timeout + 1 interval.
    assert STEP_TIMEOUT - 0.05 * INTERVAL <= incident["latency_s"] <= STEP_TIMEOUT + INTERVAL, incident["latency_s"]
    assert next(r for r in records if r["event"] == "kill")["confirmed"]


def test_a_busy_gpu_whose_holder_spins_is_caught_by_the_progress_rule_and_its_evidence_shows_the_spin():
    """A synchronize that spin-waits on a kernel that never ends (cudaDeviceScheduleSpin, the
    driver's choice with fewer contexts than cores): GPU 100 %, its holder at 100 % CPU, no beat.
    Not the stall signature (the holder is busy): the progress rule's silent_hang. Its evidence
    said holders_cpu_pct 0 beside gpu 100 %, the stall's picture, the opposite of what it saw."""
    from hangwatch.contract.samples import DeviceSample

    config = DetectorConfig(interval=1.0, stall_window=10.0, progress_timeout=30.0)
    detector = Detector(config, start=0.0)
    verdict = None
    for i in range(60):
        t = float(i)
        hb = Heartbeat(pid=TRAINER, seq=min(i, 5) + 1, ts=min(t, 5.0), step=min(i, 5), phase="train")
        gpu = (DeviceSample(index=0, util_pct=100.0, mem_used_mib=40000.0, pids=(TRAINER,)),)
        verdict = detector.observe(Sample(t=t, wall=t, cpu_pct={TRAINER: 99.0}, gpu=gpu, heartbeat=hb))
        if verdict is not None:
            break
    assert verdict is not None and verdict.kind is VerdictKind.SILENT_HANG
    assert verdict.evidence["rule"] == "progress" and verdict.detected_at == 35.0
    assert verdict.evidence["gpu_util_pct"] == 100.0 and verdict.evidence["holders_cpu_pct"] == 99.0


pytestmark = pytest.mark.timeout(30)


def test_the_step_rule_does_not_say_beats_went_on_when_they_stopped():
    """With --step-timeout below the progress timeout, a trainer whose beats stopped at step 9
    got 'step 9 has not advanced ... while beats went on': the reader went looking for a side
    thread that beats. The reason now gives the last beat's age."""
    from hangwatch.contract.heartbeat import Heartbeat
    from hangwatch.contract.samples import Sample
    from hangwatch.supervisor.decide.detector import Detector, DetectorConfig

    detector, hb, verdict = Detector(DetectorConfig(interval=1.0, step_timeout=20.0), start=0.0), None, None
    for i in range(60):
        if i < 10:
            hb = Heartbeat(pid=100, seq=i + 1, ts=float(i), step=i, phase="train")  # then no new beat
        verdict = detector.observe(Sample(t=float(i), wall=float(i), cpu_pct={100: 100.0}, gpu=None, heartbeat=hb))
        if verdict is not None:
            break
    assert verdict is not None and verdict.evidence["rule"] == "step"
    assert "beats went on" not in verdict.reason and "last beat 20 s ago" in verdict.reason
