#!/usr/bin/env python3
"""Multi-node recovery time against single-node, measured side by side in one run.

For 1 (no cohort), 2 and 4 "nodes" on this machine, each node a `hangwatch run
[--cohort]` over `torchrun --rdzv-backend c10d` with one CPU rank on gloo: the rank of
the last node wedges at step 5 (simulated GPU at 100 %, host idle). From the journals:

* onset -> last kill: the wedge's onset (the detecting node's incident) to the moment the
  last node's kill finished;
* onset -> last relaunch: to the last node's second `attempt_started`.

Then where each node's time went, in seconds (medians over the runs), from the journals
and the incident bundles:

* detect: onset -> the verdict (the node whose rank wedged; "-" for the others);
* early: onset -> the node's early py-spy round (negative: before the onset, impossible;
  "-": none was taken);
* learn: the announcement -> the moment the node acted on it (the others; "-" for the
  announcer);
* capture: the capture at the verdict (the final round and the bundle);
* barrier: the capture's end -> the kill's start (waiting for the other nodes' captures);
* kill: the kill;
* agree: the kill's end -> the cohort's agreement (the GPU release wait included);
* relaunch: the agreement (or, alone, the kill) -> the second attempt's start;
* total: onset -> the second attempt's start.

Prints the totals table, the phase table per cohort size, then `nodes=N kill_ratio=X
relaunch_ratio=Y` per cohort size (ratios to the single-node figures of the same run).
Every run checks that each node wrote its full bundle (two py-spy rounds, stacks of every
process); one that did not is reported with `bundle_incomplete=`.

    .venv/bin/python scripts/bench_cohort.py [--nodes 2 4] [--runs 1] [--keep DIR]
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
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TRAINER = ROOT / "tests" / "fixtures" / "cohort_trainer.py"
HANGWATCH = str(Path(sys.executable).parent / "hangwatch")
PHASES = ("detect", "early", "learn", "capture", "barrier", "kill", "agree", "relaunch", "total")


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_job(nnodes: int, work: Path) -> tuple[dict[str, float], list[dict[str, float | None]], list[str]]:
    """One job: the totals, each node's phases, and what is missing from the bundles."""
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
    phases = [node_phases(j, onset) for j in journals]
    missing = [f"node {i}: {m}" for i, j in enumerate(journals) for m in bundle_missing(j)]
    return {"kill": last_kill - onset, "relaunch": last_relaunch - onset}, phases, missing


def _first(journal: list[dict[str, Any]], event: str) -> dict[str, Any] | None:
    return next((r for r in journal if r["event"] == event), None)


def _manifest(journal: list[dict[str, Any]]) -> dict[str, Any] | None:
    capture = _first(journal, "capture")
    path = capture and capture.get("evidence_path")
    if not path or not (Path(path) / "manifest.json").is_file():
        return None
    return json.loads((Path(path) / "manifest.json").read_text())


def node_phases(journal: list[dict[str, Any]], onset: float) -> dict[str, float | None]:
    """Where one node's time went in the first attempt's incident (seconds; None: not this node's)."""
    incident, capture, kill = _first(journal, "incident"), _first(journal, "capture"), _first(journal, "kill")
    cohort, agreed = _first(journal, "cohort_incident"), _first(journal, "cohort_agreed")
    relaunch = [r["ts"] for r in journal if r["event"] == "attempt_started"][1]
    assert incident is not None and capture is not None and kill is not None
    acted = incident["onset_wall"] + incident["latency_s"]  # the wall time of this node's verdict
    announced = cohort.get("announced_wall") if cohort is not None else None
    first = cohort is None or cohort["this_node_first"]
    capture_start = capture["ts"] - capture["duration_s"]
    kill_start = kill["ts"] - kill["duration_s"]
    early = None
    manifest = _manifest(journal)
    rounds = (manifest or {}).get("stacks", {}).get("rounds", [])
    if rounds and rounds[0].get("early"):
        early = datetime.fromisoformat(rounds[0]["taken_at"].replace("Z", "+00:00")).timestamp() - onset
    return {
        "detect": acted - onset if first else None,
        "early": early,
        "learn": acted - announced if not first and announced is not None else None,
        "capture": capture["duration_s"],
        "barrier": kill_start - capture["ts"],
        "kill": kill["duration_s"],
        "agree": agreed["ts"] - kill["ts"] if agreed is not None else None,
        "relaunch": relaunch - (agreed["ts"] if agreed is not None else kill["ts"]),
        "total": relaunch - onset,
    }


