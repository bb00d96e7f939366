"""In-process units: fake engine state machine, staging format, weight verification, offload, handshake."""

import os
import socket
import stat
import threading

import pytest
import torch
from safetensors import safe_open

from hangwatch.generator import protocol
from hangwatch.generator.engines.fake import FakeEngine
from hangwatch.generator.engines.toy_model import PackedToyModel, ToyPolicy
from hangwatch.generator.errors import AuthenticationFailed, EngineStateError, WeightMismatch
from hangwatch.generator.offload import TrainerOffload
from hangwatch.generator.staging import StagedReader, stage
from hangwatch.generator.weightsync import verify_loaded

from gen_helpers import CONFIG, fake_kwargs


def named(model):
    return [(n, p.detach()) for n, p in model.named_parameters()]


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


def test_staged_file_is_standard_safetensors(tmp_path, trainer):
    model, _ = trainer
    staged = stage(named(model), str(tmp_path))
    assert staged.path.endswith(".safetensors") and staged.nbytes > 0
    with safe_open(staged.path, "pt") as f:
        for name, tensor in named(model):
            assert torch.equal(f.get_tensor(name), tensor)
    with StagedReader(staged.path) as reader:
        assert dict((n, t.clone()) for n, t in reader.items()).keys() == dict(named(model)).keys()
    bf16 = stage([("w", torch.randn(3, 4).bfloat16()), ("e", torch.empty(0))], str(tmp_path))
    with safe_open(bf16.path, "pt") as f:
        assert f.get_tensor("w").dtype == torch.bfloat16


def test_verify_packed_and_tied(tmp_path, trainer):
    model, _ = trainer
    engine_model = PackedToyModel(CONFIG)
    staged = stage(named(model), str(tmp_path))
    assert "lm_head.weight" not in staged.manifest, "tied weight staged once"
    with StagedReader(staged.path) as reader:
        loaded = engine_model.load_weights(reader.items())
    report = verify_loaded(engine_model, staged.manifest, loaded)
    assert report["digest"] == staged.digest
    ids = torch.randint(0, CONFIG.vocab, (1, 6))
    assert torch.allclose(engine_model(ids), model(ids), atol=1e-5), "same function in both layouts"
    # A wrong slice of a packed parameter is caught: swap k and v rows.
    qkv = engine_model.model.layers[1].self_attn.qkv_proj.weight
    h, kv = CONFIG.hidden, CONFIG.kv
    with torch.no_grad():
        qkv[h:h + kv], qkv[h + kv:] = qkv[h + kv:].clone(), qkv[h:h + kv].clone()
    with pytest.raises(WeightMismatch, match="k_proj"):
        verify_loaded(engine_model, staged.manifest, loaded)


def test_offload_keeps_identities(trainer):
    model, opt = trainer
    ids = [id(p) for p in model.parameters()]
    keys = list(opt.state.keys())
    before = {k: {s: v.clone() for s, v in st.items()} for k, st in opt.state.items()}
    off = TrainerOffload(model, opt)
    off.offload()
    off.restore()
    off.restore()  # idempotent
    assert [id(p) for p in model.parameters()] == ids
    assert list(opt.state.keys()) == keys and all(a is b for a, b in zip(opt.state.keys(), model.parameters()))
    for k, st in opt.state.items():
        assert all(torch.equal(v, before[k][s]) for s, v in st.items())


def test_handshake_mutual_and_key_bound(tmp_path):
    path = str(tmp_path / "s.sock")
    listener = protocol.bind_listener(path)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    key = protocol.new_authkey()
    results = []

    def serve():
        for _ in range(2):
            conn, _ = listener.accept()
            try:
                protocol.server_handshake(conn, key, 2)
                results.append("ok")
            except AuthenticationFailed:
                results.append("refused")
            finally:
                conn.close()

    thread = threading.Thread(target=serve)
    thread.start()
    with pytest.raises(AuthenticationFailed):
        protocol.ControlClient(path, b"wrong" * 8, timeout=2)
    protocol.ControlClient(path, key, timeout=2).close()
    thread.join(5)
    listener.close()
    assert results == ["refused", "ok"]
    assert protocol.bind_listener(path).close() is None, "stale socket file is replaced"
    runtime = protocol.private_runtime_dir()
    assert stat.S_IMODE(os.stat(runtime).st_mode) == 0o700
    os.rmdir(runtime)
