"""Soak: does the supervisor stay flat over many ticks and many attempts?

    .venv/bin/python scripts/bench_soak.py [--ticks 100000] [--interval 0.005] [--churn 300] [--growth-s 600]

1. Ticks: a real ``hangwatch run`` (default settings except ``--interval``) over a trainer
   that beats every 10 ms and forks a short-lived child every 50 ms. Ticks are counted
   exactly, from outside: the supervisor reads the simulated-GPU file (``--gpu-probe file:``)
   once per tick, and an inotify watch on that file counts the opens. Every 2 s the
   supervisor's RSS, open fds and threads and the run dir's size are read. Growth is the
   last reading minus the first reading after the warm-up (``--warmup`` ticks, default 10 %).
2. Churn: ``--churn`` attempts of a trainer that crashes at once, leaving an orphan behind
   (restart budget raised, no backoff): the supervisor's fds, threads and zombie children
   are read at every new attempt.
3. Growth (``--growth-s``): the journal's and hangwatch.log's bytes per day at the default
   settings (1 s interval) over the same beating, forking trainer, after start-up.

Last line: ``ticks=N rss_growth_kb=X fd_growth=Y thread_growth=Z run_dir_mb=W``.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]

TRAINER = r"""
import os, sys, time
from hangwatch.contract.heartbeat import beat
i = 0
while True:
    i += 1
    beat(step=i, phase="train", loss=round(1.0 / i, 6))
    if i % 5 == 0 and os.fork() == 0:
        time.sleep(0.02)
        os._exit(0)
    try:
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass
    except ChildProcessError:
        pass
    time.sleep(0.01)
