"""Shared fixtures: every test must leave no live child process behind."""

from __future__ import annotations

import os
import signal
import time

import psutil
import pytest
import torch

from gen_helpers import CONFIG
from hangwatch.generator.engines.toy_model import ToyPolicy


def live_descendants() -> list[psutil.Process]:
    out = []
    for child in psutil.Process().children(recursive=True):
        try:
            if child.status() != psutil.STATUS_ZOMBIE:
                out.append(child)
        except psutil.NoSuchProcess:
            pass
    return out


@pytest.fixture(autouse=True)
def no_orphans():
    before = {p.pid for p in live_descendants()}
    yield
    deadline = time.monotonic() + 5
    leftover = [p for p in live_descendants() if p.pid not in before]
    while leftover and time.monotonic() < deadline:
        time.sleep(0.05)
        leftover = [p for p in live_descendants() if p.pid not in before]
    for proc in leftover:
        try:
            os.killpg(proc.pid, signal.SIGKILL) if os.getpgid(proc.pid) == proc.pid else proc.kill()
        except (ProcessLookupError, psutil.Error):
            pass
    assert not leftover, f"test left processes behind: {leftover}"


@pytest.fixture
def sim_gpu(tmp_path, monkeypatch):
    path = tmp_path / "simgpu.json"
    monkeypatch.setenv("HANGWATCH_SIM_GPU", str(path))
    return path


@pytest.fixture
def trainer():
    torch.manual_seed(0)
    model = ToyPolicy(CONFIG)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    loss = model(torch.randint(0, CONFIG.vocab, (2, 5))).logsumexp(-1).mean()
    loss.backward()
    opt.step()  # optimizer state exists, as it would mid-training
    return model, opt
