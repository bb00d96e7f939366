import importlib.util
import json
import logging
import os
import sys
import types
from pathlib import Path

import pytest

from hangwatch.generator.trl_patch import TRL_VLLM_MODULE, apply_rollout_policy, patched_rollout_engine

EXAMPLE = Path(__file__).resolve().parents[2] / "scripts" / "trl_grpo_example.py"

EXTRA = {"compilation_config": {"cudagraph_mode": "NONE"}}


def make_stand_in(monkeypatch):
    """A module shaped like TRL's: LLM is a module global that the colocate path calls at call time."""
    calls = []

    def LLM(*args, **kwargs):  # noqa: N802 - vLLM's name
        calls.append(kwargs)
        return "engine"

    module = types.ModuleType(TRL_VLLM_MODULE)
    module.LLM = LLM
    exec("def build(**kw):\n    return LLM(model='m', seed=1, **kw)\n", module.__dict__)
    for name in ("trl", "trl.generation"):
        monkeypatch.setitem(sys.modules, name, sys.modules.get(name) or types.ModuleType(name))
    monkeypatch.setitem(sys.modules, TRL_VLLM_MODULE, module)
    return module, LLM, calls


def test_injects_and_restores(monkeypatch):
    module, original, calls = make_stand_in(monkeypatch)
    with patched_rollout_engine(EXTRA) as applied:
        assert applied
        assert module.build() == "engine"
        module.build(compilation_config={"cudagraph_mode": "FULL"})
    assert module.LLM is original
    assert calls[0] == {"model": "m", "seed": 1, **EXTRA}
    assert calls[1]["compilation_config"] == {"cudagraph_mode": "FULL"}, "TRL's explicit args win"


def test_restores_on_error(monkeypatch):
    module, original, _ = make_stand_in(monkeypatch)
    with pytest.raises(RuntimeError):
        with patched_rollout_engine(EXTRA):
            raise RuntimeError("boom")
    assert module.LLM is original


def test_empty_kwargs_is_a_no_op(monkeypatch):
    module, original, _ = make_stand_in(monkeypatch)
    with patched_rollout_engine({}) as applied:
        assert not applied and module.LLM is original


def test_missing_module_warns(caplog):
    with caplog.at_level(logging.WARNING):
        with patched_rollout_engine(EXTRA, module_name="no_such_pkg.vllm_generation") as applied:
            assert not applied
    assert "NOT applied" in caplog.text


def test_module_without_llm_warns_or_uses_factory(monkeypatch, caplog):
    module, _, _ = make_stand_in(monkeypatch)
    del module.LLM
    with caplog.at_level(logging.WARNING):
        with patched_rollout_engine(EXTRA) as applied:
            assert not applied and not hasattr(module, "LLM")
    got = []
    with patched_rollout_engine(EXTRA, factory=lambda **kw: got.append(kw)) as applied:
        assert applied
        module.LLM(model="m")
    assert got == [{"model": "m", **EXTRA}]
    assert not hasattr(module, "LLM"), "absence restored"


def test_apply_rollout_policy_beats_the_setting(monkeypatch, tmp_path):
    module, _, calls = make_stand_in(monkeypatch)
    hb = tmp_path / "hb.json"
    monkeypatch.setenv("HANGWATCH_HEARTBEAT", str(hb))
    with apply_rollout_policy({"HANGWATCH_CUDAGRAPHS": "0"}, step=3) as applied:
        module.build()
    assert applied and calls[0]["compilation_config"] == {"cudagraph_mode": "NONE"}
    record = json.loads(hb.read_text())
    assert record["step"] == 3 and record["info"]["cudagraphs"] == "off"


@pytest.mark.slow
def test_real_trl_module():
    """TRL 1.16 binds LLM only when vLLM is installed; without it we inject through a factory."""
    real = pytest.importorskip(TRL_VLLM_MODULE)
    original = getattr(real, "LLM", None)
    got = []
    with patched_rollout_engine(EXTRA, factory=lambda **kw: got.append(kw)) as applied:
        assert applied
        real.LLM(model="m", enable_sleep_mode=True)
    assert got == [{"model": "m", "enable_sleep_mode": True, **EXTRA}]
    assert getattr(real, "LLM", None) is original
    if original is None:  # no vLLM here: TRL's module must be left without LLM, as it was
        with patched_rollout_engine(EXTRA) as applied:
            assert not applied


