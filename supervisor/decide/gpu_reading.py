"""What one sample says about the GPUs: busy, and whether the processes that hold them are idle.

Pure functions of a ``Sample`` and the two thresholds (``gpu_busy_pct``, ``cpu_idle_pct``),
for the detector's rules (``detector``): ``classify_devices`` on every tick (the hot path
of a replay), ``scan_devices`` for a verdict's evidence, ``engine_wedged_device`` for the
engine step rule's wedge signature on the engine's own GPU. A device that names no holders
(NVML in a container) may be the tree's, with the whole tree's CPU as its holders' (the
conservative choice: a busy host means no stall); one held only by processes outside the
tree is not the tree's.
"""

from __future__ import annotations

from typing import Mapping

from hangwatch.contract.samples import DeviceSample, Sample


class DeviceScan:
    """What one sample says about the devices, computed in a single pass.

    ``busy``: indices of devices the tree may use that read >= the busy threshold.
    ``stalled``: those of them whose holders use <= the idle threshold.
    ``stalled_util``/``stalled_cpu``: the stalled device with the least holder CPU.
    ``busy_cpu``: the holders' CPU of the busiest device (the evidence's when none is stalled).
    """

    __slots__ = ("busy", "stalled", "max_util", "stalled_util", "stalled_cpu", "busy_cpu")

    def __init__(self) -> None:
        self.busy: list[int] = []
        self.stalled: list[int] = []
        self.max_util = 0.0
        self.stalled_util = 0.0
        self.stalled_cpu = 0.0
        self.busy_cpu = 0.0


NOT_BUSY = "not_busy"  # no busy device the tree may use (or no GPU sample)
BUSY = "busy"  # some busy device, every one with working holders
STALLED = "stalled"  # some busy device whose holders are idle


def classify_devices(sample: Sample, tree_cpu: float, busy_pct: float, idle_pct: float) -> str:
    """The hot path of a replay (millions of samples): one pass, no allocation,
    stops at the first stalled device. ``scan_devices`` says the same thing in detail."""
    devices = sample.gpu
    if not devices:
        return NOT_BUSY
    cpu = sample.cpu_pct
    result = NOT_BUSY
    for d in devices:
        if d.util_pct < busy_pct:
            continue
        pids = d.pids
        if not pids:
            holders_cpu = tree_cpu
        else:
            holders_cpu = 0.0
            held = False
            for p in pids:
                c = cpu.get(p)
                if c is not None:
                    holders_cpu += c
                    held = True
            if not held:
                continue
        if holders_cpu <= idle_pct:
            return STALLED
        result = BUSY
    return result


def engine_wedged_device(sample: Sample, tree_cpu: float, pid: int, busy_pct: float,
                          idle_pct: float) -> DeviceSample | None:
    """The engine ``pid``'s GPU when it shows the wedge (busy, its holders in the tree idle), else None.

    Its GPU is a device it or one of its descendants holds (an engine that runs its model in its
    own process: TRL's colocate engine in the trainer, the fake engine; a worker whose model runs
    in a child: vLLM V1's EngineCore), known from the sample's ``parents``. When no device names
    the engine or a descendant among its holders (a sample recorded before parents were kept,
    NVML that names no holders), any device of the tree may be its, but those held only by
    processes that are not its own (the trainer that beats, another engine), and every one of
    them must show the wedge. One of them alone took in
    another rank's trainer asleep in a collective (GPU busy, host idle) while this worker waited
    on a healthy long step of its EngineCore (a first-use JIT): an engine-level kill of a healthy
    worker at a quarter of the timeout."""
    devices = sample.gpu
    if not devices:
        return None
    cpu = sample.cpu_pct
    family = descendants(sample.parents, pid)
    others = {e.pid for e in sample.engine if e.pid != pid}
    if sample.heartbeat is not None and sample.heartbeat.pid != pid:
        others.add(sample.heartbeat.pid)
    own = False
    own_wedged: DeviceSample | None = None
    first: DeviceSample | None = None
    every = True
    candidates = 0
    for d in devices:
        pids = d.pids
        if pids:
            held = [p for p in pids if p in cpu]
            if not held:
                continue  # held only outside the tree: not the engine's
            holders_cpu = sum(cpu[p] for p in held)
        else:
            held = None  # unknown holders (NVML in a container): may be the engine's; the tree's CPU
            holders_cpu = tree_cpu
        wedged = d.util_pct >= busy_pct and holders_cpu <= idle_pct
        if held is not None and not family.isdisjoint(held):
            own = True
            if wedged and own_wedged is None:
                own_wedged = d
            continue
        if held is not None and all(p in others for p in held):
            continue
        candidates += 1
        if not wedged:
            every = False
        elif first is None:
            first = d
    if own:
        return own_wedged
    return first if candidates and every else None


def descendants(parents: Mapping[int, int], pid: int) -> set[int]:
    """``pid`` and every process of the tree under it (``parents``: pid -> parent pid)."""
    family = {pid}
    if not parents:
        return family
    children: dict[int, list[int]] = {}
    for child, parent in parents.items():
        children.setdefault(parent, []).append(child)
    stack = [pid]
    while stack:
        for child in children.get(stack.pop(), ()):
            if child not in family:  # a pid loop in a hand-made sample must not spin
                family.add(child)
                stack.append(child)
    return family


def scan_devices(sample: Sample, tree_cpu: float, busy_pct: float, idle_pct: float) -> DeviceScan:
    scan = DeviceScan()
    devices = sample.gpu
    if not devices:
        return scan
    cpu = sample.cpu_pct
    best_cpu: float | None = None
    for d in devices:
        util = d.util_pct
        if util < busy_pct:
            continue
        pids = d.pids
        if not pids:
            # Unknown holders (NVML in a container): may be the tree's; use the
            # whole tree's CPU, the conservative choice.
            holders_cpu = tree_cpu
        else:
            held = [cpu[p] for p in pids if p in cpu]
            if not held:
                continue  # busy, but held only outside the tree: not our stall
            holders_cpu = sum(held)
        scan.busy.append(d.index)
        if util > scan.max_util:
            scan.max_util = util
            scan.busy_cpu = holders_cpu
        if holders_cpu <= idle_pct:
            scan.stalled.append(d.index)
            if best_cpu is None or holders_cpu < best_cpu:
                best_cpu = holders_cpu
                scan.stalled_util = util
                scan.stalled_cpu = holders_cpu
    return scan
