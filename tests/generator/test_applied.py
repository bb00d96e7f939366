"""What the engine's GPU worker applied: read back on the worker, beaten, and refused when it contradicts the policy.

The fake engine mixes the real ``WeightSyncExtension`` into a fake GPU worker and reads
back through ``collective_rpc``; ``fake_worker_cudagraph_mode`` scripts the worker-side
resolution (a downgrade, or a worker that turns graphs back on). The real ``VLLMEngine``
runs against a stand-in ``vllm`` module: its code path up to ``LLM(...)`` is the real one.
"""

import enum
import json
import os
import sys
import types

import psutil
import pytest
from hangwatch.generator.applied import APPLIED_RPC, AppliedSettings, check_applied, compilation_settings
from hangwatch.generator.colocated import ColocatedGenerator, Timeouts
from hangwatch.generator.engines.vllm_engine import EXTENSION, VLLMEngine
from hangwatch.generator.engines.vllm_extension import WeightSyncExtension
from hangwatch.generator.errors import CudagraphPolicyViolation, GeneratorError, UnsupportedEngineConfig
from hangwatch.generator.process import worker_environment

from gen_helpers import fake_kwargs

pytestmark = pytest.mark.timeout(60)

FAST = Timeouts(start=30, op=5, load=10, generate=10, grace=0.5)


class Mode(enum.Enum):  # shaped like vLLM's CUDAGraphMode / CompilationMode
    NONE = 0
    PIECEWISE = 1
    FULL_AND_PIECEWISE = 4
    VLLM_COMPILE = 3


# -- pure parts ---------------------------------------------------------------------------------


def test_compilation_settings_reads_enums_and_old_level():
    assert compilation_settings(types.SimpleNamespace(cudagraph_mode=Mode.NONE, mode=Mode.VLLM_COMPILE)) == \
        {"cudagraph_mode": "NONE", "compile_mode": "VLLM_COMPILE"}
    assert compilation_settings(types.SimpleNamespace(cudagraph_mode="CUDAGraphMode.PIECEWISE", level=3)) == \
        {"cudagraph_mode": "PIECEWISE", "compile_mode": "3"}


def test_workers_must_agree_and_answer():
    one = {"cudagraph_mode": "NONE", "compile_mode": "VLLM_COMPILE"}
    assert AppliedSettings.from_reports([one, one]).workers == 2
    with pytest.raises(GeneratorError, match="disagree"):
        AppliedSettings.from_reports([one, {**one, "cudagraph_mode": "PIECEWISE"}])
    with pytest.raises(GeneratorError, match="no GPU worker"):
        AppliedSettings.from_reports([])
    two = AppliedSettings.from_reports([one, one])
    assert AppliedSettings.from_json(two.to_json()) == two, "the start report keeps the worker count"
    with pytest.raises(GeneratorError, match="no applied settings"):
        AppliedSettings.from_json(None)  # an engine that did not read back is not trusted


def test_refusal_only_when_policy_off_and_worker_on():
    on = AppliedSettings("PIECEWISE", "VLLM_COMPILE", 1)
    off = AppliedSettings("NONE", "VLLM_COMPILE", 1)
    check_applied(True, on)
    check_applied(True, off)
    check_applied(False, off)
    with pytest.raises(CudagraphPolicyViolation, match="cudagraph_mode=PIECEWISE.*cudagraph_mod'"):
        check_applied(False, on, requested={"compilation_config": {"cudagraph_mod": "NONE"}})


# -- the extension method and the real engine's code, against stand-ins ---------------------------


def test_extension_reads_the_model_runners_resolved_copy():
    worker = WeightSyncExtension()
    worker.vllm_config = types.SimpleNamespace(
        compilation_config=types.SimpleNamespace(cudagraph_mode=Mode.FULL_AND_PIECEWISE, mode=Mode.VLLM_COMPILE))
    worker.model_runner = types.SimpleNamespace(
        compilation_config=types.SimpleNamespace(cudagraph_mode=Mode.PIECEWISE, mode=Mode.VLLM_COMPILE))
    assert getattr(worker, APPLIED_RPC)()["cudagraph_mode"] == "PIECEWISE"
    worker.model_runner = types.SimpleNamespace()  # a runner without its own config: the worker's
    assert getattr(worker, APPLIED_RPC)()["cudagraph_mode"] == "FULL_AND_PIECEWISE"


