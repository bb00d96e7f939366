"""The supervisor's own cost.

    .venv/bin/python scripts/bench_supervisor.py [--seconds 60]

1. One sampling tick (tree scan + CPU of every process + GPU probe + heartbeat) for trees
   of 1, 16, 64 and 256 sleeping processes, in ms of CPU time per tick, measured in this
   process side by side; as a ratio to the 1-process tick.
2. A real `hangwatch run` supervising a 64-process tree at a 1 s interval for --seconds:
   the supervisor's CPU seconds per hour of supervision and its share of one core.
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

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hangwatch.supervisor.watch.probes import FileProbe  # noqa: E402
from hangwatch.supervisor.watch.proctree import ProcessTree  # noqa: E402
from hangwatch.supervisor.watch.sampler import Sampler  # noqa: E402

SLEEPER = "import time\nwhile True: time.sleep(60)"
TREE = """
import subprocess, sys, time
kids = [subprocess.Popen([sys.executable, '-c', 'import time\\nwhile True: time.sleep(60)']) for _ in range(int(sys.argv[1]))]
end = time.time() + float(sys.argv[2])
while time.time() < end:
    time.sleep(0.5)
for k in kids:
    k.kill()
"""


def tick_cost(n: int, ticks: int, tmp: Path) -> float:
    procs = [subprocess.Popen([sys.executable, "-c", SLEEPER]) for _ in range(n)]
    try:
        gpu = tmp / "gpu.json"
        gpu.write_text(json.dumps({"devices": [{"index": 0, "util_pct": 50, "mem_used_mib": 1000,
                                                 "pids": [p.pid for p in procs[:4]]}]}))
        sampler = Sampler(ProcessTree(), FileProbe(gpu), tmp / "hb.json")
        sampler.tick()
        me = psutil.Process()
        before = me.cpu_times()
        for _ in range(ticks):
            sample = sampler.tick()
        after = me.cpu_times()
        assert sample.tree_size == n, (sample.tree_size, n)
        return 1000.0 * ((after.user + after.system) - (before.user + before.system)) / ticks
    finally:
        for p in procs:
            p.kill()
            p.wait()


def supervision_cost(seconds: float, tmp: Path) -> tuple[float, float]:
    run_dir = tmp / "run"
    proc = subprocess.Popen(
        [sys.executable, "-m", "hangwatch.cli", "run", "--quiet", "--run-dir", str(run_dir),
         "--gpu-probe", f"file:{tmp / 'gpu.json'}", "--interval", "1",
         "--", sys.executable, "-c", TREE, "63", str(seconds)],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    sup = psutil.Process(proc.pid)
    time.sleep(3)  # let it start and the tree form; measure steady state only
    t0, c0 = time.monotonic(), sum(sup.cpu_times()[:2])
    time.sleep(max(1.0, seconds - 6))
    t1, c1 = time.monotonic(), sum(sup.cpu_times()[:2])
    proc.wait(timeout=seconds + 60)
    share = (c1 - c0) / (t1 - t0)
    return share * 3600.0, 100.0 * share


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--ticks", type=int, default=30)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        rows = [(n, tick_cost(n, args.ticks, Path(tmp))) for n in (1, 16, 64, 256)]
        base = rows[0][1]
        print("sampling tick cost (CPU time of the supervisor per tick)")
        print(f"{'processes':>10}{'ms/tick':>10}{'ratio to 1':>12}{'% core @1s':>12}")
        for n, ms in rows:
            print(f"{n:>10}{ms:>10.2f}{ms / base:>12.1f}{ms / 10:>12.2f}")
        cpu_s_per_hour, pct = supervision_cost(args.seconds, Path(tmp))
        print(f"\nhangwatch run, 64-process tree, 1 s interval, {args.seconds:.0f} s: "
              f"{cpu_s_per_hour:.1f} CPU s per hour of supervision = {pct:.2f} % of one core")
    return 0


if __name__ == "__main__":
    sys.exit(main())
