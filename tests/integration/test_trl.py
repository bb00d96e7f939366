"""hangwatch with the real transformers Trainer and TRL GRPOTrainer (CPU, tiny local model, no hub).

* unit tests of ``hangwatch.generator.hf_callback`` with fake TrainerState/TrainerControl;
* the callback inside the real transformers training loop (the checkpoint phase is
  announced before ``_save_checkpoint`` starts);
* the rollout-engine policy reaching TRL's real colocate ``LLM(...)`` call site;
* end to end under the real ``hangwatch run`` CLI: ``scripts/trl_grpo_example.py``
  wedges in a vLLM-like graph-replay frame, is detected, killed, resumed from the
  newest real checkpoint with graphs off, and finishes; a slow save is not a wedge.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest

from hangwatch.generator import hf_callback
from hangwatch.contract.heartbeat import read_heartbeat
from hangwatch.generator.hf_callback import HangwatchCallbackCore, policy_info
from hangwatch.contract.exitcodes import EXIT_BUDGET

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "scripts" / "trl_grpo_example.py"

pytestmark = pytest.mark.timeout(300)


def _load_example():
    spec = importlib.util.spec_from_file_location("trl_grpo_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


# -- unit tests: the callback with fakes -------------------------------------------------------


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


def test_real_heartbeat_file(tmp_path, monkeypatch):
    path = tmp_path / "hb.json"
    monkeypatch.setenv("HANGWATCH_HEARTBEAT", str(path))
    monkeypatch.setenv("HANGWATCH_CUDAGRAPHS", "0")
    cb = hf_callback.make_callback()
    cb.on_step_end(_args(), _state(9, save_steps=3), _control(True))
    hb = read_heartbeat(path)
    assert hb is not None and hb.step == 9 and hb.phase == "checkpoint" and hb.pid == os.getpid()
    assert hb.info["cudagraphs"] == "off" and hb.info["saving"] == 9


def test_module_import_does_not_import_transformers():
    code = ("import sys, hangwatch.generator.hf_callback as m; assert 'transformers' not in sys.modules; "
            "assert 'torch' not in sys.modules; C = m.HangwatchCallback; "
            "import transformers; assert issubclass(C, transformers.TrainerCallback); "
            "assert m.HangwatchCallback is C; print('ok')")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "ok" in out.stdout, out.stderr


# -- the callback in the real transformers training loop ---------------------------------------


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


# -- the rollout-engine policy at TRL's real colocate LLM(...) call ------------------------------


@pytest.fixture(scope="module")
def tiny_trl_parts():
    from accelerate import Accelerator

    example = _load_example()
    tokenizer = example.build_tokenizer()
    model = example.build_model(tokenizer, 0)
    return example, model, tokenizer, Accelerator(cpu=True)


def test_policy_reaches_trls_real_colocate_llm_call(tiny_trl_parts, monkeypatch):
    import trl
    import trl.generation.vllm_generation as vg

    example, model, tokenizer, accelerator = tiny_trl_parts
    assert trl.__version__ == "1.16.0", "re-check the LLM(...) call site and docs/trl.md for a new TRL"
    had_llm = hasattr(vg, "LLM")
    is_available = vg.is_vllm_available
    monkeypatch.delenv("RANK", raising=False)

    on = example.record_trl_llm_kwargs(model, tokenizer, accelerator, env={"HANGWATCH_CUDAGRAPHS": "1"})
    off = example.record_trl_llm_kwargs(model, tokenizer, accelerator, env={"HANGWATCH_CUDAGRAPHS": "0"})
    eager = example.record_trl_llm_kwargs(model, tokenizer, accelerator,
                                          env={"HANGWATCH_CUDAGRAPHS": "0", "HANGWATCH_ENFORCE_EAGER": "1"})

    assert "compilation_config" not in on and "enforce_eager" not in on
    assert off["compilation_config"] == {"cudagraph_mode": "NONE"} and "enforce_eager" not in off
    assert eager["enforce_eager"] is True and "compilation_config" not in eager
    # TRL's own arguments are all still there, unchanged
    for kwargs in (on, off, eager):
        assert kwargs["distributed_executor_backend"] == "external_launcher"
        assert kwargs["max_num_batched_tokens"] == 4096 and kwargs["gpu_memory_utilization"] == 0.3
    # the module is restored: no LLM binding (vLLM is not installed), the real availability check
    assert hasattr(vg, "LLM") == had_llm and vg.is_vllm_available is is_available
    assert "RANK" not in os.environ


def test_trls_explicit_arguments_win(tiny_trl_parts):
    example, model, tokenizer, accelerator = tiny_trl_parts
    kwargs = example.record_trl_llm_kwargs(
        model, tokenizer, accelerator,
        extra_kwargs={"compilation_config": {"cudagraph_mode": "NONE"}, "max_num_batched_tokens": 1,
                      "distributed_executor_backend": "mp"},
    )
    assert kwargs["compilation_config"] == {"cudagraph_mode": "NONE"}
    assert kwargs["max_num_batched_tokens"] == 4096
    assert kwargs["distributed_executor_backend"] == "external_launcher"


# -- end to end under the real hangwatch CLI -------------------------------------------------------


@pytest.fixture
def quiet_env(monkeypatch):
    for key, value in {"HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1", "TRANSFORMERS_OFFLINE": "1",
                       "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1",
                       "PYTHONWARNINGS": "ignore"}.items():
        monkeypatch.setenv(key, value)


def _e2e_args(hw, **overrides):
    opts = {"--interval": "0.25", "--stall-window": "3", "--grace": "1", "--capture-timeout": "15"}
    opts.update(overrides)
    return hw.fast_args(**opts)


def _example(hw, *args):
    return [sys.executable, str(EXAMPLE), "--output_dir", str(hw.ckpt), "--pidfile", str(hw.pidfile), *args]


def _global_step(checkpoint: Path) -> int:
    return json.loads((checkpoint / "trainer_state.json").read_text())["global_step"]


def _no_children_left():
    me = psutil.Process()
    left = [p for p in me.children(recursive=True) if p.status() != psutil.STATUS_ZOMBIE]
    assert not left, f"processes left behind: {left}"


@pytest.mark.slow
def test_grpo_wedge_is_caught_and_resumed_from_the_real_checkpoint_with_graphs_off(hw, quiet_env):
    max_steps = 6
    args = _e2e_args(hw) + [
        "--checkpoint-dir", str(hw.ckpt), "--resume-arg", "--resume_from_checkpoint={checkpoint}", "--",
        *_example(hw, "--max_steps", str(max_steps), "--save_steps", "2", "--wedge-at-step", "5", "--record-trl-llm"),
    ]
    result = hw.run(args, timeout=240)
    assert result.returncode == 0, result.stderr[-3000:]

    incidents = hw.events("incident")
    assert [i["kind"] for i in incidents] == ["stall"]
    assert incidents[0]["evidence"]["step"] == 4 and incidents[0]["evidence"]["phase"] == "generate"
    assert hw.events("kill")[0]["confirmed"] is True

    attempts = hw.events("attempt_started")
    assert len(attempts) == 2
    assert attempts[0]["env"]["HANGWATCH_CUDAGRAPHS"] == "1"
    assert attempts[1]["env"]["HANGWATCH_CUDAGRAPHS"] == "0"
    newest = hw.ckpt / "checkpoint-4"
    assert attempts[1]["resume_from"] == str(newest)
    assert f"--resume_from_checkpoint={newest}" in attempts[1]["argv"]
    assert _global_step(newest) == 4

    # the rollout policy each attempt applied, as TRL's real LLM(...) call received it
    attempt_dirs = sorted((hw.run_dir / "attempts").iterdir())
    first, second = (json.loads((d / "trl_llm_kwargs.json").read_text()) for d in attempt_dirs)
    assert "compilation_config" not in first
    assert second["compilation_config"] == {"cudagraph_mode": "NONE"}
    assert second["distributed_executor_backend"] == "external_launcher"
    info2 = [e["info"] for e in hw.events("trainer_info") if e["attempt"] == 2]
    assert info2 and all(i["cudagraphs"] == "off" for i in info2)
    assert info2[-1]["trl_llm_kwargs"]["compilation_config"] == {"cudagraph_mode": "NONE"}
    assert info2[-1]["engine_kwargs"] == {"compilation_config": {"cudagraph_mode": "NONE"}}

    # training finished the planned steps from the resumed checkpoint
    final = hw.ckpt / f"checkpoint-{max_steps}"
    assert _global_step(final) == max_steps
    assert hw.events("attempt_ended")[-1]["start_step"] == 4
    assert f"finished at step {max_steps}" in (attempt_dirs[1] / "stdout.log").read_text()
    assert hw.events("run_finished")[-1]["outcome"] == "success"
    assert len(hw.reported_pids()["trainer"]) == 2
    assert not hw.alive()
    _no_children_left()


@pytest.mark.slow
@pytest.mark.parametrize("announce", [True, False], ids=["checkpoint-phase", "no-phase-control"])
def test_slow_save_under_a_busy_gpu_is_not_a_wedge(hw, quiet_env, announce):
    args = _e2e_args(hw, **{"--max-restarts": "0"}) + [
        "--checkpoint-dir", str(hw.ckpt), "--",
        *_example(hw, "--max_steps", "2", "--save_steps", "2", "--slow-save", "5",
                  *([] if announce else ["--no-checkpoint-phase"])),
    ]
    result = hw.run(args, timeout=200)
    if announce:
        assert result.returncode == 0, result.stderr[-3000:]
        assert hw.events("incident") == []
        saving = [e for e in hw.events("trainer_info") if e["phase"] == "checkpoint"]
        assert saving and saving[0]["info"]["saving"] == 2 and saving[0]["step"] == 2
        assert _global_step(hw.ckpt / "checkpoint-2") == 2
        assert hw.events("run_finished")[-1]["outcome"] == "success"
    else:
        # The same save without the announcement is taken for a wedge: the phase is what prevents it.
        assert result.returncode == EXIT_BUDGET
        assert [i["kind"] for i in hw.events("incident")] == ["stall"]
    assert not hw.alive()
    _no_children_left()
