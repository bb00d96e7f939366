"""Timeouts learned from the run: the pure function, the learner, and the detector using it on a fake clock."""

from __future__ import annotations

import pytest

from hangwatch.contract.errors import ConfigError
from hangwatch.contract.heartbeat import Heartbeat
from hangwatch.contract.samples import Sample
from hangwatch.supervisor.decide.detector import Detector, DetectorConfig
from hangwatch.supervisor.decide.learned_timeout import (AutoTimeout, IntervalLearner, LearnedTimeout, learn_timeout,
                                                         quantile)
from fakes import FakeClock

pytestmark = pytest.mark.timeout(60)

TRAINER = 100


def test_no_timeout_is_learned_during_the_warm_up():
    assert learn_timeout([2.0] * 19, AutoTimeout(warmup_beats=20)) is None


def test_the_timeout_is_the_high_quantile_times_the_factor():
    intervals = [2.0] * 99 + [10.0]
    learned = learn_timeout(intervals, AutoTimeout(quantile=0.99, factor=3.0, floor=1.0))
    assert learned is not None
    assert learned.quantile_s == 2.0 and learned.timeout == 6.0
    assert learned.max_s == 10.0 and learned.intervals == 100
    assert learn_timeout(intervals, AutoTimeout(quantile=1.0, factor=3.0, floor=1.0)).timeout == 30.0


def test_the_timeout_is_clamped_to_the_floor_and_the_ceiling():
    assert learn_timeout([0.1] * 30, AutoTimeout(floor=60.0)).timeout == 60.0
    assert learn_timeout([5000.0] * 30, AutoTimeout(ceiling=3600.0)).timeout == 3600.0


def test_the_quantile_is_an_observed_value():
    assert quantile([3.0, 1.0, 2.0], 0.5) == 2.0
    assert quantile([3.0, 1.0, 2.0], 1.0) == 3.0
    with pytest.raises(ValueError):
        quantile([], 0.5)


@pytest.mark.parametrize("settings", [dict(warmup_beats=1), dict(quantile=0.0), dict(factor=0.5),
                                      dict(floor=0.0), dict(floor=10.0, ceiling=5.0), dict(window=5)])
def test_settings_that_cannot_learn_are_refused(settings):
    with pytest.raises(ConfigError):
        AutoTimeout(**settings)


def test_the_learner_learns_after_the_warm_up_then_again_every_warm_up_of_new_intervals():
    learner = IntervalLearner(AutoTimeout(warmup_beats=5, floor=1.0, factor=2.0))
    assert [learner.add(1.0) for _ in range(5)] == [False] * 4 + [True]
    assert learner.learned.timeout == 2.0
    assert not any(learner.add(10.0) for _ in range(4))  # not yet: the value stays
    assert learner.learned.timeout == 2.0
    assert learner.add(10.0) and learner.learned.timeout == 20.0 and learner.changes == 2


def test_a_carried_value_is_in_force_from_the_start_and_round_trips_through_json():
    carried = LearnedTimeout(42.0, 20, 14.0, 15.0, AutoTimeout())
    assert LearnedTimeout.from_json(carried.to_json()) == carried
    config = DetectorConfig(progress_timeout=600.0, auto_progress=AutoTimeout(), learned_progress=carried)
    again = DetectorConfig.from_json(config.to_json())
    assert (again.auto_progress, again.learned_progress) == (config.auto_progress, config.learned_progress)
    detector = Detector(config, start=0.0)
    assert detector.progress_timeout_for("train") == 42.0
    assert detector.progress_timeout_for("checkpoint") == 1800.0  # other phases keep their timeouts
    assert detector.progress_timeout_for("eval") == 600.0


def test_auto_needs_a_fixed_timeout_for_the_warm_up():
    with pytest.raises(ConfigError):
        DetectorConfig(progress_timeout=None, auto_progress=AutoTimeout())


def _beating(detector: Detector, clock: FakeClock, beats: int, every: float, phase: str = "train"):
    """``beats`` beats ``every`` seconds apart (one tick per second); the first verdict."""
    seq = getattr(detector, "_test_seq", 0)
    for _ in range(beats):
        seq += 1
        hb = Heartbeat(pid=TRAINER, seq=seq, ts=clock(), step=seq, phase=phase)
        for _ in range(int(every)):
            t = clock()
            verdict = detector.observe(Sample(t=t, wall=t, cpu_pct={TRAINER: 100.0}, gpu=None, heartbeat=hb))
            clock.sleep(1.0)
            if verdict is not None:
                return verdict
    detector._test_seq = seq
    return None


def test_the_detector_uses_the_fixed_timeout_until_warm_up_then_the_learned_one():
    clock = FakeClock(start=0.0)
    config = DetectorConfig(progress_timeout=600.0, auto_progress=AutoTimeout(warmup_beats=20, floor=5.0))
    detector = Detector(config, start=0.0)
    # A first step that compiles for 300 s (announced): longer than anything seen, inside the fixed timeout.
    assert _beating(detector, clock, 1, 300, phase="compile") is None
    assert _beating(detector, clock, 1, 500) is None  # an unannounced slow first step: still the warm-up
    assert detector.learned is None
    assert _beating(detector, clock, 19, 2) is None
    assert detector.learned is None  # 19 train intervals: one short of the warm-up
    assert _beating(detector, clock, 1, 2) is None
    learned = detector.learned
    assert learned is not None and learned.quantile_s == 500.0  # the slow first step is in the tail
    assert learned.timeout == 1500.0
    # Past 100 intervals the one slow step falls out of the p99.
    assert _beating(detector, clock, 120, 2) is None
    learned = detector.learned
    assert learned is not None and learned.timeout == 6.0  # relearned: p99 of 2 s intervals x 3
    last = clock()
    verdict = _beating(detector, clock, 1, 60)  # the trainer goes silent
    assert verdict is not None
    assert verdict.detected_at - (last - 1.0) <= learned.timeout + 1.0
    assert verdict.evidence["learned_timeout_s"] == learned.timeout


def test_a_long_phase_after_learning_keeps_its_phase_timeout():
    clock = FakeClock(start=0.0)
    config = DetectorConfig(progress_timeout=600.0, auto_progress=AutoTimeout(warmup_beats=20, floor=5.0))
    detector = Detector(config, start=0.0)
    assert _beating(detector, clock, 30, 2) is None and detector.learned is not None
    assert _beating(detector, clock, 1, 1200, phase="checkpoint") is None  # a save longer than any step
    assert _beating(detector, clock, 1, 500, phase="eval") is None  # an unlisted phase: the fixed 600 s
    assert _beating(detector, clock, 5, 2) is None
