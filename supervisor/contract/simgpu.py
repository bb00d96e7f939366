"""The writer side of the simulated GPU that ``--gpu-probe file:PATH`` reads.

On a CPU-only machine the toy trainer and the fake engine stand in for CUDA
work by declaring, per process, "I hold device 0 at U % with M MiB". The file
keeps those per-process holdings under ``holders`` and the derived view the
probe reads under ``devices`` (the documented probe format)::

    {"devices": [{"index": 0, "util_pct": 100, "mem_used_mib": 40000, "pids": [4242]}],
     "holders": {"4242": {"index": 0, "util_pct": 100, "mem_used_mib": 40000}}}

Several processes update it; a lock file serialises the read-modify-write and
the new content is renamed into place, so the probe never reads half a file.
The supervisor exports the path to the trainer as ``HANGWATCH_SIM_GPU``.
"""

from __future__ import annotations

import fcntl
import json
import os
from typing import Any

from hangwatch.contract.env import SIM_GPU as SIM_GPU_ENV


def hold(util_pct: float, mem_used_mib: float = 1024.0, *, index: int = 0, path: str | None = None, pid: int | None = None) -> bool:
    """Declare that this process holds ``index`` at ``util_pct``. No-op without a path."""
    return _update(path, pid or os.getpid(), {"index": index, "util_pct": float(util_pct), "mem_used_mib": float(mem_used_mib)})


def release(*, path: str | None = None, pid: int | None = None) -> bool:
    """This process no longer holds any device."""
    return _update(path, pid or os.getpid(), None)


def _update(path: str | None, pid: int, holding: dict[str, Any] | None) -> bool:
    target = path or os.environ.get(SIM_GPU_ENV)
    if not target:
        return False
    try:
        with open(f"{target}.lock", "a+") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                with open(target, encoding="utf-8") as handle:
                    holders = dict(json.load(handle).get("holders") or {})
            except (OSError, ValueError, AttributeError):
                holders = {}
            if holding is None:
                holders.pop(str(pid), None)
            else:
                holders[str(pid)] = holding
            tmp = f"{target}.{pid}.tmp"
            with open(tmp, "w", encoding="utf-8") as handle:
                json.dump({"devices": _devices(holders), "holders": holders}, handle)
            os.replace(tmp, target)
    except OSError:
        return False
    return True


def _devices(holders: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    devices: dict[int, dict[str, Any]] = {}
    for pid, h in holders.items():
        d = devices.setdefault(int(h["index"]), {"index": int(h["index"]), "util_pct": 0.0, "mem_used_mib": 0.0, "pids": []})
        d["util_pct"] = max(d["util_pct"], float(h["util_pct"]))
        d["mem_used_mib"] += float(h["mem_used_mib"])
        d["pids"].append(int(pid))
    return [devices[i] for i in sorted(devices)]