class _Worker:
    """A GPU worker as the read-back callable sees it: its model runner's resolved config."""

    def __init__(self, mode):
        self.model_runner = types.SimpleNamespace(
            compilation_config=types.SimpleNamespace(cudagraph_mode=mode, mode="CompilationMode.VLLM_COMPILE"))


def stand_in_with_workers(monkeypatch, worker_mode):
    """TRL-shaped module whose LLM runs collective_rpc callables on one worker resolving to ``worker_mode``
    (None: whatever the kwargs asked for, default FULL_AND_PIECEWISE)."""
    module, _, calls = make_stand_in(monkeypatch)

    class LLM:  # noqa: N801 - vLLM's name
        def __init__(self, **kwargs):
            calls.append(kwargs)
            asked = (kwargs.get("compilation_config") or {}).get("cudagraph_mode", "FULL_AND_PIECEWISE")
            self.worker = _Worker(worker_mode or asked.upper())

        def collective_rpc(self, method, timeout=None, args=(), kwargs=None):
            return [method(self.worker, *args)]

        @property
        def llm_engine(self):
            return types.SimpleNamespace(engine_core=types.SimpleNamespace(shutdown=lambda: calls.append("shutdown")))

    module.LLM = LLM
    return module, calls


@pytest.mark.parametrize("env, worker_mode, applied", [
    ({"HANGWATCH_CUDAGRAPHS": "0"}, None, "NONE"),
    ({}, None, "FULL_AND_PIECEWISE"),
    ({}, "PIECEWISE", "PIECEWISE"),  # the worker downgraded it: reported, not refused
])
def test_apply_rollout_policy_reads_back_what_the_worker_applied(monkeypatch, tmp_path, env, worker_mode, applied):
    module, calls = stand_in_with_workers(monkeypatch, worker_mode)
    hb = tmp_path / "hb.json"
    monkeypatch.setenv("HANGWATCH_HEARTBEAT", str(hb))
    with apply_rollout_policy(env, step=1) as installed:
        module.build()
    assert installed and len(calls) == 1
    info = json.loads(hb.read_text())["info"]
    assert info["applied_cudagraph_mode"] == applied and info["applied_compile_mode"] == "VLLM_COMPILE"
    assert info["cudagraphs"] == ("off" if env else "on")


def test_apply_rollout_policy_refuses_graphs_the_policy_turned_off(monkeypatch):
    from hangwatch.generator.errors import CudagraphPolicyViolation

    module, calls = stand_in_with_workers(monkeypatch, "FULL")
    with pytest.raises(CudagraphPolicyViolation, match="cudagraph_mode=FULL"):
        with apply_rollout_policy({"HANGWATCH_CUDAGRAPHS": "0"}):
            module.build()
    assert module.LLM.__name__ == "LLM", "binding restored after the refusal"
    assert calls[-1] == "shutdown", "the refused engine is shut down"


def test_the_hf_callback_carries_what_the_engine_applied(monkeypatch):
    """The read-back's own beat can be overwritten before the supervisor samples it; the callback's
    beats from on_train_begin on carry it too."""
    from hangwatch.generator import applied as applied_module
    from hangwatch.generator.hf_callback import HangwatchCallbackCore

    monkeypatch.setattr(applied_module, "_last", None)
    module, _ = stand_in_with_workers(monkeypatch, None)
    with apply_rollout_policy({"HANGWATCH_CUDAGRAPHS": "0"}):
        module.build()
    beats = []
    core = HangwatchCallbackCore(env={"HANGWATCH_CUDAGRAPHS": "0"}, beat_fn=lambda **kw: beats.append(kw))
    core.on_train_begin(types.SimpleNamespace(), types.SimpleNamespace(global_step=0), None)
    assert beats[-1]["applied_cudagraph_mode"] == "NONE" and beats[-1]["cudagraphs"] == "off"


# -- the rollout-engine policy at TRL's real colocate LLM(...) call ------------------------------


def _load_example():
    spec = importlib.util.spec_from_file_location("trl_grpo_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def tiny_trl_parts():
    from accelerate import Accelerator

    example = _load_example()
    tokenizer = example.build_tokenizer()
    model = example.build_model(tokenizer, 0)
    return example, model, tokenizer, Accelerator(cpu=True)


@pytest.mark.slow
@pytest.mark.timeout(300)  # a tiny model built once for the module, from the example
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


@pytest.mark.timeout(300)  # a tiny model built once for the module, from the example
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
