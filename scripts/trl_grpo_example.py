"""TRL ``GRPOTrainer`` on the CPU under hangwatch: a tiny local model, real checkpoints, an injectable wedge.

Nothing is downloaded: the tokenizer is trained on a tiny corpus with the
``tokenizers`` library and the causal LM is config-initialised (Llama, hidden
32, 2 layers). Generation uses transformers (``use_vllm=False``): vLLM cannot
run on a CPU. Run it under the supervisor::

    hangwatch run --checkpoint-dir OUT --resume-arg '--resume_from_checkpoint={checkpoint}' \\
        -- python scripts/trl_grpo_example.py --output_dir OUT --max_steps 8 --save_steps 2

The one line that instruments the trainer is ``HangwatchCallback.attach(trainer)``
(``trainer.add_callback(HangwatchCallback())`` without the generate phase).

Fault injection and checks (for tests and demos):

* ``--wedge-at-step S``: during step S's rollout (in the reward function, i.e.
  inside ``_generate_and_score_completions``), the main thread blocks forever
  in ``generator/fake_vllm/compilation/cuda_graph.py`` (named like vLLM's
  graph replay) with the simulated GPU held at 100 %, CPU idle, SIGTERM
  ignored, no heartbeats. Only while ``HANGWATCH_CUDAGRAPHS`` is not ``0``, so
  the graphs-off resume gets past it.
* ``--slow-save SECONDS``: every checkpoint save first sleeps this long holding
  the simulated GPU at 100 % with the CPU idle (a slow filesystem under a busy
  GPU), inside the real ``Trainer._save_checkpoint``.
* ``--record-trl-llm``: build TRL's real colocate engine path
  (``trl.generation.vllm_generation.VLLMGeneration``) against a recording
  stand-in for vLLM's ``LLM`` under ``hangwatch.generator.trl_patch.apply_rollout_policy``,
  and report the kwargs ``LLM(...)`` received (heartbeat info ``trl_llm_kwargs``
  and ``$HANGWATCH_ATTEMPT_DIR/trl_llm_kwargs.json``).
* ``--use-vllm``: what a real GPU run does: ``GRPOConfig(use_vllm=True,
  vllm_mode="colocate")`` with the trainer built inside ``apply_rollout_policy``
  so the cuda-graph policy reaches TRL's ``LLM(...)``. Needs vLLM (0.22-0.31).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from hangwatch.contract import simgpu  # noqa: E402
from hangwatch.generator.hf_callback import HangwatchCallbackCore  # noqa: E402

CORPUS = [
    "the cat sat on the mat",
    "the dog ran in the park",
    "a bird can sing a song",
    "one two three four five six seven eight nine ten",
    "count to ten and then count back to one",
    "hello world this is a tiny corpus for a tiny model",
]
PROMPTS = ["count to", "the cat", "hello", "a bird", "one two", "the dog", "count back", "this is"]
TRAIN_GPU_UTIL = 40.0  # what the simulated GPU reads while training normally (not "busy")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--output_dir", required=True)
    p.add_argument("--max_steps", type=int, default=8)
    p.add_argument("--save_steps", type=int, default=2)
    p.add_argument("--max_completion_length", type=int, default=6)
    p.add_argument("--num_generations", type=int, default=2)
    p.add_argument("--per_device_train_batch_size", type=int, default=2)
    p.add_argument("--resume_from_checkpoint", default=None,
                   help="checkpoint folder to resume from (default: $HANGWATCH_RESUME_FROM)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--wedge-at-step", type=int, default=None, metavar="S")
    p.add_argument("--slow-save", type=float, default=0.0, metavar="SECONDS")
    p.add_argument("--record-trl-llm", action="store_true")
    p.add_argument("--use-vllm", action="store_true")
    p.add_argument("--no-checkpoint-phase", action="store_true",
                   help="do not announce the checkpoint phase (shows what the announcement prevents)")
    p.add_argument("--pidfile", default=None, help="append 'trainer PID' here (tests)")
    return p.parse_args(argv)


def build_tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(CORPUS, trainers.WordLevelTrainer(special_tokens=["<pad>", "<unk>", "<s>", "</s>"]))
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", unk_token="<unk>",
                                   bos_token="<s>", eos_token="</s>", padding_side="left")


def build_model(tokenizer, seed: int, hidden_size: int = 32):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=hidden_size, intermediate_size=2 * hidden_size, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64,
        pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
    )
    return LlamaForCausalLM(config)


def wedge_like_cuda_graph_replay() -> None:
    """Block this (main) thread forever inside the fake vLLM graph-replay frames, GPU 100 %, SIGTERM ignored."""
    from hangwatch.generator.fake_vllm.compilation.cuda_graph import CUDAGraphWrapper
    from hangwatch.generator.fake_vllm.v1.worker.gpu_model_runner import GPUModelRunner

    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # other threads must not die of it either
    graph = CUDAGraphWrapper(lambda inputs: inputs)
    graph.arm_wedge()
    GPUModelRunner(graph).execute_model(None).get_output()  # never returns


class RecordingLLM:
    """Stands in for ``vllm.LLM`` at TRL's colocate call site; records the kwargs it is built with."""

    calls: list[dict[str, Any]] = []

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        RecordingLLM.calls.append(dict(kwargs))
        self.kwargs = kwargs

    def sleep(self, level: int = 1) -> None:  # TRL calls it with vllm_enable_sleep_mode
        pass


