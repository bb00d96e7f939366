"""The trainer's offload while the engine generates: parameters and optimizer state keep their identities."""

import torch

from hangwatch.generator.offload import TrainerOffload


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
