"""The writer side of the simulated GPU that ``--gpu-probe file:PATH`` reads.

On a CPU-only machine the toy trainer and the fake engine stand in for CUDA
work by declaring, per process, "I hold device 0 at U % with M MiB". The file
keeps those per-process holdings under ``holders`` and the derived view the
probe reads under ``devices`` (the documented probe format)::

    {"devices": [{"index": 0, "util_pct": 100, "mem_used_mib": 40000, "pids": [4242]}],
     "holders": {"4242": {"index": 0, "util_pct": 100, "mem_used_mib": 40000}}}

A holder may add ``power_w`` and ``sm_clock_mhz`` (NVML's power draw and SM clock).

Several processes update it; a lock file serialises the read-modify-write and
the new content is renamed into place, so the probe never reads half a file.
The supervisor exports the path to the trainer as ``HANGWATCH_SIM_GPU``.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import stat
import tempfile
from typing import Any

from hangwatch.contract.capped import read_capped
from hangwatch.contract.env import SIM_GPU as SIM_GPU_ENV


def hold(util_pct: float, mem_used_mib: float = 1024.0, *, index: int = 0, path: str | None = None, pid: int | None = None,
         power_w: float | None = None, sm_clock_mhz: float | None = None) -> bool:
    """Declare that this process holds ``index`` at ``util_pct`` (and, when given, at ``power_w``
    board power and ``sm_clock_mhz``, as NVML reports them). No-op without a path."""
    holding: dict[str, Any] = {"index": index, "util_pct": float(util_pct), "mem_used_mib": float(mem_used_mib)}
    if power_w is not None:
        holding["power_w"] = float(power_w)
    if sm_clock_mhz is not None:
        holding["sm_clock_mhz"] = float(sm_clock_mhz)
    return _update(path, pid or os.getpid(), holding)


def release(*, path: str | None = None, pid: int | None = None) -> bool:
    """This process no longer holds any device."""
    return _update(path, pid or os.getpid(), None)


def _update(path: str | None, pid: int, holding: dict[str, Any] | None) -> bool:
    """The read-modify-write, never through a link another user planted: the file often sits in
    a shared directory (``--gpu-probe file:/tmp/gpu.json``), and a root trainer followed their
    ``gpu.json.lock`` link (creating any file they named) and their ``gpu.json.<pid>.tmp`` links
    (overwriting a root-only file with this JSON; reproduced with a second user). The lock must
    be ours; the new content goes to a fresh file of a random name, renamed into place."""
    target = path or os.environ.get(SIM_GPU_ENV)
    if not target:
        return False
    try:
        lock = os.open(f"{target}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o600)
    except OSError:
        return False
    try:
        st = os.fstat(lock)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
            return False  # another user's lock (they could hold it for ever): not ours to wait on
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            holders = dict(json.loads(read_capped(target, 1 << 20, follow_symlinks=False)).get("holders") or {})
        except (OSError, ValueError, AttributeError, TypeError, RecursionError):
            holders = {}
        if holding is None:
            holders.pop(str(pid), None)
        else:
            holders[str(pid)] = holding
        # Not ``atomic.write_file``: it fsyncs, and this is rewritten at every state change of a
        # simulated engine, in the trainer's step path; a lost write of a simulation costs nothing.
        directory, name = os.path.split(os.path.abspath(target))
        fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=directory)
        try:
            os.fchmod(fd, 0o644)  # what the probe reads: no secret in it
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                json.dump({"devices": _devices(holders), "holders": holders}, handle)
            os.replace(tmp, target)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
    except (OSError, ValueError):
        return False
    finally:
        os.close(lock)
    return True


def _devices(holders: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    devices: dict[int, dict[str, Any]] = {}
    for pid, h in holders.items():
        d = devices.setdefault(int(h["index"]), {"index": int(h["index"]), "util_pct": 0.0, "mem_used_mib": 0.0, "pids": []})
        d["util_pct"] = max(d["util_pct"], float(h["util_pct"]))
        d["mem_used_mib"] += float(h["mem_used_mib"])
        d["pids"].append(int(pid))
        for key in ("power_w", "sm_clock_mhz"):  # one board's reading: the highest declared
            if h.get(key) is not None:
                d[key] = max(float(h[key]), d.get(key, float(h[key])))
    return [devices[i] for i in sorted(devices)]
