"""The HF callback puts hangwatch's attempt and resume point into the Trainer's own logs."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from hangwatch.generator.hf_callback import HangwatchCallbackCore, run_log_fields

pytestmark = pytest.mark.timeout(30)

ENV = {"HANGWATCH_ATTEMPT": "3", "HANGWATCH_RESUME_FROM": "/out/checkpoint-1200", "HANGWATCH_CUDAGRAPHS": "0"}


def test_fields_from_the_attempt_environment():
    assert run_log_fields(ENV) == {"hangwatch/attempt": 3, "hangwatch/resumed_from_step": 1200}
    assert run_log_fields({"HANGWATCH_ATTEMPT": "1"}) == {"hangwatch/attempt": 1}
    assert run_log_fields({}) == {}, "outside hangwatch the logs are untouched"


class FakeHFTrainer:
    """Trainer.log's shape: the record goes to the reporters (report_to) first, then user callbacks.
    (transformers' Trainer, not the supervisor's launched trainer of ``tests/fakes.py``.)"""

    def __init__(self, callback: HangwatchCallbackCore) -> None:
        self.state = SimpleNamespace(global_step=5, log_history=[])
        self.reported: list[dict] = []
        self.callback = callback

    def log(self, logs: dict) -> None:
        self.state.log_history.append({**logs, "step": self.state.global_step})
        self.reported.append(dict(logs))  # e.g. WandbCallback.on_log
        self.callback.on_log(None, self.state, None, logs=logs)


def test_attached_trainer_logs_carry_attempt_and_resume_point_to_reporters_and_history():
    cb = HangwatchCallbackCore(env=ENV, beat_fn=lambda **kw: None)
    trainer = FakeHFTrainer(cb)
    assert cb.wrap_logging(trainer) and not cb.wrap_logging(trainer), "wrapping twice is a no-op"
    trainer.log({"loss": 0.5})
    assert trainer.reported == [{"loss": 0.5, "hangwatch/attempt": 3, "hangwatch/resumed_from_step": 1200}]
    assert trainer.state.log_history[-1]["hangwatch/attempt"] == 3


def test_plain_callback_fills_the_history_on_log():
    cb = HangwatchCallbackCore(env=ENV, beat_fn=lambda **kw: None)
    state = SimpleNamespace(log_history=[{"loss": 0.1, "step": 9}])
    logs = {"loss": 0.1}
    cb.on_log(None, state, None, logs=logs)
    assert logs["hangwatch/attempt"] == 3 and state.log_history[-1]["hangwatch/resumed_from_step"] == 1200


def test_a_long_optimizer_step_of_many_micro_batches_is_progress_not_a_hang():
    """The callback beats each micro-batch (with its number): one optimizer step longer than the
    progress timeout is not a false hang."""
    from hangwatch.contract.heartbeat import Heartbeat
    from hangwatch.contract.samples import Sample
    from hangwatch.supervisor.decide.detector import Detector, DetectorConfig

    beats: list[dict] = []
    cb = HangwatchCallbackCore(env={}, beat_fn=lambda **kw: beats.append(kw))
    state = SimpleNamespace(global_step=0)
    cb.on_train_begin(None, state, None)
    for _ in range(3):  # three optimizer steps of 40 micro-batches, one beat a second
        cb.on_step_begin(None, state, None)
        for _ in range(39):
            cb.on_substep_end(None, state, None)
        state.global_step += 1
        cb.on_step_end(None, state, None)
    detector = Detector(DetectorConfig(progress_timeout=10.0, engine_step_timeout=None), start=0.0)
    for t, kw in enumerate(beats):
        info = {k: v for k, v in kw.items() if k not in ("step", "phase")}
        hb = Heartbeat(4242, t + 1, float(t), kw["step"], kw["phase"], info or None)
        assert detector.observe(Sample(t=float(t), wall=float(t), cpu_pct={}, gpu=None, heartbeat=hb)) is None, t
