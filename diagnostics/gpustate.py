"""GPU state at capture time: NVML in process when it loads, ``nvidia-smi -q``
through ``run_bounded`` when the binary exists, else a plain "no GPU"; and each
GPU's readings as replay and the report show them (``readings``).

NVML calls run in the capture's step thread; a wedged driver can block them,
which is why the capture orchestrator bounds every step.
"""

from __future__ import annotations

from typing import Any, Sequence

from hangwatch.contract.private import trusted_which
from hangwatch.contract.samples import Sample
from hangwatch.contract.tools import run_bounded


def gpu_state(nvidia_smi_timeout: float = 10.0) -> dict[str, Any]:
    state: dict[str, Any] = {"nvml": _nvml(), "nvidia_smi": None}
    skipped: list[str] = []
    smi = trusted_which("nvidia-smi", skipped)  # run as us (root): never one another user put on PATH
    if smi is None:
        # One passed over is named: "not on PATH" sent the reader to look for a missing driver.
        why = f"passed over: {'; '.join(skipped)}" if skipped else "nvidia-smi not on PATH"
        state["nvidia_smi"] = {"available": False, "reason": why}
    else:
        result = run_bounded([smi, "-q"], nvidia_smi_timeout)
        state["nvidia_smi"] = {
            "available": True,
            "ok": result.ok,
            "returncode": result.returncode,
            "error": result.error or (result.stderr.strip()[:500] if not result.ok else None),
            "output": result.stdout,
        }
    nvml_ok = state["nvml"].get("available")
    state["summary"] = (
        f"{len(state['nvml']['devices'])} GPU(s) via NVML" if nvml_ok
        else ("nvidia-smi only" if state["nvidia_smi"].get("ok") else "no GPU")
    )
    return state


def _nvml() -> dict[str, Any]:
    try:
        import pynvml  # noqa: PLC0415 - optional at runtime
    except ImportError as exc:
        return {"available": False, "reason": f"pynvml not importable: {exc}"}
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
        return {"available": False, "reason": f"NVML did not initialise: {exc}"}
    try:
        out: dict[str, Any] = {"available": True, "driver": _call(pynvml.nvmlSystemGetDriverVersion), "devices": []}
        for index in range(pynvml.nvmlDeviceGetCount()):
            out["devices"].append(_device(pynvml, index))
        return out
    except Exception as exc:
        return {"available": False, "reason": f"NVML query failed: {exc}"}
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass


def _device(pynvml: Any, index: int) -> dict[str, Any]:
    h = pynvml.nvmlDeviceGetHandleByIndex(index)
    util = _call(pynvml.nvmlDeviceGetUtilizationRates, h)
    mem = _call(pynvml.nvmlDeviceGetMemoryInfo, h)
    procs = _call(pynvml.nvmlDeviceGetComputeRunningProcesses, h)
    return {
        "index": index,
        "name": _call(pynvml.nvmlDeviceGetName, h),
        "uuid": _call(pynvml.nvmlDeviceGetUUID, h),
        "util_gpu_pct": getattr(util, "gpu", None),
        "util_mem_pct": getattr(util, "memory", None),
        "mem_used_mib": mem.used / 2**20 if mem else None,
        "mem_total_mib": mem.total / 2**20 if mem else None,
        # "100 % utilisation at idle power": a spinning wedge (the power in W; NVML says mW).
        "power_w": power / 1000.0 if (power := _call(pynvml.nvmlDeviceGetPowerUsage, h)) is not None else None,
        "sm_clock_mhz": _call(pynvml.nvmlDeviceGetClockInfo, h, getattr(pynvml, "NVML_CLOCK_SM", 1)),
        "processes": [
            {"pid": p.pid, "used_mib": (p.usedGpuMemory or 0) / 2**20 if p.usedGpuMemory is not None else None}
            for p in (procs or [])
        ],
    }


def _call(fn: Any, *args: Any) -> Any:
    try:
        value = fn(*args)
    except Exception:
        return None
    return value.decode() if isinstance(value, bytes) else value


def readings(state: Any, samples: Sequence[Sample]) -> list[dict[str, Any]]:
    """Each GPU's utilisation, memory, power draw and SM clock as an incident shows them: NVML's
    at capture (``gpu/state.json``) when it read them, else the last sample that had devices.
    A bundle without power or clock (an older one, a GPU without the counter) has them None."""
    nvml = state.get("nvml") if isinstance(state, dict) else None
    if isinstance(nvml, dict) and nvml.get("available") and isinstance(nvml.get("devices"), list):
        return [{"index": d.get("index"), "util_pct": d.get("util_gpu_pct"), "mem_used_mib": d.get("mem_used_mib"),
                 "power_w": d.get("power_w"), "sm_clock_mhz": d.get("sm_clock_mhz"), "source": "capture"}
                for d in nvml["devices"] if isinstance(d, dict)]
    last = next((s for s in reversed(samples) if s.gpu), None)
    if last is None:
        return []
    return [{"index": d.index, "util_pct": d.util_pct, "mem_used_mib": d.mem_used_mib, "power_w": d.power_w,
             "sm_clock_mhz": d.sm_clock_mhz, "source": "last sample"} for d in last.gpu or ()]


def describe_reading(r: dict[str, Any]) -> str:
    """``GPU 0: 100% util, 61 W, 1410 MHz SM`` (what was not read is left out)."""
    parts = [f"{_num(r.get('util_pct'))}% util" if r.get("util_pct") is not None else "util unknown"]
    if r.get("power_w") is not None:
        parts.append(f"{_num(r['power_w'])} W")
    if r.get("sm_clock_mhz") is not None:
        parts.append(f"{_num(r['sm_clock_mhz'])} MHz SM")
    return f"GPU {r.get('index')}: {', '.join(parts)}"


def _num(value: Any) -> str:
    try:
        return f"{float(value):.0f}"
    except (TypeError, ValueError):
        return "?"
