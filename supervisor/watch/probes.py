"""GPU probes: what each device is doing and which processes hold it.

One interface, three implementations:
* ``NvmlProbe``: the real one, NVML through nvidia-ml-py (``pynvml``);
* ``FileProbe``: a simulated GPU for CPU-only machines, a JSON file reread every
  tick (written by hand, by a test, or by ``hangwatch.contract.simgpu``);
* ``NoProbe``: GPU-based detection off.

A probe returns ``None`` when it has no sample this tick (missing, which the
detector must not read as idle), never raises from ``sample()``.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Protocol

import structlog

from hangwatch.contract.capped import read_capped
from hangwatch.contract.procid import pid_running
from hangwatch.contract.samples import DeviceSample, optional_float

log = structlog.get_logger("hangwatch.probe")


class ProbeError(ValueError):
    """A ``--gpu-probe`` value that cannot be used; the message says how to fix it."""


class GpuProbe(Protocol):
    name: str

    def sample(self) -> tuple[DeviceSample, ...] | None: ...

    def close(self) -> None: ...


class NoProbe:
    name = "none"

    def sample(self) -> tuple[DeviceSample, ...] | None:
        return None

    def close(self) -> None:
        pass


MAX_PROBE_FILE_BYTES = 1 << 20  # a few devices' numbers: a few hundred bytes


class FileProbe:
    """Reads ``{"devices": [{"index", "util_pct", "mem_used_mib", "pids"}]}`` each tick
    (``power_w`` and ``sm_clock_mhz`` optional, as NVML's).

    A missing file is no sample. A malformed file is logged (once per distinct
    problem) and skipped. Listed pids that are no longer alive are dropped, and
    a device whose every listed holder has died reads idle with no memory held:
    a dead process runs no kernels, which is what the real driver reports.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.name = f"file:{self.path}"
        self._last_problem: str | None = None

    def sample(self) -> tuple[DeviceSample, ...] | None:
        try:
            raw = read_capped(self.path, MAX_PROBE_FILE_BYTES)  # every tick: never blocks, never unbounded
        except FileNotFoundError:
            return None
        except OSError as exc:
            self._problem(f"cannot read {self.path}: {exc}")
            return None
        try:
            data = json.loads(raw)
            devices = _devices_of_live_holders(data) if isinstance(data, dict) and "holders" in data \
                else _parse_devices(data)
        except (ValueError, KeyError, TypeError, RecursionError, OverflowError) as exc:
            self._problem(f"malformed GPU probe file {self.path}: {exc}")
            return None
        self._last_problem = None
        return tuple(_drop_dead_holders(d) for d in devices)

    def _problem(self, message: str) -> None:
        if message != self._last_problem:
            log.warning("gpu_probe_sample_skipped", problem=message)
            self._last_problem = message

    def close(self) -> None:
        pass


def _devices_of_live_holders(data: dict) -> list[DeviceSample]:
    """Devices from the per-process holders that ``contract.simgpu`` keeps, counting only
    live ones: a killed engine's 100 % must vanish with it, as on a real GPU (NVML stops
    reporting a dead process's kernels and memory), even while the trainer holds the device."""
    holders = data["holders"]
    if not isinstance(holders, dict):
        raise TypeError("'holders' must be an object of pid -> {index, util_pct, mem_used_mib}")
    devices: dict[int, list] = {}
    for pid_text, h in holders.items():
        index = int(h["index"])
        entry = devices.setdefault(index, [0.0, 0.0, [], None, None])
        if not pid_running(int(pid_text)):
            continue
        entry[0] = max(entry[0], float(h["util_pct"]))
        entry[1] += float(h["mem_used_mib"])
        entry[2].append(int(pid_text))
        # One board's power and clock, whoever declared them: the highest reading.
        entry[3] = _highest(entry[3], optional_float(h.get("power_w")))
        entry[4] = _highest(entry[4], optional_float(h.get("sm_clock_mhz")))
    return [DeviceSample(i, u, m, tuple(pids), power, clock) for i, (u, m, pids, power, clock) in sorted(devices.items())]


def _highest(a: float | None, b: float | None) -> float | None:
    return b if a is None else (a if b is None else max(a, b))


def _parse_devices(data: object) -> list[DeviceSample]:
    if not isinstance(data, dict) or not isinstance(data.get("devices"), list):
        raise ValueError('expected an object like {"devices": [{"index": 0, "util_pct": 100, ...}]}')
    devices = []
    for i, entry in enumerate(data["devices"]):
        if not isinstance(entry, dict):
            raise ValueError(f"devices[{i}] is not an object")
        if "util_pct" not in entry:
            raise ValueError(f"devices[{i}] has no util_pct")
        pids = entry.get("pids")
        devices.append(
            DeviceSample(
                index=int(entry.get("index", i)),
                util_pct=float(entry["util_pct"]),
                mem_used_mib=float(entry.get("mem_used_mib", 0.0)),
                pids=tuple(int(p) for p in pids) if pids is not None else None,
                power_w=optional_float(entry.get("power_w")),
                sm_clock_mhz=optional_float(entry.get("sm_clock_mhz")),
            )
        )
    return devices


def _drop_dead_holders(device: DeviceSample) -> DeviceSample:
    if not device.pids:
        return device
    alive = tuple(p for p in device.pids if pid_running(p))
    if alive:
        return dataclasses.replace(device, pids=alive)
    # Power and clock declared by the dead holders no longer hold either: unknown.
    return DeviceSample(device.index, 0.0, 0.0, ())


class NvmlProbe:
    """The real probe: utilisation, memory, power draw, SM clock and compute processes per device."""

    name = "nvml"

    def __init__(self) -> None:
        import pynvml  # noqa: PLC0415  (optional at import time: CPU-only machines)

        self._nvml = pynvml
        pynvml.nvmlInit()
        self._handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
        self._failed_once = False

    def sample(self) -> tuple[DeviceSample, ...] | None:
        nvml = self._nvml
        try:
            devices = []
            for index, handle in enumerate(self._handles):
                util = nvml.nvmlDeviceGetUtilizationRates(handle).gpu
                mem = nvml.nvmlDeviceGetMemoryInfo(handle).used / (1024 * 1024)
                devices.append(DeviceSample(index, float(util), float(mem), self._pids(handle),
                                            power_w=self._power_w(handle), sm_clock_mhz=self._sm_clock(handle)))
            return tuple(devices)
        except nvml.NVMLError as exc:
            if not self._failed_once:
                log.warning("nvml_sample_failed", error=str(exc))
                self._failed_once = True
            return None

    def _power_w(self, handle: object) -> float | None:
        """Board power draw in W (NVML says mW); None where the GPU does not report it."""
        nvml = self._nvml
        try:
            return nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0
        except nvml.NVMLError:  # NotSupported on some boards: the sample stands without it
            return None

    def _sm_clock(self, handle: object) -> float | None:
        """The SM clock in MHz now; None where the GPU does not report it."""
        nvml = self._nvml
        try:
            return float(nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM))
        except nvml.NVMLError:
            return None

    def _pids(self, handle: object) -> tuple[int, ...] | None:
        nvml = self._nvml
        pids: list[int] = []
        try:
            for getter in (nvml.nvmlDeviceGetComputeRunningProcesses, nvml.nvmlDeviceGetGraphicsRunningProcesses):
                pids.extend(p.pid for p in getter(handle))
        except nvml.NVMLError:
            return None
        # NVML lists host pids. In a container without the host PID namespace the list is
        # empty, or names pids that are not ours to see: either way "unknown" (None) is the
        # honest answer. Taken as they are, host pids matched no tree process, so the device
        # read as held only by strangers and a wedge on it could never be a stall.
        listed = sorted(set(pids))
        if not listed or not all(pid_running(pid) for pid in listed):
            return None
        return tuple(listed)

    def close(self) -> None:
        try:
            self._nvml.nvmlShutdown()
        except Exception:  # noqa: BLE001  (shutdown during exit must not mask the real outcome)
            pass


def make_probe(spec: str) -> tuple[GpuProbe, str | None]:
    """Build the probe ``--gpu-probe`` names. Returns it and, for ``auto`` without
    NVML, the one message saying GPU-based detection is off."""
    if spec == "none":
        return NoProbe(), None
    if spec.startswith("file:"):
        path = spec[len("file:") :]
        if not path:
            raise ProbeError("--gpu-probe file: needs a path, e.g. --gpu-probe file:/tmp/gpu.json")
        return FileProbe(path), None
    if spec in ("nvml", "auto"):
        try:
            return NvmlProbe(), None
        except Exception as exc:  # noqa: BLE001  (ImportError, NVMLError_LibraryNotFound, driver errors)
            if spec == "nvml":
                raise ProbeError(
                    f"--gpu-probe nvml: NVML is not usable here ({exc}); install nvidia-ml-py and an "
                    "NVIDIA driver, or use --gpu-probe none"
                ) from exc
            return NoProbe(), (
                f"NVML not available ({type(exc).__name__}: {exc}); GPU-based stall detection is OFF. "
                "Only crashes and silent hangs (no heartbeat progress) will be detected."
            )
    raise ProbeError(f"--gpu-probe {spec!r}: expected auto, nvml, none or file:PATH")