def bundle_missing(journal: list[dict[str, Any]]) -> list[str]:
    """What the first incident's bundle lacks of the full evidence: two py-spy rounds (the early one
    and the final one; a node that took no early round takes both at the verdict), stacks of every
    process in the tree. Whether the early round was taken ahead shows in the phase table."""
    manifest = _manifest(journal)
    if manifest is None:
        return ["no bundle"]
    rounds = manifest["stacks"]["rounds"]
    missing = []
    if len(rounds) < 2:
        missing.append(f"{len(rounds)} py-spy round(s), not 2 (an early and a final one, or both at the verdict)")
    for method in manifest["stacks"]["methods"]:
        if method.get("method") == "none" or len(method.get("rounds") or []) < len(rounds):
            missing.append(f"pid {method.get('pid')}: stacks in rounds {method.get('rounds')} of {len(rounds)}")
    return missing


def _cell(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def print_phases(n: int, runs: list[list[dict[str, float | None]]]) -> None:
    print(f"\n{n} node(s): seconds per phase, median of {len(runs)} run(s)")
    print(f"{'node':>4}  " + "  ".join(f"{p:>8}" for p in PHASES))
    for node in range(n):
        cells = []
        for phase in PHASES:
            values = [r[node][phase] for r in runs if r[node][phase] is not None]
            cells.append(_cell(statistics.median(values) if values else None))
        print(f"{node:>4}  " + "  ".join(f"{c:>8}" for c in cells))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--keep", type=Path, default=None, metavar="DIR",
                        help="keep every run's run directories (journals, bundles) under DIR")
    args = parser.parse_args()
    if args.runs < 1 or any(n < 2 for n in args.nodes):
        parser.error("--runs must be >= 1 and every --nodes value >= 2")
    results: dict[int, dict[str, float]] = {}
    phases: dict[int, list[list[dict[str, float | None]]]] = {}
    incomplete: list[str] = []
    for n in [1, *args.nodes]:
        figures = []
        phases[n] = []
        for run in range(args.runs):
            if args.keep is not None:
                work = args.keep / f"nodes{n}-run{run + 1}"
                shutil.rmtree(work, ignore_errors=True)
                work.mkdir(parents=True)
            else:
                work = Path(tempfile.mkdtemp(prefix=f"bench-cohort-{n}-"))
            try:
                totals, per_node, missing = run_job(n, work)
            finally:
                if args.keep is None:
                    shutil.rmtree(work, ignore_errors=True)
            figures.append(totals)
            phases[n].append(per_node)
            incomplete += [f"nodes={n} run={run + 1} {m}" for m in missing]
        results[n] = {k: statistics.median(f[k] for f in figures) for k in ("kill", "relaunch")}
    print(f"{'nodes':>5}  {'onset->last kill (s)':>20}  {'onset->last relaunch (s)':>24}")
    for n, r in results.items():
        print(f"{n:>5}  {r['kill']:>20.2f}  {r['relaunch']:>24.2f}")
    for n in results:
        print_phases(n, phases[n])
    print()
    for m in incomplete:
        print(f"bundle_incomplete={m}")
    for n in args.nodes:
        print(f"nodes={n} kill_ratio={results[n]['kill'] / results[1]['kill']:.2f} "
              f"relaunch_ratio={results[n]['relaunch'] / results[1]['relaunch']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
