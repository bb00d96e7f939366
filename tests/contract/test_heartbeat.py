"""The heartbeat file: what a beat carries, and beats the trainer's user malformed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hangwatch.contract.heartbeat import beat, read_heartbeat
from hangwatch.contract.samples import DeviceSample, Sample
from hangwatch.supervisor.decide.detector import Detector, DetectorConfig


pytestmark = pytest.mark.timeout(30)


def test_heartbeat_round_trip_and_progress_token(tmp_path, monkeypatch):
    path = tmp_path / "hb.json"
    assert beat(step=1) is False  # no HANGWATCH_HEARTBEAT: a no-op, not an error
    monkeypatch.setenv("HANGWATCH_HEARTBEAT", str(path))
    assert beat(step=3, phase="checkpoint", cudagraphs="off")
    first = read_heartbeat(path)
    assert (first.step, first.phase, first.info["cudagraphs"]) == (3, "checkpoint", "off")
    beat(step=3, phase="checkpoint")
    assert read_heartbeat(path).token != first.token
    path.write_text("{half")
    assert read_heartbeat(path) is None


def _write_beat(path: Path, seq: int, **fields: object) -> None:
    record = {"pid": 4242, "seq": seq, "ts": 1000.0 + seq, "step": seq, "phase": "train", "info": {}}
    record.update(fields)
    path.write_text(json.dumps(record))


@pytest.mark.timeout(60)
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


@pytest.mark.timeout(60)
@pytest.mark.parametrize("ts", ["NaN", "Infinity", "-Infinity"])
def test_a_beat_without_a_finite_time_is_no_beat(tmp_path: Path, ts: str) -> None:
    path = tmp_path / "heartbeat.json"
    path.write_text('{"pid": 1, "seq": 1, "ts": %s, "step": 1, "phase": "train"}' % ts)
    assert read_heartbeat(path) is None


@pytest.mark.timeout(60)
@pytest.mark.parametrize("field", ["step", "seq", "pid"])
def test_a_beat_with_a_number_past_64_bits_is_no_beat(tmp_path: Path, field: str) -> None:
    """A step of 400 digits (an int no float holds) made the metrics exporter fail at every tick
    (``OverflowError``): the textfile was no longer rewritten while the beat stood."""
    path = tmp_path / "heartbeat.json"
    record = {"pid": 4242, "seq": 1, "ts": 1000.0, "step": 1, "phase": "train"}
    path.write_text(json.dumps(record).replace(f'"{field}": {record[field]}', f'"{field}": {"9" * 400}'))
    assert read_heartbeat(path) is None
