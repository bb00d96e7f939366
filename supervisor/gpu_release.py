"""Whether killed processes' GPU memory is free again: a pure test of probe readings.

The supervisor waits for it after a kill (bounded by ``--gpu-release-timeout``) so that
the next engine or attempt does not start on a device still holding the old one's memory.

A device whose probe lists its processes answers exactly: none of the killed pids is on
it. A device that lists none (NVML in a container without the host PID namespace) can
only be judged by its used memory, and how depends on what was killed:

* the whole tree: nothing of ours is left, so the device is free once it holds at most
  ``threshold_mib`` (the driver's own reservation and other tenants' crumbs);
* only the rollout engine's worker (level 1): the trainer lives on and keeps its memory,
  so a device's total never falls that low. The test is then the drop since the kill:
  those devices together hold at least ``threshold_mib`` less than they did when the kill
  began (an engine's worth freed: its weights and KV cache are many GiB), or every one of
  them is under ``threshold_mib``. Waiting for the whole-tree level here would wait out
  the full timeout on every engine restart.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from hangwatch.contract.samples import DeviceSample


def gpu_released(now: Sequence[DeviceSample], killed: Collection[int], threshold_mib: float, *,
                 before: Sequence[DeviceSample] | None = None, engine_only: bool = False) -> bool:
    """``before``: the devices as the kill began (for ``engine_only``; None when the probe
    could not read them then, and the kill's own confirmation has to do)."""
    unlisted = [d for d in now if not d.pids]
    if any(set(killed).intersection(d.pids) for d in now if d.pids):
        return False
    if not unlisted or all(d.mem_used_mib <= threshold_mib for d in unlisted):
        return True
    if not engine_only:
        return False
    if before is None:
        return True  # nothing to compare with: the processes are confirmed dead, memory unknown
    held_before = sum(d.mem_used_mib for d in before if d.index in {u.index for u in unlisted})
    return held_before - sum(d.mem_used_mib for d in unlisted) >= threshold_mib
