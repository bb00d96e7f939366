#!/usr/bin/env python3
"""Multi-node recovery time against single-node, measured side by side in one run.

For 1 (no cohort), 2 and 4 "nodes" on this machine, each node a `hangwatch run
[--cohort]` over `torchrun --rdzv-backend c10d` with one CPU rank on gloo: the rank of
the last node wedges at step 5 (simulated GPU at 100 %, host idle). From the journals:

* onset -> last kill: the wedge's onset (the detecting node's incident) to the moment the
  last node's kill finished;
* onset -> last relaunch: to the last node's second `attempt_started`.

Prints a table, then `nodes=N kill_ratio=X relaunch_ratio=Y` per cohort size (ratios to
the single-node figures of the same run).

    .venv/bin/python scripts/bench_cohort.py [--nodes 2 4] [--runs 1]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRAINER = ROOT / "tests" / "fixtures" / "cohort_trainer.py"
HANGWATCH = str(Path(sys.executable).parent / "hangwatch")


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_job(nnodes: int, work: Path) -> dict[str, float]:
    ckpt = work / "ckpt"
    store, rdzv = _port(), _port()
    procs = []
    for i in range(nnodes):
        cohort = ["--cohort", f"127.0.0.1:{store}", "--node-rank", str(i), "--nnodes", str(nnodes)] if nnodes > 1 else []
        argv = [HANGWATCH, "run", "--quiet", "--run-dir", str(work / f"run{i}"), "--gpu-probe",
                f"file:{work / f'sim{i}.json'}", "--interval", "0.5", "--stall-window", "4", "--progress-timeout", "120",
                "--grace", "2", "--backoff", "0.1", "--capture-timeout", "15", "--checkpoint-dir", str(ckpt), *cohort,
                "--", sys.executable, "-m", "torch.distributed.run", "--nnodes", str(nnodes), "--nproc-per-node", "1",
                "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{rdzv}", "--rdzv-id", "bench", str(TRAINER),
                "--ckpt", str(ckpt), "--steps", "8", "--wedge-node", str(nnodes - 1), "--wedge-step", "5"]
        procs.append(subprocess.Popen(argv, env=dict(os.environ, TEST_NODE=str(i)), stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL))
    codes = [p.wait(timeout=600) for p in procs]
    if any(codes):
        raise SystemExit(f"{nnodes} node(s): exit codes {codes}; see {work}")
    journals = [[json.loads(line) for line in (work / f"run{i}" / "journal.jsonl").read_text().splitlines()]
                for i in range(nnodes)]
    onset = min(r["onset_wall"] for j in journals for r in j if r["event"] == "incident" and "node " not in r["reason"])
    last_kill = max(next(r["ts"] for r in j if r["event"] == "kill") for j in journals)
    last_relaunch = max([r["ts"] for r in j if r["event"] == "attempt_started"][1] for j in journals)
    return {"kill": last_kill - onset, "relaunch": last_relaunch - onset}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--runs", type=int, default=1)
    args = parser.parse_args()
    results: dict[int, dict[str, float]] = {}
    for n in [1, *args.nodes]:
        figures = []
        for _ in range(args.runs):
            work = Path(tempfile.mkdtemp(prefix=f"bench-cohort-{n}-"))
            try:
                figures.append(run_job(n, work))
            finally:
                shutil.rmtree(work, ignore_errors=True)
        results[n] = {k: statistics.median(f[k] for f in figures) for k in ("kill", "relaunch")}
    print(f"{'nodes':>5}  {'onset->last kill (s)':>20}  {'onset->last relaunch (s)':>24}")
    for n, r in results.items():
        print(f"{n:>5}  {r['kill']:>20.2f}  {r['relaunch']:>24.2f}")
    for n in args.nodes:
        print(f"nodes={n} kill_ratio={results[n]['kill'] / results[1]['kill']:.2f} "
              f"relaunch_ratio={results[n]['relaunch'] / results[1]['relaunch']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
