#!/usr/bin/env python3
"""Capture time against tree size: hung Python trees of 1, 8 and 32 processes.

Usage: .venv/bin/python scripts/bench_capture.py [--sizes 1,8,32] [--rounds 2] [--interval 2] [--native] [--workers 16]

Each tree is the test fixture trainer (hung in vllm/compilation/cuda_graph.py
replay) with N-1 hung children. Prints, per size: py-spy time of each round
(wall time of the concurrent round), the slowest single py-spy call, and the
whole capture (including the round interval and writing the bundle).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "diagnostics"))

import psutil  # noqa: E402

from diag_helpers import HUNG_TRAINER, _all_in_replay, _tree_process, make_request, HungTree  # noqa: E402
from hangwatch.diagnostics.capture import CaptureConfig, capture_incident  # noqa: E402


def start_tree(n: int, tmp: Path) -> tuple[subprocess.Popen, HungTree]:
    ready = tmp / f"ready-{n}"
    log = tmp / f"trainer-{n}.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, str(HUNG_TRAINER), str(n - 1), str(ready)], stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 60
    while not ready.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    pids = [proc.pid, *(int(p) for p in ready.read_text().split())]
    while not _all_in_replay(pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return proc, HungTree(proc, [_tree_process(psutil.Process(p)) for p in pids], log)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1,8,32")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--interval", type=float, default=2.0)
    ap.add_argument("--native", action="store_true")
    ap.add_argument("--deadline", type=float, default=30.0)
    ap.add_argument("--workers", type=int, default=16, help="concurrent py-spy calls per round (1 = sequential)")
    args = ap.parse_args()
    config = CaptureConfig(rounds=args.rounds, round_interval=args.interval, native=args.native, max_workers=args.workers)
    print(f"cpus={os.cpu_count()} rounds={args.rounds} interval={args.interval}s native={args.native} workers={args.workers} deadline={args.deadline}s")
    header = f"{'procs':>5}  " + "  ".join(f"{'round' + str(r) + '_s':>9}" for r in range(1, args.rounds + 1)) + f"  {'max_call_s':>10}  {'total_s':>8}  {'ok':>7}  signature"
    print(header)
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        for n in (int(s) for s in args.sizes.split(",")):
            proc, tree = start_tree(n, tmp)
            try:
                request = make_request(tmp / f"run-{n}", tree, deadline_s=args.deadline)
                t = time.monotonic()
                path = capture_incident(request, config=config)
                total = time.monotonic() - t
                m = json.loads((path / "manifest.json").read_text())
                rounds = m["stacks"]["rounds"]
                calls = [d["duration_s"] for r in rounds for d in r["dumps"]]
                ok = f"{sum(r['ok'] for r in rounds)}/{sum(r['processes'] for r in rounds)}"
                cells = "  ".join(f"{r['duration_s']:>9.3f}" for r in rounds)
                sig = (m.get("classification") or {}).get("signature_id")
                print(f"{n:>5}  {cells}  {max(calls, default=0):>10.3f}  {total:>8.3f}  {ok:>7}  {sig}")
            finally:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                for tp in tree.tree[1:]:
                    try:
                        os.kill(tp.pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
