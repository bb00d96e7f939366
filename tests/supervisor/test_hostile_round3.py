"""Hostile inputs the supervisor reads while it runs (held-out round 3).

Each test is the attack or the malformed input, reproduced first with a real run, and
fails on the code before its fix.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hangwatch.contract.heartbeat import read_heartbeat
from hangwatch.contract.samples import DeviceSample, Sample
from hangwatch.supervisor.detector import Detector, DetectorConfig

pytestmark = pytest.mark.timeout(60)


def _write_beat(path: Path, seq: int, **fields: object) -> None:
    record = {"pid": 4242, "seq": seq, "ts": 1000.0 + seq, "step": seq, "phase": "train", "info": {}}
    record.update(fields)
    path.write_text(json.dumps(record))


@pytest.mark.parametrize("phase", [["train"], {"a": 1}, 5, 2.5, True])
def test_a_phase_that_is_not_a_string_never_stops_the_tick(tmp_path: Path, phase: object) -> None:
    """A beat whose phase is a list killed the supervisor at the detector's phase-timeout
    lookup (``unhashable type: 'list'``, exit 70, the trainer left unwatched). The phase is
    kept as text and the tick goes on."""
    path = tmp_path / "heartbeat.json"
    detector = Detector(DetectorConfig(interval=1.0, stall_window=5.0, progress_timeout=10.0), 0.0)
    for seq in (1, 2, 3):
        _write_beat(path, seq, phase=phase)
        hb = read_heartbeat(path)
        assert hb is not None and isinstance(hb.phase, str)
        sample = Sample(t=float(seq), wall=float(seq), cpu_pct={4242: 50.0},
                        gpu=(DeviceSample(0, 10.0, 100.0, (4242,)),), heartbeat=hb)
        assert detector.observe(sample) is None


@pytest.mark.parametrize("ts", ["NaN", "Infinity", "-Infinity"])
def test_a_beat_without_a_finite_time_is_no_beat(tmp_path: Path, ts: str) -> None:
    path = tmp_path / "heartbeat.json"
    path.write_text('{"pid": 1, "seq": 1, "ts": %s, "step": 1, "phase": "train"}' % ts)
    assert read_heartbeat(path) is None