def test_vllm_engine_reads_back_on_the_workers_not_the_front_end(monkeypatch):
    calls = []

    class StandInLLM:
        def __init__(self, **kwargs):
            calls.append(("init", kwargs))
            # the front end's copy says FULL_AND_PIECEWISE; the worker downgraded it
            self.llm_engine = types.SimpleNamespace(vllm_config=types.SimpleNamespace(
                compilation_config=types.SimpleNamespace(cudagraph_mode=Mode.FULL_AND_PIECEWISE)))

        def collective_rpc(self, method, timeout=None, args=(), kwargs=None):
            calls.append(("rpc", method))
            return [{"cudagraph_mode": "PIECEWISE", "compile_mode": "VLLM_COMPILE"}] * 2

        def sleep(self, level=1):
            calls.append(("sleep", level))

    stand_in_vllm(monkeypatch, StandInLLM, sleep_mode=True)
    report = VLLMEngine({"model": "m"}).start()
    assert report["applied"] == {"cudagraph_mode": "PIECEWISE", "compile_mode": "VLLM_COMPILE", "workers": 2}
    assert calls[0][1]["worker_extension_cls"] == EXTENSION and calls[0][1]["enable_sleep_mode"] is True
    assert [c[0] for c in calls] == ["init", "rpc", "sleep"] and calls[1][1] == APPLIED_RPC, "read before sleeping"
    assert report["sleep_mode"] is True and os.environ["HANGWATCH_ENGINE_CUDAGRAPHS"] == "on"
    # A platform without sleep mode (vLLM's CPU build): vLLM would refuse the flag; dropped, never slept.
    calls.clear()
    stand_in_vllm(monkeypatch, StandInLLM, sleep_mode=False)
    engine = VLLMEngine({"model": "m", "compilation_config": {"cudagraph_mode": "NONE"}})
    report = engine.start()
    assert calls[0][1]["enable_sleep_mode"] is False and [c[0] for c in calls] == ["init", "rpc"]
    assert report["sleep_mode"] is False and report["platform"] == "cpu"
    engine.wake_weights(), engine.wake_kv(), engine.sleep()
    assert [c[0] for c in calls] == ["init", "rpc"], "sleep and wake are no-ops without sleep mode"
    assert os.environ["HANGWATCH_ENGINE_CUDAGRAPHS"] == "off", "the engine's processes see its graph policy"


def stand_in_vllm(monkeypatch, llm, *, sleep_mode):
    """``vllm`` and ``vllm.platforms`` as VLLMEngine.start imports them; the platform's sleep mode as asked."""
    platform = types.SimpleNamespace(is_sleep_mode_available=lambda: sleep_mode,
                                     device_name="cuda" if sleep_mode else "cpu")
    monkeypatch.setitem(sys.modules, "vllm", types.SimpleNamespace(LLM=llm, SamplingParams=dict))
    monkeypatch.setitem(sys.modules, "vllm.platforms", types.SimpleNamespace(current_platform=platform))
    monkeypatch.setenv("HANGWATCH_ENGINE_CUDAGRAPHS", "unset")  # restored after the test


@pytest.mark.parametrize("key", ["tensor_parallel_size", "pipeline_parallel_size"])
def test_tensor_parallel_is_refused_up_front(key, trainer, tmp_path):
    model, opt = trainer
    with pytest.raises(UnsupportedEngineConfig, match=f"{key}=2 is not supported.*shards"):
        VLLMEngine({key: 2})
    for engine in ("fake", "vllm"):
        with pytest.raises(UnsupportedEngineConfig, match=f"{key}=2"):
            ColocatedGenerator(model, opt, engine=engine, engine_kwargs=fake_kwargs(**{key: 2}),
                               log_dir=str(tmp_path))
    assert not list(tmp_path.iterdir()), "nothing spawned, nothing written"
    VLLMEngine({key: 1})  # explicit 1 is fine


