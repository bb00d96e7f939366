"""The GPU probes: the file probe's missing, malformed and dead-holder cases."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from hangwatch.supervisor.watch.probes import FileProbe


pytestmark = pytest.mark.timeout(30)


def test_file_probe_missing_malformed_and_dead_holders(tmp_path):
    path = tmp_path / "gpu.json"
    probe = FileProbe(path)
    assert probe.sample() is None
    path.write_text("{oops")
    assert probe.sample() is None
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    path.write_text(json.dumps({"devices": [
        {"index": 0, "util_pct": 100, "mem_used_mib": 40000, "pids": [os.getpid()]},
        {"index": 1, "util_pct": 100, "mem_used_mib": 40000, "pids": [dead.pid]},
        {"index": 2, "util_pct": 100, "mem_used_mib": 10},
    ]}))
    d0, d1, d2 = probe.sample()
    assert (d0.util_pct, d0.pids) == (100.0, (os.getpid(),))
    assert (d1.util_pct, d1.mem_used_mib, d1.pids) == (0.0, 0.0, ()), "a dead process holds nothing"
    assert d2.pids is None, "no pids listed means ownership unknown"


def _fake_nvml(power, clock):
    import types

    class NVMLError(Exception):
        pass

    def unsupported(*_):
        raise NVMLError("Not Supported")

    calls = []
    return calls, types.SimpleNamespace(
        NVMLError=NVMLError, NVML_CLOCK_SM=1, nvmlInit=lambda: None, nvmlShutdown=lambda: None,
        nvmlDeviceGetCount=lambda: 1, nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlDeviceGetUtilizationRates=lambda h: types.SimpleNamespace(gpu=100),
        nvmlDeviceGetMemoryInfo=lambda h: types.SimpleNamespace(used=8 << 30),
        nvmlDeviceGetPowerUsage=(lambda h: power) if power is not None else unsupported,
        nvmlDeviceGetClockInfo=(lambda h, which: calls.append(which) or clock) if clock is not None else unsupported,
        nvmlDeviceGetComputeRunningProcesses=lambda h: [],
        nvmlDeviceGetGraphicsRunningProcesses=lambda h: [])


def test_the_nvml_probe_reads_power_in_watts_and_the_sm_clock(monkeypatch):
    from hangwatch.supervisor.watch.probes import NvmlProbe

    calls, fake = _fake_nvml(61_500, 1410)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    (device,) = NvmlProbe().sample()
    assert (device.util_pct, device.power_w, device.sm_clock_mhz) == (100.0, 61.5, 1410.0)
    assert calls == [1], "the SM clock (NVML_CLOCK_SM), not the graphics or memory clock"


def test_a_gpu_without_power_or_clock_counters_still_gives_its_sample(monkeypatch):
    from hangwatch.supervisor.watch.probes import NvmlProbe

    _, fake = _fake_nvml(None, None)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    (device,) = NvmlProbe().sample()
    assert (device.util_pct, device.power_w, device.sm_clock_mhz) == (100.0, None, None)
