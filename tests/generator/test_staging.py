"""The staging file a generator keeps across syncs."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
from safetensors import safe_open

from hangwatch.generator.fingerprint import build_manifest
from hangwatch.generator.staging import StagedReader, Stager, stage, sweep_orphans

from gen_helpers import named

pytestmark = pytest.mark.timeout(60)


def _weights(scale: float) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return {"a.weight": torch.randn(64, 32, generator=g) * scale, "b.bias": torch.randn(32, generator=g) * scale,
            "empty": torch.empty(0)}


def _read(path: str) -> dict[str, torch.Tensor]:
    with StagedReader(path) as reader:
        return {name: t.clone() for name, t in reader.items()}


def test_later_syncs_rewrite_the_same_file_with_the_new_bytes(tmp_path):
    stager = Stager(str(tmp_path), reuse=True)
    first = stager.stage(_weights(1.0).items())
    for scale in (2.0, 3.0):
        weights = _weights(scale)
        staged = stager.stage(weights.items())
        assert staged.path == first.path
        assert staged.manifest == build_manifest(weights.items()) != first.manifest
        loaded = _read(staged.path)
        assert all(torch.equal(loaded[k], weights[k]) for k in weights)
        stager.done(staged)
        assert os.path.exists(staged.path), "kept for the next sync"
    stager.discard()
    assert not os.listdir(tmp_path)


def test_a_new_layout_gets_a_new_file_and_reuse_off_removes_after_load(tmp_path):
    stager = Stager(str(tmp_path), reuse=True)
    first = stager.stage(_weights(1.0).items())
    bigger = {**_weights(1.0), "c.weight": torch.ones(8, 8)}
    second = stager.stage(bigger.items())
    assert second.path != first.path and not os.path.exists(first.path)
    assert _read(second.path)["c.weight"].sum().item() == 64
    stager.discard()

    once = Stager(str(tmp_path), reuse=False)
    staged = once.stage(_weights(1.0).items())
    once.done(staged)
    assert not os.listdir(tmp_path)


def test_sweep_removes_only_files_of_dead_processes(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    orphan = tmp_path / f".hangwatch-weights-{dead.pid}-abc.safetensors"
    mine = tmp_path / f".hangwatch-weights-{os.getpid()}-def.safetensors"
    other = tmp_path / "model.safetensors"
    for path in (orphan, mine, other):
        path.write_bytes(b"x")
    assert sweep_orphans(str(tmp_path)) == [orphan.name]
    assert mine.exists() and other.exists()


def test_runtime_dirs_of_dead_owners_are_swept(tmp_path):
    from hangwatch.generator.protocol import sweep_runtime_dirs

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = tmp_path / f"hangwatch-gen-{dead.pid}-abc"
    live = tmp_path / f"hangwatch-gen-{os.getpid()}-def"
    keep = tmp_path / f"hangwatch-gen-{dead.pid}-xyz"
    for d in (stale, live, keep):
        d.mkdir(mode=0o700)
        (d / "control.sock").write_text("")
    (keep / "something-else").write_text("")  # not ours to delete: the directory stays
    assert sweep_runtime_dirs(base=str(tmp_path)) == [stale.name]
    assert live.exists() and keep.exists() and not stale.exists()


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