def record_trl_llm_kwargs(model, tokenizer, accelerator, env=None, *, extra_kwargs=None) -> dict[str, Any]:
    """Drive TRL's real ``VLLMGeneration`` colocate init with ``RecordingLLM`` as vLLM's ``LLM``.

    Within ``hangwatch.generator.trl_patch.apply_rollout_policy(env)``, exactly as a GPU run
    wraps its trainer construction. vLLM is not importable here, so the TRL module
    has no ``LLM`` and ``is_vllm_available()`` is false: both are stood in for
    during the call and restored (or removed again) afterwards, as are the
    distributed environment variables TRL's init sets. Returns the kwargs.
    ``extra_kwargs`` given: inject those with ``patched_rollout_engine`` instead
    of the policy from ``env``.
    """
    import trl.generation.vllm_generation as vg

    from hangwatch.generator.trl_patch import apply_rollout_policy, patched_rollout_engine

    env = os.environ if env is None else env
    saved_env = {k: os.environ.get(k) for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    missing = object()
    saved = {name: getattr(vg, name, missing) for name in ("LLM", "is_vllm_available")}
    RecordingLLM.calls = []
    vg.LLM = RecordingLLM
    vg.is_vllm_available = lambda: True
    try:
        inject = apply_rollout_policy(env) if extra_kwargs is None else patched_rollout_engine(extra_kwargs)
        with inject:
            vg.VLLMGeneration(model=model, accelerator=accelerator, processing_class=tokenizer, mode="colocate",
                              gpu_memory_utilization=0.3, max_model_length=64, max_num_seqs=4)
    finally:
        for name, value in saved.items():
            if value is missing:
                with contextlib.suppress(AttributeError):
                    delattr(vg, name)
            else:
                setattr(vg, name, value)
        for key, value in saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    (kwargs,) = RecordingLLM.calls
    return kwargs


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    if a.pidfile:
        with open(a.pidfile, "a") as f:
            f.write(f"trainer {os.getpid()}\n")
    resume = a.resume_from_checkpoint or os.environ.get("HANGWATCH_RESUME_FROM") or None

    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from hangwatch.generator.hf_callback import HangwatchCallback
    from hangwatch.generator.trl_patch import apply_rollout_policy

    tokenizer = build_tokenizer()
    # vLLM's CPU attention refuses a head_dim of 16 (hidden 32, 2 heads): 64 with the real engine.
    model = build_model(tokenizer, a.seed, hidden_size=128 if a.use_vllm else 32)
    if a.use_vllm:
        # TRL's colocate engine is LLM(model=model.name_or_path): the model must be on disk.
        from transformers import AutoModelForCausalLM

        initial = Path(a.output_dir) / "initial-model"
        model.save_pretrained(str(initial))
        tokenizer.save_pretrained(str(initial))
        model = AutoModelForCausalLM.from_pretrained(str(initial))
    dataset = Dataset.from_dict({"prompt": PROMPTS * 4})
    graphs_off = os.environ.get("HANGWATCH_CUDAGRAPHS") == "0"
    trainer_ref: list[Any] = []

    def reward_len(completions: list[str], **kwargs: Any) -> list[float]:
        """Reward short completions; the wedge is injected here, i.e. inside the rollout."""
        step = trainer_ref[0].state.global_step + 1 if trainer_ref else 0
        if a.wedge_at_step is not None and step == a.wedge_at_step and not graphs_off:
            print(f"wedging at step {step} (cuda graphs on)", flush=True)
            wedge_like_cuda_graph_replay()
        return [-float(len(c.split())) for c in completions]

    config = GRPOConfig(
        output_dir=a.output_dir,
        max_steps=a.max_steps,
        save_steps=a.save_steps,
        save_strategy="steps",
        per_device_train_batch_size=a.per_device_train_batch_size,
        num_generations=a.num_generations,
        max_completion_length=a.max_completion_length,
        learning_rate=1e-3,
        logging_steps=1,
        report_to=[],
        use_cpu=True,
        bf16=False,
        seed=a.seed,
        dataloader_num_workers=0,
        disable_tqdm=True,
        use_vllm=a.use_vllm,
        vllm_mode="colocate",
    )

    class ExampleGRPOTrainer(GRPOTrainer):
        def _save_checkpoint(self, model, trial):
            if a.slow_save > 0:
                import time

                print(f"slow save of step {self.state.global_step}: {a.slow_save:.1f} s, GPU busy, CPU idle",
                      flush=True)
                simgpu.hold(100, 4096)
                time.sleep(a.slow_save)
                simgpu.hold(TRAIN_GPU_UTIL, 2048)
            return super()._save_checkpoint(model, trial)

    simgpu.hold(TRAIN_GPU_UTIL, 2048)
    # A GPU run builds the colocate vLLM engine inside the trainer's constructor:
    # that is where the cuda-graph policy has to reach TRL's LLM(...) call.
    engine_policy = apply_rollout_policy(os.environ) if a.use_vllm else contextlib.nullcontext()
    with engine_policy:
        trainer = ExampleGRPOTrainer(model=model, reward_funcs=reward_len, args=config, train_dataset=dataset,
                                     processing_class=tokenizer)
    trainer_ref.append(trainer)
    callback = HangwatchCallback.attach(trainer, announce_checkpoint=not a.no_checkpoint_phase)
    assert isinstance(callback, HangwatchCallbackCore)

    if a.record_trl_llm:
        kwargs = record_trl_llm_kwargs(trainer.model, tokenizer, trainer.accelerator)
        summary = {k: kwargs[k] for k in ("compilation_config", "enforce_eager") if k in kwargs}
        summary["distributed_executor_backend"] = kwargs.get("distributed_executor_backend")
        attempt_dir = os.environ.get("HANGWATCH_ATTEMPT_DIR")
        if attempt_dir:
            Path(attempt_dir, "trl_llm_kwargs.json").write_text(json.dumps(kwargs, default=str, indent=1))
        callback.note(trl_llm_kwargs=summary)
        print(f"TRL LLM(...) kwargs: {summary}", flush=True)

    print(f"training to step {a.max_steps}" + (f", resuming from {resume}" if resume else ""), flush=True)
    trainer.train(resume_from_checkpoint=resume)
    print(f"finished at step {trainer.state.global_step}", flush=True)
    simgpu.release()
    return 0


if __name__ == "__main__":
    sys.exit(main())