"""

# Crashes at once; the double-forked sleeper is re-parented to the supervisor (a subreaper),
# which must kill and reap it before the next attempt.
CRASHER = "(sleep 30 &) ; exit 3"

IN_OPEN = 0x20


class OpenCounter:
    """Counts opens of one file with inotify (the supervisor opens the GPU file once per tick)."""

    def __init__(self, path: Path) -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        self.fd = libc.inotify_init1(os.O_CLOEXEC)
        if self.fd < 0 or libc.inotify_add_watch(self.fd, os.fsencode(path), IN_OPEN) < 0:
            raise OSError(ctypes.get_errno(), "inotify")
        self.count = 0
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        while True:
            data = os.read(self.fd, 65536)
            offset = 0
            while offset < len(data):
                _wd, mask, _cookie, length = struct.unpack_from("iIII", data, offset)
                offset += 16 + length
                if mask & IN_OPEN:
                    self.count += 1


def dir_bytes(path: Path) -> int:
    total = 0
    for base, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(base, name)).st_size
            except OSError:
                pass
    return total


def zombies(proc: psutil.Process) -> int:
    n = 0
    for child in proc.children():
        try:
            n += child.status() == psutil.STATUS_ZOMBIE
        except psutil.Error:
            pass
    return n


def reading(proc: psutil.Process) -> tuple[int, int, int]:
    return proc.memory_info().rss, proc.num_fds(), proc.num_threads()


def soak(ticks: int, interval: float, warmup: int, tmp: Path, extra: list[str]) -> str:
    gpu = tmp / "gpu.json"
    gpu.write_text(json.dumps({"devices": [{"index": 0, "util_pct": 20, "mem_used_mib": 1000}]}))
    counter = OpenCounter(gpu)
    run_dir = tmp / "soak"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    sup = subprocess.Popen(
        [sys.executable, "-m", "hangwatch.cli", "run", "--quiet", "--run-dir", str(run_dir),
         "--gpu-probe", f"file:{gpu}", "--interval", str(interval), *extra, "--", sys.executable, "-c", TRAINER],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    proc = psutil.Process(sup.pid)
    started = time.monotonic()
    base: tuple[int, int, int] | None = None
    last = base
    peak_rss = 0
    after: list[tuple[float, int]] = []  # (seconds, rss) after the warm-up
    try:
        while counter.count < ticks:
            if sup.poll() is not None:
                raise SystemExit(f"the supervisor exited early ({sup.returncode}); see {run_dir}")
            time.sleep(2.0)
            last = reading(proc)
            if counter.count >= warmup:
                base = base or last
                peak_rss = max(peak_rss, last[0])
                after.append((time.monotonic(), last[0]))
            elapsed = time.monotonic() - started
            print(f"  t={elapsed:6.0f}s ticks={counter.count:7d} rss={last[0] / 1024:8.0f}KB fds={last[1]} "
                  f"threads={last[2]} run_dir={dir_bytes(run_dir) / 1e6:.2f}MB", flush=True)
    finally:
        sup.send_signal(signal.SIGTERM)
        sup.wait(timeout=60)
    assert base is not None and last is not None
    elapsed = time.monotonic() - started
    # The heap is trimmed every 10 s, so RSS saw-tooths a little: compare the floors too.
    first_min = min(r for t, r in after if t - after[0][0] <= 60)
    last_min = min(r for t, r in after if after[-1][0] - t <= 60)
    print(f"soak: {counter.count} ticks in {elapsed:.0f} s ({1000 * elapsed / counter.count:.1f} ms/tick), "
          f"interval {interval} s; rss after warm-up {base[0] / 1024:.0f} KB -> {last[0] / 1024:.0f} KB "
          f"(peak {peak_rss / 1024:.0f} KB; lowest in the first / last minute {first_min / 1024:.0f} / "
          f"{last_min / 1024:.0f} KB)")
    return (f"ticks={counter.count} rss_growth_kb={(last[0] - base[0]) / 1024:.0f} fd_growth={last[1] - base[1]} "
            f"thread_growth={last[2] - base[2]} run_dir_mb={dir_bytes(run_dir) / 1e6:.2f}")


def churn(attempts: int, tmp: Path) -> None:
    run_dir = tmp / "churn"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    sup = subprocess.Popen(
        [sys.executable, "-m", "hangwatch.cli", "run", "--quiet", "--run-dir", str(run_dir), "--gpu-probe", "none",
         "--max-restarts", str(attempts - 1), "--max-restarts-per-hour", str(attempts * 10),
         "--backoff", "0", "--backoff-max", "0", "--grace", "1", "--", "sh", "-c", CRASHER],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    proc = psutil.Process(sup.pid)
    journal = run_dir / "journal.jsonl"
    rows: dict[int, tuple[int, int, int]] = {}
    started = time.monotonic()
    seen = 0
    while sup.poll() is None:
        try:
            with open(journal, "rb") as handle:
                n = handle.read().count(b'"event":"attempt_started"')
            if n > seen:
                seen = n
                rows[n] = (proc.num_fds(), proc.num_threads(), zombies(proc))
        except (OSError, psutil.Error):
            pass
        time.sleep(0.02)
    elapsed = time.monotonic() - started
    # Readings land anywhere in an attempt (pipes and pump threads come and go with the trainer):
    # flat means the first 50 attempts after a warm-up of 10 and the last 50 span the same range.
    early = [v for k, v in rows.items() if 10 <= k < 60]
    late = [v for k, v in rows.items() if k > seen - 50]

    def span(vs: list[tuple[int, int, int]], i: int) -> str:
        return f"{min(v[i] for v in vs)}..{max(v[i] for v in vs)}"

    names = ("fds", "threads", "zombies")
    spread = ", ".join(f"{n} {span(early, i)} -> {span(late, i)}" for i, n in enumerate(names))
    print(f"churn: {seen} attempts in {elapsed:.0f} s (exit {sup.returncode}); attempts 10-59 vs the last 50: "
          f"{spread} ({len(rows)} readings)")


def growth(seconds: float, tmp: Path) -> None:
    """Journal and hangwatch.log bytes per day at the default settings, over the same
    trainer (it beats 100 times a second with a new ``loss`` each time)."""
    run_dir = tmp / "growth"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    sup = subprocess.Popen(
        [sys.executable, "-m", "hangwatch.cli", "run", "--quiet", "--run-dir", str(run_dir), "--gpu-probe", "none",
         "--", sys.executable, "-c", TRAINER],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    files = [run_dir / "journal.jsonl", run_dir / "hangwatch.log"]
    try:
        time.sleep(seconds / 3)  # start-up records and the first burst of trainer_info
        first = [f.stat().st_size for f in files]
        t0 = time.monotonic()
        time.sleep(seconds * 2 / 3)
        last = [f.stat().st_size for f in files]
        span = time.monotonic() - t0
    finally:
        sup.send_signal(signal.SIGTERM)
        sup.wait(timeout=60)
    per_day = [(b - a) * 86400 / span for a, b in zip(first, last)]
    print(f"growth at default settings over {span:.0f} s after {seconds / 3:.0f} s of start-up: journal "
          f"{first[0]} -> {last[0]} B ({per_day[0] / 1024:.0f} KB/day), hangwatch.log {first[1]} -> {last[1]} B "
          f"({per_day[1] / 1024:.0f} KB/day)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ticks", type=int, default=100_000)
    parser.add_argument("--interval", type=float, default=0.005)
    parser.add_argument("--warmup", type=int, default=None, help="ticks before the baseline (default 10 %%)")
    parser.add_argument("--churn", type=int, default=300, help="attempts of a crashing trainer (0: skip)")
    parser.add_argument("--supervisor-args", default="", help="more `hangwatch run` options for the soak, e.g. '--quiet'")
    parser.add_argument("--growth-s", type=float, default=0.0,
                        help="also measure journal and log growth at default settings for this long (0: skip)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        if args.growth_s:
            growth(args.growth_s, Path(tmp))
        if args.churn:
            churn(args.churn, Path(tmp))
        if not args.ticks:
            return 0
        line = soak(args.ticks, args.interval, args.warmup if args.warmup is not None else args.ticks // 10, Path(tmp),
                    args.supervisor_args.split())
    print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
