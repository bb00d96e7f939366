"""Weight verification after a load: the packed engine layout and tied weights check out, a wrong
slice of a packed parameter is caught."""

import pytest
import torch

from hangwatch.generator.engines.toy_model import PackedToyModel
from hangwatch.generator.errors import WeightMismatch
from hangwatch.generator.staging import StagedReader, stage
from hangwatch.generator.weightsync import verify_loaded

from gen_helpers import CONFIG, named


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


def test_verify_received_proves_the_bytes_handed_to_the_loader(tmp_path, trainer):
    """Where the engine packs weights away (vLLM on CPU), the proof is what reached its loader."""
    from hangwatch.generator.weightsync import Received, kernel_format, verify_received

    model, _ = trainer
    staged = stage(named(model), str(tmp_path))
    with StagedReader(staged.path) as reader:
        received = Received(reader.items())
        assert len(list(received)) == len(staged.manifest)
    assert verify_received(staged.manifest, received)["digest"] == staged.digest
    wrong = {k: dict(v) for k, v in staged.manifest.items()}
    name = next(iter(wrong))
    wrong[name]["xxh3_128"] = "0" * 32
    with pytest.raises(WeightMismatch, match="fingerprint mismatch"):
        verify_received(wrong, received)
    partial = dict(list(received.entries.items())[1:])
    short = Received([])
    short.entries = partial
    with pytest.raises(WeightMismatch, match="not loaded"):
        verify_received(staged.manifest, short)
    assert not kernel_format(PackedToyModel(CONFIG))
    packed = PackedToyModel(CONFIG)
    packed.lm_head.cpu_linear = torch.nn.functional.linear  # what vLLM's CPU dispatch leaves behind
    assert kernel_format(packed)