def test_worker_keeps_the_users_allocator_settings():
    env = worker_environment({"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True,max_split_size_mb:512",
                              "PYTORCH_ALLOC_CONF": "garbage_collection_threshold:0.8"}, "0")
    assert env["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True,max_split_size_mb:512"
    assert env["PYTORCH_ALLOC_CONF"] == "garbage_collection_threshold:0.8"


# -- end to end with a real worker process ------------------------------------------------------


@pytest.mark.slow
def test_applied_mode_is_beaten_for_the_journal_including_a_worker_downgrade(trainer, tmp_path, monkeypatch):
    model, opt = trainer
    hb = tmp_path / "hb.json"
    monkeypatch.setenv("HANGWATCH_HEARTBEAT", str(hb))
    with ColocatedGenerator(model, opt, engine_kwargs=fake_kwargs(fake_worker_cudagraph_mode="PIECEWISE"),
                            log_dir=str(tmp_path), timeouts=FAST) as gen:
        gen.generate(["p"], 1, seed=0, step=4)
        assert gen.applied == AppliedSettings("PIECEWISE", "VLLM_COMPILE", 1)
        worker = gen.worker_pid
    info = json.loads(hb.read_text())["info"]
    assert info.pop("engine_worker_pid") == worker, "the worker the generator's phases wait on"
    assert info == {"cudagraphs": "on", "enforce_eager": False, "applied_cudagraph_mode": "PIECEWISE",
                    "applied_compile_mode": "VLLM_COMPILE", "rollouts_ok": 0}


@pytest.mark.slow
def test_graphs_off_policy_with_graphs_on_worker_is_refused(trainer, tmp_path, monkeypatch):
    model, opt = trainer
    hb = tmp_path / "hb.json"
    monkeypatch.setenv("HANGWATCH_HEARTBEAT", str(hb))
    ids = [id(p) for p in model.parameters()]
    kwargs = fake_kwargs(compilation_config={"cudagraph_mode": "NONE"}, fake_worker_cudagraph_mode="FULL")
    gen = ColocatedGenerator(model, opt, engine_kwargs=kwargs, log_dir=str(tmp_path), timeouts=FAST)
    try:
        with pytest.raises(CudagraphPolicyViolation, match="cudagraph_mode=FULL") as info:
            gen.generate(["p"], 1, seed=0, step=7)
        assert info.value.log_path.endswith("generator-worker.log")
        pid = gen.timings[-1].worker_pid
        assert gen.worker is None and (pid is None or not _alive(pid)), "the refused worker is gone"
        record = json.loads((tmp_path / "generator-worker.json").read_text())
        assert record["applied"]["cudagraph_mode"] == "FULL" and record["cudagraphs_expected"] == "off"
        assert "applied_cudagraph_mode" not in gen.beat_info, "a dead worker's settings are not reported on"
        assert [id(p) for p in model.parameters()] == ids, "trainer tensors restored"
        beat = json.loads(hb.read_text())  # the last beat (restore) comes after the refused worker died
        assert beat["phase"] == "restore" and beat["info"]["cudagraphs"] == "off"
    finally:
        gen.close()


@pytest.mark.slow
def test_env_policy_off_is_applied_and_a_misspelled_override_is_refused(trainer, tmp_path, monkeypatch):
    model, opt = trainer
    monkeypatch.setenv("HANGWATCH_CUDAGRAPHS", "0")  # what the supervisor sets after a stall
    gen = ColocatedGenerator(model, opt, engine_kwargs=fake_kwargs(), log_dir=str(tmp_path), timeouts=FAST)
    assert gen.engine_kwargs["compilation_config"] == {"cudagraph_mode": "NONE"}  # applied by default
    assert gen.beat_info["cudagraphs"] == "off"
    gen.close()
    # The caller's own compilation_config wins, with a typo: vLLM drops the key and keeps graphs on.
    kwargs = fake_kwargs(compilation_config={"cudagraph_mod": "NONE"})
    with ColocatedGenerator(model, opt, engine_kwargs=kwargs, log_dir=str(tmp_path), timeouts=FAST) as gen:
        assert gen.beat_info["cudagraphs"] == "off"
        with pytest.raises(CudagraphPolicyViolation, match="FULL_AND_PIECEWISE.*cudagraph_mod'"):
            gen.generate(["p"], 1, seed=0)


def _alive(pid):
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
