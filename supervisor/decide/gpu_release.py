"""Whether killed processes' GPU memory is free again: a pure test of probe readings.

After a whole-tree kill the supervisor waits for it (bounded by ``--gpu-release-timeout``)
so that the next attempt does not start on a device still holding the old one's memory.
A device whose probe lists its processes answers exactly: none of the killed pids is on
it. A device that lists none (NVML in a container without the host PID namespace) can
only be judged by its used memory: nothing of ours is left, so it is free once it holds
at most ``threshold_mib`` (the driver's own reservation and other tenants' crumbs).

The engine-level restart asks only the exact question (``engine_gpu_released``): is
any killed worker still listed on a device? The trainer lives on and keeps its own memory,
so a device's total says nothing about the killed worker's share; where no device lists
its processes the release cannot be verified at that level, and the answer says so.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from hangwatch.contract.samples import DeviceSample


def gpu_released(now: Sequence[DeviceSample], killed: Collection[int], threshold_mib: float) -> bool:
    if any(set(killed).intersection(d.pids) for d in now if d.pids):
        return False
    return all(d.mem_used_mib <= threshold_mib for d in now if not d.pids)


def engine_gpu_released(now: Sequence[DeviceSample], killed: Collection[int]) -> bool | None:
    """After an engine-only kill: False while a killed pid still holds a device, True once
    none does, None when no device lists any process (nothing exact to go by: the trainer
    keeps a CUDA context, so an empty list on every device is a probe that cannot see
    processes, as NVML in a container without the host's PID namespace)."""
    if not any(d.pids for d in now):
        return None
    return not any(set(killed).intersection(d.pids or ()) for d in now)
