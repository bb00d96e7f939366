"""Detection latency over real injected wedges.

    .venv/bin/python scripts/bench_detection.py [--wedges 20] [--stall-window 3] [--interval 0.25]

Each run: `hangwatch run` supervises a small trainer (tests/fixtures/fake_trainer.py) that
beats 40 steps (2 s, so the wedge does not fall into its start-up), then wedges (simulated
GPU 100 %, CPU idle, no beats). The true onset is the trainer's last heartbeat (it wedges
right after writing it); the verdict time is the journal's `incident` record. Prints
median and worst latency as a ratio of the window.
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


def one(tmp: Path, window: float, interval: float) -> float:
    run_dir = tmp / "run"
    subprocess.run(
        [sys.executable, "-m", "hangwatch.cli", "run", "--quiet", "--run-dir", str(run_dir),
         "--gpu-probe", f"file:{tmp / 'gpu.json'}", "--interval", str(interval), "--stall-window", str(window),
         "--grace", "0.5", "--max-restarts", "0", "--capture-timeout", "5",
         "--", sys.executable, str(ROOT / "tests" / "fixtures" / "fake_trainer.py"), "--beats", "40", "--wedge"],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120, env=_env(),
    )
    records = [json.loads(x) for x in (run_dir / "journal.jsonl").read_text().splitlines()]
    incident = next(r for r in records if r["event"] == "incident")
    last_beat = json.loads((run_dir / "attempts" / "attempt-001" / "heartbeat.json").read_text())["ts"]
    # The incident record is written right after the verdict: its ts is the verdict's wall time.
    return incident["ts"] - last_beat


def _env() -> dict[str, str]:
    import os  # noqa: PLC0415

    # py-spy capture is not what this measures; a missing py-spy keeps runs short.
    return dict(os.environ, PYTHONPATH=str(ROOT), HANGWATCH_PYSPY="/nonexistent/py-spy")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--wedges", type=int, default=20)
    parser.add_argument("--stall-window", type=float, default=3.0)
    parser.add_argument("--interval", type=float, default=0.25)
    args = parser.parse_args()
    latencies = []
    for i in range(args.wedges):
        with tempfile.TemporaryDirectory() as tmp:
            latencies.append(one(Path(tmp), args.stall_window, args.interval))
    ratios = [x / args.stall_window for x in latencies]
    print(f"{args.wedges} injected wedges, window {args.stall_window:g} s, interval {args.interval:g} s")
    print(f"{'':<8}{'latency s':>12}{'/ window':>10}{'(latency - window) / interval':>32}")
    for name, fn in (("median", statistics.median), ("worst", max), ("best", min)):
        v = fn(latencies)
        print(f"{name:<8}{v:>12.3f}{v / args.stall_window:>10.3f}{(v - args.stall_window) / args.interval:>32.2f}")
    print(f"median_latency_over_window={statistics.median(ratios):.3f} worst_latency_over_window={max(ratios):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
