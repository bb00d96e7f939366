"""hangwatch.generator.hf_callback: its beats, phases and policy info with fake TrainerState and
TrainerControl, and inside the real transformers training loop (the checkpoint phase is announced
before ``_save_checkpoint`` starts). CPU, tiny model, no hub."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from hangwatch.contract.heartbeat import read_heartbeat
from hangwatch.generator import hf_callback
from hangwatch.generator.hf_callback import HangwatchCallbackCore, policy_info

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.timeout(300)


class Recorder:
    def __init__(self) -> None:
        self.beats: list[dict] = []

    def __call__(self, step=None, phase=None, **info):
        self.beats.append({"step": step, "phase": phase, **info})
        return True

    @property
    def phases(self) -> list[tuple]:
        return [(b["step"], b["phase"]) for b in self.beats]


def _state(step: int, save_steps: int = 0, max_steps: int = 100):
    return SimpleNamespace(global_step=step, save_steps=save_steps, max_steps=max_steps)


def _control(should_save: bool = False):
    return SimpleNamespace(should_save=should_save)


def _args(save_strategy: str = "steps", **kw):
    return SimpleNamespace(save_strategy=save_strategy, **kw)


def test_step_heartbeats_carry_global_step_and_policy_info():
    rec = Recorder()
    cb = HangwatchCallbackCore(env={"HANGWATCH_CUDAGRAPHS": "1", "HANGWATCH_ATTEMPT": "1"}, beat_fn=rec)
    cb.on_train_begin(_args(use_vllm=True, vllm_mode="colocate"), _state(0), _control())
    for step in (1, 2, 3):
        cb.on_step_begin(_args(), _state(step - 1), _control())
        cb.on_step_end(_args(), _state(step), _control())
    assert rec.phases == [(0, "train"), (0, "train"), (1, "train"), (1, "train"), (2, "train"), (2, "train"),
                          (3, "train")]
    last = rec.beats[-1]
    assert last["cudagraphs"] == "on" and last["enforce_eager"] is False and last["engine_kwargs"] == {}
    assert last["attempt"] == "1" and last["use_vllm"] is True and last["vllm_mode"] == "colocate"


def test_checkpoint_phase_is_announced_before_the_save_and_cleared_by_on_save():
    rec = Recorder()
    cb = HangwatchCallbackCore(env={}, beat_fn=rec)
    control = _control(should_save=True)  # what DefaultFlowCallback decided in on_step_end
    cb.on_step_end(_args(), _state(4), control)
    assert rec.beats[-1]["phase"] == "checkpoint" and rec.beats[-1]["saving"] == 4 and rec.beats[-1]["step"] == 4
    cb.on_save(_args(), _state(4), _control())
    assert rec.beats[-1]["phase"] == "train" and rec.beats[-1]["last_checkpoint"] == 4
    assert "saving" not in rec.beats[-1]


def test_checkpoint_phase_from_the_save_rule_when_running_before_default_flow():
    rec = Recorder()
    cb = HangwatchCallbackCore(env={}, beat_fn=rec)
    cb.on_step_end(_args(), _state(6, save_steps=3), _control(False))
    cb.on_step_end(_args(), _state(7, save_steps=3), _control(False))
    cb.on_step_end(_args(), _state(10, save_steps=0, max_steps=10), _control(False))  # final save
    cb.on_step_end(_args("no"), _state(9, save_steps=3), _control(False))
    assert [b["phase"] for b in rec.beats] == ["checkpoint", "train", "checkpoint", "train"]


def test_epoch_and_best_model_saves_and_evaluation():
    rec = Recorder()
    cb = HangwatchCallbackCore(env={}, beat_fn=rec)
    cb.on_epoch_end(_args("epoch"), _state(5), _control(True))
    cb.on_prediction_step(_args("best"), _state(5), _control())
    cb.on_evaluate(_args("best"), _state(5), _control())  # the save decision comes after this event
    cb.on_evaluate(_args("steps"), _state(5), _control(False))
    cb.on_train_end(_args(), _state(5), _control())
    assert [b["phase"] for b in rec.beats] == ["checkpoint", "evaluate", "checkpoint", "train", "train_end"]
    # The last beat is final: this process is done, and the per-rank rule no longer judges it.
    assert rec.beats[-1].get("final") is True and not any(b.get("final") for b in rec.beats[:-1])


def test_announce_checkpoint_off():
    rec = Recorder()
    cb = HangwatchCallbackCore(env={}, beat_fn=rec, announce_checkpoint=False)
    cb.on_step_end(_args(), _state(2, save_steps=2), _control(True))
    assert rec.phases == [(2, "train")]


@pytest.mark.parametrize(
    "env, expected",
    [
        ({}, {"cudagraphs": "on", "enforce_eager": False, "engine_kwargs": {}}),
        ({"HANGWATCH_CUDAGRAPHS": "0"},
         {"cudagraphs": "off", "enforce_eager": False, "engine_kwargs": {"compilation_config": {"cudagraph_mode": "NONE"}}}),
        ({"HANGWATCH_CUDAGRAPHS": "0", "HANGWATCH_ENFORCE_EAGER": "1"},
         {"cudagraphs": "off", "enforce_eager": True, "engine_kwargs": {"enforce_eager": True}}),
    ],
)
def test_policy_info(env, expected):
    assert policy_info(env) == expected
    rec = Recorder()
    HangwatchCallbackCore(env=env, beat_fn=rec).on_step_end(_args(), _state(1), _control())
    assert {k: rec.beats[0][k] for k in expected} == expected


def test_bad_policy_value_fails_loudly():
    with pytest.raises(ValueError, match="HANGWATCH_CUDAGRAPHS"):
        HangwatchCallbackCore(env={"HANGWATCH_CUDAGRAPHS": "off"})


def test_note_adds_info_and_beats():
    rec = Recorder()
    cb = HangwatchCallbackCore(env={}, beat_fn=rec)
    cb.on_step_end(_args(), _state(3), _control())
    cb.note(trl_llm_kwargs={"compilation_config": {"cudagraph_mode": "NONE"}})
    assert rec.beats[-1]["trl_llm_kwargs"] == {"compilation_config": {"cudagraph_mode": "NONE"}}
    assert rec.phases[-1] == (3, "train")
    cb.note(trl_llm_kwargs=None)
    assert "trl_llm_kwargs" not in rec.beats[-1]


@pytest.mark.slow
def test_attach_wraps_generation_with_the_generate_phase():
    rec = Recorder()
    seen = []

    class FakeGRPOTrainer:
        state = _state(7)
        callbacks: list = []

        def add_callback(self, cb):
            self.callbacks.append(cb)

        def _generate_and_score_completions(self, batch):
            seen.append(rec.phases[-1])
            return batch * 2

    trainer = FakeGRPOTrainer()
    cb = hf_callback.HangwatchCallback.attach(trainer)
    cb._beat = rec
    assert trainer.callbacks == [cb]
    assert trainer._generate_and_score_completions(21) == 42
    assert seen == [(7, "generate")] and rec.phases[-1] == (7, "train")
    assert cb.wrap_generation(trainer) == [], "wrapping twice is a no-op"


@pytest.mark.slow
def test_real_heartbeat_file(tmp_path, monkeypatch):
    path = tmp_path / "hb.json"
    monkeypatch.setenv("HANGWATCH_HEARTBEAT", str(path))
    monkeypatch.setenv("HANGWATCH_CUDAGRAPHS", "0")
    cb = hf_callback.make_callback()
    cb.on_step_end(_args(), _state(9, save_steps=3), _control(True))
    hb = read_heartbeat(path)
    assert hb is not None and hb.step == 9 and hb.phase == "checkpoint" and hb.pid == os.getpid()
    assert hb.info["cudagraphs"] == "off" and hb.info["saving"] == 9


@pytest.mark.slow
def test_module_import_does_not_import_transformers():
    code = ("import sys, hangwatch.generator.hf_callback as m; assert 'transformers' not in sys.modules; "
            "assert 'torch' not in sys.modules; C = m.HangwatchCallback; "
            "import transformers; assert issubclass(C, transformers.TrainerCallback); "
            "assert m.HangwatchCallback is C; print('ok')")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "ok" in out.stdout, out.stderr


# -- the callback in the real transformers training loop ---------------------------------------


@pytest.mark.slow
def test_real_trainer_announces_checkpoint_before_the_save_starts(tmp_path):
    import torch
    from transformers import Trainer, TrainingArguments

    rec = Recorder()
    at_save: list[tuple] = []

    class Tiny(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Linear(2, 1)

        def forward(self, x, labels=None):
            loss = ((self.w(x).squeeze(-1) - labels) ** 2).mean()
            return {"loss": loss}

    class RecordingTrainer(Trainer):
        def _save_checkpoint(self, model, trial):
            at_save.append((self.state.global_step, rec.phases[-1]))
            return super()._save_checkpoint(model, trial)

    data = [{"x": torch.tensor([1.0, float(i)]), "labels": torch.tensor(float(i))} for i in range(16)]
    args = TrainingArguments(output_dir=str(tmp_path), max_steps=5, save_steps=2, per_device_train_batch_size=2,
                             report_to=[], use_cpu=True, logging_steps=1, disable_tqdm=True,
                             save_only_model=True)
    cb = hf_callback.make_callback(env={})
    cb._beat = rec
    trainer = RecordingTrainer(model=Tiny(), args=args, train_dataset=data, callbacks=[cb])
    trainer.train()
    # checkpoints 2, 4 and the final 5; each save began inside the announced checkpoint phase
    assert at_save == [(2, (2, "checkpoint")), (4, (4, "checkpoint")), (5, (5, "checkpoint"))]
    step_ends = [s for s, p in rec.phases if p in ("train", "checkpoint")]
    assert max(step_ends) == 5
    after = [rec.phases[i + 1] for i, p in enumerate(rec.phases[:-1]) if p[1] == "checkpoint"]
    assert all(p == (s, "train") for p, s in zip(after, (2, 4, 5))), "on_save returns to the train phase"
    assert rec.phases[-1] == (5, "train_end")
