"""A real GPU wedge under hangwatch with the real NVML probe (needs an NVIDIA GPU).

    .venv/bin/python scripts/gpu_wedge_check.py [--out result.json] [--stall-window 20]

Runs ``hangwatch run --gpu-probe nvml`` over this same script in trainer mode: it
allocates GPU memory, trains a few real steps with heartbeats, then launches a kernel
that spins for hours (``torch.cuda._sleep``) and waits for it in a blocking
``torch.cuda.synchronize()``: GPU busy, host thread asleep, no beats, the wedge's
signature. Records what NVML and the CPU showed, how fast the verdict came, whether the
kill confirmed everything dead, and whether NVML saw the memory released.

Not run in CI; it needs torch with CUDA and a driver. The result goes to --out (JSON).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def trainer(steps: int) -> None:
    import torch  # noqa: PLC0415

    from hangwatch.contract.heartbeat import beat  # noqa: PLC0415

    x = torch.randn(8192, 8192, device="cuda")
    hold = torch.empty(4 * 1024**3 // 4, device="cuda")  # 4 GiB that must be released
    for step in range(1, steps + 1):
        (x @ x).sum().item()
        beat(step=step, phase="train")
    print(f"wedging after step {steps}: memory {hold.numel() * 4 / 2**30:.1f} GiB", flush=True)
    torch.cuda._sleep(1 << 62)  # a kernel that never finishes in practice
    torch.cuda.synchronize()  # the host thread blocks here, CPU idle


def driver(args: argparse.Namespace) -> int:
    import pynvml  # noqa: PLC0415

    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    before = pynvml.nvmlDeviceGetMemoryInfo(handle).used / 2**20
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        started = time.monotonic()
        code = subprocess.call(
            [sys.executable, "-m", "hangwatch.cli", "run", "--run-dir", str(run_dir), "--gpu-probe", "nvml",
             "--interval", "1", "--stall-window", str(args.stall_window), "--max-restarts", "0",
             "--grace", "10", "--gpu-release-timeout", "60",
             "--", sys.executable, str(Path(__file__).resolve()), "--trainer", "--steps", "20"],
            cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)),
        )
        wall = time.monotonic() - started
        records = [json.loads(x) for x in (run_dir / "journal.jsonl").read_text().splitlines()]
        after = pynvml.nvmlDeviceGetMemoryInfo(handle).used / 2**20

        def first(event: str) -> dict | None:
            return next((r for r in records if r["event"] == event), None)

        samples_file = next(run_dir.glob("incidents/*/samples.jsonl"), None)
        last_samples = samples_file.read_text().splitlines()[-3:] if samples_file else []
        result = {
            "exit_code": code,
            "wall_s": round(wall, 1),
            "incident": first("incident"),
            "capture": first("capture"),
            "kill": first("kill"),
            "gpu_released": first("gpu_released"),
            "nvml_mem_used_mib_before": before,
            "nvml_mem_used_mib_after": after,
            "last_samples": [json.loads(s) for s in last_samples],
        }
    text = json.dumps(result, indent=2, default=str)
    if args.out:
        Path(args.out).write_text(text)
    print(text)
    incident = result["incident"] or {}
    ok = incident.get("kind") == "stall" and (result["kill"] or {}).get("confirmed") and \
        (result["gpu_released"] or {}).get("released")
    print("GPU WEDGE CHECK:", "PASS" if ok else "FAIL")
    return 0 if ok else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trainer", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--steps", type=int, default=20, help=argparse.SUPPRESS)
    parser.add_argument("--stall-window", type=float, default=20.0)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    if args.trainer:
        trainer(args.steps)
        return 0
    return driver(args)


if __name__ == "__main__":
    sys.exit(main())
