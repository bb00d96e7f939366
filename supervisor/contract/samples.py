"""What one sampling tick saw: plain frozen data, serialisable to JSON.

A ``Sample`` is the only input of the detector besides time, and it is what an
incident bundle stores as the window that triggered a verdict, so the detector
can be re-run on it later with other settings.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from hangwatch.contract.heartbeat import Heartbeat


@dataclass(frozen=True)
class DeviceSample:
    """One GPU as a probe saw it.

    ``pids`` lists the processes holding the device; ``None`` means the probe
    cannot tell (NVML in a container without the host PID namespace), which the
    detector treats as "may be the tree's".

    ``power_w`` (board power draw) and ``sm_clock_mhz`` (current SM clock) are for
    people reading an incident: "100 % utilisation at idle power" is how a spinning
    wedge looks. ``None`` where the probe cannot read them (older samples, a GPU or
    driver without the counter); the detector does not read them.
    """

    index: int
    util_pct: float
    mem_used_mib: float
    pids: tuple[int, ...] | None = None
    power_w: float | None = None
    sm_clock_mhz: float | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "index": self.index,
            "util_pct": self.util_pct,
            "mem_used_mib": self.mem_used_mib,
            "pids": list(self.pids) if self.pids is not None else None,
        }
        # Only when read: samples of probes without them stay as they were.
        if self.power_w is not None:
            out["power_w"] = self.power_w
        if self.sm_clock_mhz is not None:
            out["sm_clock_mhz"] = self.sm_clock_mhz
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "DeviceSample":
        pids = data.get("pids")
        return cls(
            index=int(data["index"]),
            util_pct=float(data["util_pct"]),
            mem_used_mib=float(data.get("mem_used_mib", 0.0)),
            pids=tuple(int(p) for p in pids) if pids is not None else None,
            power_w=optional_float(data.get("power_w")),
            sm_clock_mhz=optional_float(data.get("sm_clock_mhz")),
        )


def optional_float(value: Any) -> float | None:
    """An optional reading as a float; None when absent."""
    return None if value is None else float(value)


@dataclass(frozen=True)
class Sample:
    """One tick.

    ``t`` is monotonic seconds (the detector's clock); ``wall`` is for people.
    ``gpu`` is None when the probe returned nothing this tick (missing, not idle).
    ``cpu_pct`` maps every live process of the tree to its CPU use since the
    previous tick, in percent of one core.
    """

    t: float
    wall: float
    cpu_pct: Mapping[int, float]
    gpu: tuple[DeviceSample, ...] | None
    heartbeat: Heartbeat | None = None
    tree_size: int = field(default=0)
    # The rollout engines' beacons (``read_engine_beacons``), one per engine process:
    # engine steps while a request is in flight.
    engine: tuple[Heartbeat, ...] = ()
    # Each tree process's parent pid, kept while engines beat (else empty): which GPU holders
    # are an engine worker's own children (vLLM V1 runs its model in an EngineCore child).
    parents: Mapping[int, int] = field(default_factory=dict)
    # Every trainer process's own last beat (``read_rank_beacons``): the per-rank progress rule.
    beats: tuple[Heartbeat, ...] = ()

    def tree_pids(self) -> frozenset[int]:
        return frozenset(self.cpu_pct)

    def to_json(self) -> dict[str, Any]:
        return {
            "t": round(self.t, 4),
            "wall": round(self.wall, 4),
            "cpu_pct": {str(pid): round(pct, 2) for pid, pct in self.cpu_pct.items()},
            "gpu": [d.to_json() for d in self.gpu] if self.gpu is not None else None,
            "heartbeat": self.heartbeat.to_json() if self.heartbeat else None,
            "tree_size": self.tree_size,
            **({"engine": [e.to_json() for e in self.engine]} if self.engine else {}),
            **({"parents": {str(pid): ppid for pid, ppid in self.parents.items()}} if self.parents else {}),
            **({"beats": [b.to_json() for b in self.beats]} if self.beats else {}),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Sample":
        gpu = data.get("gpu")
        hb = data.get("heartbeat")
        return cls(
            t=float(data["t"]),
            wall=float(data.get("wall", data["t"])),
            cpu_pct={int(pid): float(pct) for pid, pct in (data.get("cpu_pct") or {}).items()},
            gpu=tuple(DeviceSample.from_json(d) for d in gpu) if gpu is not None else None,
            heartbeat=Heartbeat.from_json(hb) if hb else None,
            tree_size=int(data.get("tree_size", len(data.get("cpu_pct") or {}))),
            engine=tuple(Heartbeat.from_json(e) for e in (data.get("engine") or ())),
            parents={int(pid): int(ppid) for pid, ppid in (data.get("parents") or {}).items()},
            beats=tuple(Heartbeat.from_json(b) for b in (data.get("beats") or ())),
        )
