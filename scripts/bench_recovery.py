"""Recovery timeline of the demo's wedge, from the journal of real runs.

    .venv/bin/python scripts/bench_recovery.py [--runs 3]

For each run of scripts/demo.py: detection latency (onset as the detector saw it to
verdict) as a ratio of the configured window, then verdict -> capture done -> all dead ->
GPU released -> relaunched -> first heartbeat, in seconds. Backoff is reported apart, as it
is a setting, not a cost.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def timeline(run_dir: Path, window: float) -> dict[str, float]:
    records = [json.loads(x) for x in (run_dir / "journal.jsonl").read_text().splitlines() if x.strip()]

    def first(event: str, **match: object) -> dict:
        return next(r for r in records if r["event"] == event and all(r.get(k) == v for k, v in match.items()))

    incident = first("incident")
    capture = first("capture", attempt=incident["attempt"])
    kill = next(r for r in records if r["event"] == "kill" and r["attempt"] == incident["attempt"])
    released = next((r for r in records if r["event"] == "gpu_released" and r["attempt"] == incident["attempt"]), None)
    scheduled = first("restart_scheduled", after_attempt=incident["attempt"])
    relaunched = first("attempt_started", attempt=incident["attempt"] + 1)
    beat = first("first_heartbeat", attempt=incident["attempt"] + 1)
    launch = relaunched["ts"] - scheduled["ts"] - scheduled["delay_s"]
    return {
        "latency_over_window": incident["latency_s"] / window,
        "capture_s": capture["duration_s"],
        "kill_s": kill["duration_s"],
        "gpu_release_s": released["waited_s"] if released else 0.0,
        "launch_s": launch,
        "first_heartbeat_s": beat["after_launch_s"],
        "verdict_to_relaunch_s": relaunched["ts"] - incident["ts"] - scheduled["delay_s"],
        "backoff_s": scheduled["delay_s"],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--stall-window", type=float, default=8.0)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="hw-bench-") as tmp:
        for i in range(args.runs):
            run_dir = Path(tmp) / f"run{i}"
            code = subprocess.call(
                [sys.executable, str(ROOT / "scripts" / "demo.py"), "--quiet", "--run-dir", str(run_dir),
                 "--stall-window", str(args.stall_window), "--recovery", "job"],  # the job-restart timeline
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )
            if code != 0:
                print(f"run {i}: demo failed (exit {code}); see {run_dir}", file=sys.stderr)
                return 1
            rows.append(timeline(run_dir, args.stall_window))
    keys = list(rows[0])
    print(f"recovery timeline over {len(rows)} demo run(s), stall window {args.stall_window:g} s")
    print(f"{'measure':<24}{'median':>10}{'worst':>10}")
    for k in keys:
        values = [r[k] for r in rows]
        print(f"{k:<24}{statistics.median(values):>10.3f}{max(values):>10.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
