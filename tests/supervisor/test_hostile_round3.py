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


def test_a_checkpoint_name_with_a_huge_number_never_erases_the_journals_records(tmp_path: Path) -> None:
    """The trainer's user names the checkpoint folders: ``checkpoint-99999999999999999999``
    became every attempt's ``start_step``/``end_step``, a number no step counter reaches, which
    the journal's readers skip as a forged record: ``hangwatch status`` showed each attempt
    "left open" with no exit code (reproduced with a real run and a crashing trainer). A
    number past any step counter is no step: the folder is an unnumbered checkpoint."""
    from hangwatch.contract.journal import Journal, fold_journal, read_journal
    from hangwatch.supervisor.checkpoints import CheckpointSpec, newest_complete

    ckpt = tmp_path / "ckpt" / "checkpoint-99999999999999999999"
    ckpt.mkdir(parents=True)
    (ckpt / "trainer_state.json").write_text("{}")
    chosen, _ = newest_complete(CheckpointSpec(tmp_path / "ckpt"))
    assert chosen is not None and chosen.path == ckpt
    journal = Journal(tmp_path / "run" / "journal.jsonl", "r1")
    journal.append("attempt_started", attempt=1, pid=4242, env={}, resume_from=str(chosen.path))
    journal.append("attempt_ended", attempt=1, kind="crash", exit_code=3, start_step=chosen.step, end_step=chosen.step)
    run = fold_journal(read_journal(tmp_path / "run" / "journal.jsonl"))
    assert run.attempts[0].outcome == "crash" and run.attempts[0].exit_code == 3
