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


def test_the_bundles_gpu_state_has_power_in_watts_and_the_sm_clock(monkeypatch):
    import sys
    import types

    from hangwatch.diagnostics import gpustate

    mem = types.SimpleNamespace(used=8 << 30, total=80 << 30)
    fake = types.SimpleNamespace(
        NVML_CLOCK_SM=1, nvmlInit=lambda: None, nvmlShutdown=lambda: None, nvmlSystemGetDriverVersion=lambda: "550.1",
        nvmlDeviceGetCount=lambda: 1, nvmlDeviceGetHandleByIndex=lambda i: i, nvmlDeviceGetName=lambda h: b"H100",
        nvmlDeviceGetUUID=lambda h: "GPU-1", nvmlDeviceGetUtilizationRates=lambda h: types.SimpleNamespace(gpu=100, memory=3),
        nvmlDeviceGetMemoryInfo=lambda h: mem, nvmlDeviceGetComputeRunningProcesses=lambda h: [],
        nvmlDeviceGetPowerUsage=lambda h: 72_000, nvmlDeviceGetClockInfo=lambda h, which: {1: 1980}[which])
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    (device,) = gpustate._nvml()["devices"]
    assert (device["util_gpu_pct"], device["power_w"], device["sm_clock_mhz"]) == (100, 72.0, 1980)
    shown = gpustate.readings({"nvml": {"available": True, "devices": [device]}}, [])
    assert gpustate.describe_reading(shown[0]) == "GPU 0: 100% util, 72 W, 1980 MHz SM"


def test_gpu_readings_fall_back_to_the_last_sample_and_old_samples_show_no_power():
    from hangwatch.contract.samples import DeviceSample, Sample
    from hangwatch.diagnostics import gpustate

    samples = [Sample(1.0, 1.0, {}, (DeviceSample(0, 100.0, 10.0, power_w=61.0, sm_clock_mhz=1410.0),)),
               Sample(2.0, 2.0, {}, None)]
    (reading,) = gpustate.readings({"nvml": {"available": False}}, samples)
    assert reading["source"] == "last sample"
    assert gpustate.describe_reading(reading) == "GPU 0: 100% util, 61 W, 1410 MHz SM"
    old = [Sample(1.0, 1.0, {}, (DeviceSample(0, 100.0, 10.0),))]
    assert gpustate.describe_reading(gpustate.readings(None, old)[0]) == "GPU 0: 100% util"
