"""What the live status file and the metrics exporter add to a supervisor tick.

    .venv/bin/python scripts/bench_observers.py [--ticks 20000]

Feeds the same synthetic samples (8 GPUs, 64 processes, a heartbeat) to the
detector alone, and to the detector plus the observers the CLI installs for an
unattended run (LiveStatus writing status.json at most every 0.5 s, the
Prometheus exporter); reports CPU microseconds per tick and the ratio. Ticks
are 1 s apart on a fake clock, so the status file is rewritten every other tick
as in a real run at the default interval.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hangwatch.contract.heartbeat import Heartbeat  # noqa: E402
from hangwatch.contract.samples import DeviceSample, Sample  # noqa: E402
from hangwatch.supervisor.decide.attempt import AttemptState  # noqa: E402
from hangwatch.supervisor.decide.detector import Detector, DetectorConfig  # noqa: E402
from hangwatch.supervisor.operate.livestatus import LiveStatus  # noqa: E402
from hangwatch.supervisor.operate.metrics import MetricsExporter  # noqa: E402
from hangwatch.supervisor.operate.observe import Observers, Tick  # noqa: E402


def samples(n: int) -> list[Sample]:
    out = []
    for i in range(n):
        hb = Heartbeat(pid=1, seq=i, ts=1e9 + i, step=i, phase="train")
        gpus = tuple(DeviceSample(g, 95.0, 70_000.0, (100 + g,)) for g in range(8))
        out.append(Sample(t=float(i), wall=1e9 + i, cpu_pct={100 + p: 80.0 for p in range(64)}, gpu=gpus,
                          heartbeat=hb, tree_size=64))
    return out


def run(ticks: list[Sample], observe: bool, workdir: Path) -> float:
    clock = {"t": 0.0}
    cfg = DetectorConfig()
    detector = Detector(cfg, start=0.0)
    observers = None
    if observe:
        status = LiveStatus(workdir / "status.json", detector=cfg, gpu_probe="nvml", clock=lambda: clock["t"],
                            warn=lambda e, m: None)
        observers = Observers([status, MetricsExporter(status, clock=lambda: clock["t"])])
        observers.phase(1, AttemptState.WATCHING)
    start = time.process_time()
    for s in ticks:
        clock["t"] = s.t
        detector.observe(s)
        if observers is not None:
            observers.tick(Tick(1, s, detector.stall_onset, cfg.window_for(detector.phase)))
    return (time.process_time() - start) / len(ticks) * 1e6


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--ticks", type=int, default=20000)
    a = p.parse_args()
    ticks = samples(a.ticks)
    with tempfile.TemporaryDirectory() as tmp:
        base = min(run(ticks, False, Path(tmp)) for _ in range(3))
        full = min(run(ticks, True, Path(tmp)) for _ in range(3))
    print(f"detector alone:            {base:8.1f} us CPU per tick")
    print(f"detector + status/metrics: {full:8.1f} us CPU per tick (ratio {full / base:.1f}x; "
          f"+{full - base:.0f} us per tick = {(full - base) * 3600 / 1e6:.2f} CPU s per hour at 1 s ticks)")


if __name__ == "__main__":
    main()
