"""Whether killed processes' GPU memory is free again: a pure test of probe readings.

After a whole-tree kill the supervisor waits for it (bounded by ``--gpu-release-timeout``)
so that the next attempt does not start on a device still holding the old one's memory.
A device whose probe lists its processes answers exactly: none of the killed pids is on
it. A device that lists none (NVML in a container without the host PID namespace) can
only be judged by its used memory: nothing of ours is left, so it is free once it holds
at most ``threshold_mib`` (the driver's own reservation and other tenants' crumbs).

The engine-level restart does not wait on this: the trainer lives on and keeps its own
memory, so a device's total says nothing about the killed worker's share, and the
generator restarts its engine as soon as it sees the worker die.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from hangwatch.contract.samples import DeviceSample


def gpu_released(now: Sequence[DeviceSample], killed: Collection[int], threshold_mib: float) -> bool:
    if any(set(killed).intersection(d.pids) for d in now if d.pids):
        return False
    return all(d.mem_used_mib <= threshold_mib for d in now if not d.pids)
