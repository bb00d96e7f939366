"""GPU state in a capture: what it says of a tool it would not run."""

from __future__ import annotations

import os

import pytest

pytestmark = pytest.mark.timeout(30)


def test_an_nvidia_smi_passed_over_is_named_not_said_missing(tmp_path, monkeypatch):
    """Root's capture passes over an nvidia-smi another user could change; its GPU state said
    'nvidia-smi not on PATH', sending the reader after a missing driver."""
    from hangwatch.contract import private
    from hangwatch.diagnostics import gpustate

    monkeypatch.setattr(private, "_privileged", lambda: True, raising=False)
    os.chmod(tmp_path, 0o755)
    tool = tmp_path / "nvidia-smi"
    tool.write_text("#!/bin/sh\nexit 0\n")
    os.chmod(tool, 0o777)  # anyone may change it
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(gpustate, "_nvml", lambda: {"available": False, "devices": []})
    state = gpustate.gpu_state(nvidia_smi_timeout=5.0)
    assert state["nvidia_smi"]["available"] is False
    assert "passed over" in state["nvidia_smi"]["reason"] and str(tool) in state["nvidia_smi"]["reason"]
