#!/usr/bin/env python3
"""What keeping the batch in flight costs per generate call (docs/diagnostics.md, "The kept batch").

Two measurements:

* the record alone, in this process: build the record, write ``inflight-<pid>.json``
  atomically and remove it, for batches of several sizes;
* a generate call end to end on the fake engine in a real worker process, with the record
  kept (``inflight_dir`` set) and without, alternating, so machine noise hits both alike.

    .venv/bin/python scripts/bench_batch_record.py [--dir DIR] [--calls 200]

``--dir`` is where the records go (default: a temporary directory; put it on the attempt
dir's filesystem to measure that disk's fsync).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hangwatch.contract.batch import InflightFile, make_record  # noqa: E402


def record_cost(directory: str, prompts: int, prompt_chars: int, repeats: int) -> float:
    """Median seconds to build, write and remove one record."""
    inflight = InflightFile(directory)
    batch = ["x" * prompt_chars for _ in range(prompts)]
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        inflight.write(make_record(engine="fake", engine_kwargs={"seed": 0}, prompts=batch, n=8, seed=1,
                                   sampling={"max_tokens": 256}, source="bench"))
        inflight.clear()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def generate_cost(directory: str, calls: int) -> tuple[float, float]:
    """Median seconds of one generate request, without and with the record kept."""
    from hangwatch.generator.engines.toy_model import ToyConfig
    from hangwatch.generator.process import WorkerProcess

    kwargs = {"fake_model_config": ToyConfig().to_json(), "enable_sleep_mode": True, "fake_generate_busy_s": 0.0}
    workers = {}
    for label, inflight_dir in (("off", ""), ("on", directory)):
        worker = WorkerProcess("fake", kwargs, log_dir=directory, inflight_dir=inflight_dir, name=f"bench-{label}")
        worker.start(60)
        worker.request("start", 60)
        for op in ("wake_weights", "reload_weights", "reset_prefix_cache", "wake_kv"):
            worker.request(op, 30)
        workers[label] = worker
    times: dict[str, list[float]] = {"off": [], "on": []}
    try:
        for _ in range(calls):
            for label, worker in workers.items():
                t0 = time.perf_counter()
                worker.request("generate", 30, prompts=["solve: 2+2", "say hi", "count", "name"], n=2, seed=1,
                               sampling={"max_tokens": 2})
                times[label].append(time.perf_counter() - t0)
    finally:
        for worker in workers.values():
            worker.close(10)
    return statistics.median(times["off"]), statistics.median(times["on"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", default=None)
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    directory = args.dir or tempfile.mkdtemp(prefix="hangwatch-bench-batch-")
    print(f"records in {directory}")
    for prompts, chars in ((4, 20), (64, 2000), (512, 4000)):
        cost = record_cost(directory, prompts, chars, 50)
        print(f"record alone: {prompts:4d} prompts x {chars:5d} chars: {cost * 1e3:7.3f} ms per call")
    off, on = generate_cost(directory, args.calls)
    print(f"fake engine generate, {args.calls} calls each: without {off * 1e3:.3f} ms, with {on * 1e3:.3f} ms, "
          f"overhead {(on - off) * 1e3:+.3f} ms per call (medians)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
