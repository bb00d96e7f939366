"""A run of days: bounded memory, logs, journal and incident bundles; wall-clock steps; a low disk.

Most tests drive the real ``Supervisor`` with the shared fakes of ``tests/fakes.py`` (fake
clock, no process); the log cap and the low-disk test use real processes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fakes import FakeClock, FakeProbe, FakeTree, runner_config
from waiting import wait_for

from hangwatch.cli.run_summary import render_status, summarise
from hangwatch.contract.heartbeat import Heartbeat
from hangwatch.contract.journal import read_journal
from hangwatch.contract.samples import Sample
from hangwatch.supervisor.decide.detector import DetectorConfig, replay_detector
from hangwatch.supervisor.contain.launcher import CUT_MARKER, Reaper, launch
from hangwatch.supervisor.operate.longrun import Bundle, DiskWatch, HeapTrim, RecordBudget, choose_pruned, prune_incidents
from hangwatch.supervisor.watch.proctree import ProcessTree
from hangwatch.supervisor.runner import Supervisor
from hangwatch.supervisor.watch.sampler import SampleWindow

pytestmark = pytest.mark.timeout(60)


class BundleCapture:
    """Writes a minimal bundle (a manifest with a signature) per incident."""

    def __init__(self, signatures: list[str | None]) -> None:
        self.signatures = signatures
        self.requests = []

    def __call__(self, request):
        self.requests.append(request)
        path = request.run_dir / "incidents" / f"bundle-{request.attempt:03d}"
        path.mkdir(parents=True)
        sig = self.signatures[len(self.requests) - 1]
        (path / "manifest.json").write_text(json.dumps({"classification": {"signature_id": sig} if sig else None}))
        return path


def _run(tmp_path, script, capture=None, tree_cls=FakeTree, wall=None, **over):
    clock = FakeClock()
    tree = tree_cls(clock, script)
    capture = capture or BundleCapture([None] * len(script))
    config = runner_config(tmp_path, **over)
    config.run_dir.mkdir(parents=True)
    sup = Supervisor(config, FakeProbe(), capture, tree=tree, clock=clock, sleep=clock.sleep,
                     wall=wall(clock) if wall else clock)
    code = sup.run()
    return code, read_journal(config.run_dir / "journal.jsonl"), capture, sup


# -- memory: the window of samples ------------------------------------------------------------


def test_sample_window_memory_is_bounded_at_a_fast_interval_and_still_covers_the_window(tmp_path):
    # 30 s window at 5 ms: 6,000 ticks before the verdict. A deque of the whole window held all of
    # them (~1 KB each: 120 MB at the default 600 s progress timeout).
    code, _, capture, _ = _run(tmp_path, ["wedge", "train"], interval=0.005, stall_window=30.0,
                               progress_timeout=600.0)
    assert code == 0
    samples = capture.requests[0].samples
    verdict = capture.requests[0].verdict
    assert len(samples) <= 1024 + 121
    assert samples[0].t <= verdict.onset, "the bundle still holds the whole window"
    assert all(b.t - a.t <= 5.3 for a, b in zip(samples, samples[1:])), "thinned inside the gap tolerance (10 s)"
    replayed, _ = replay_detector(samples, DetectorConfig(interval=0.005, stall_window=30.0, progress_timeout=600.0))
    assert replayed is not None and replayed.kind is verdict.kind


def test_sample_window_keeps_every_sample_at_the_default_interval():
    window = SampleWindow(630.0)
    for i in range(2000):
        window.append(Sample(t=float(i), wall=float(i), cpu_pct={}, gpu=None))
    kept = window.snapshot()
    assert [s.t for s in kept] == [float(i) for i in range(2000 - 631, 2000)]


def test_record_budget_lets_a_burst_through_then_one_a_minute():
    clock = FakeClock()
    budget = RecordBudget(clock, burst=10, every_s=60.0)
    allowed = 0
    for _ in range(600):  # ten minutes of 1 s ticks, a new value every tick
        allowed += budget.due()
        clock.now += 1.0
    assert 10 + 9 <= allowed <= 10 + 11


def test_long_chatty_attempt_journals_trainer_info_at_a_bounded_rate(tmp_path):
    class LongChattyTree(FakeTree):
        def __init__(self, clock, script):
            super().__init__(clock, script, train_for=600.0)

        def sample(self):
            s = super().sample()
            hb = s.heartbeat
            info_hb = Heartbeat(hb.pid, hb.seq, hb.ts, hb.step, hb.phase, {"loss": 1.0 / hb.seq}) if hb else None
            return Sample(s.t, s.wall, s.cpu_pct, s.gpu, info_hb, s.tree_size)

    code, records, _, _ = _run(tmp_path, ["train"], tree_cls=LongChattyTree, progress_timeout=2000.0)
    assert code == 0
    info = [r for r in records if r["event"] == "trainer_info"]
    assert 10 <= len(info) <= 25, f"{len(info)} trainer_info records for 600 ticks (was one per tick)"


def test_heap_trim_runs_once_per_interval():
    clock = FakeClock()
    trim = HeapTrim(clock, every_s=60.0)
    calls = []
    trim._trim = calls.append  # the real one is glibc's malloc_trim
    for _ in range(300):  # five minutes of 1 s ticks
        trim.maybe()
        clock.now += 1.0
    assert calls == [0] * 4


# -- reaping across many attempts ----------------------------------------------------------------


def test_a_status_kept_for_a_reused_pid_does_not_end_the_new_process():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        reaper = Reaper(ProcessTree(root_pid=os.getpid()))
        reaper.statuses[child.pid] = 1  # an earlier process with this pid exited 1 (pids wrap over days)
        reaper.reap(also=[child.pid])
        assert reaper.exit_code(child.pid) is None, "the live process holding the pid has not exited"
        child.kill()
        wait_for(lambda: (reaper.reap(also=[child.pid]), reaper.exit_code(child.pid))[1] is not None, 10, "reap")
        assert reaper.exit_code(child.pid) == -9
    finally:
        child.kill()
        try:
            child.wait(5)
        except ChildProcessError:
            pass


# -- bounded trainer logs ---------------------------------------------------------------------------


PRINTER = r"""
import sys
for i in range(200000):
    sys.stdout.write("line %07d %s\n" % (i, "x" * 40))
sys.stdout.flush()
"""


def test_a_trainer_printing_faster_than_the_cap_keeps_head_and_newest_tail(tmp_path, capfdbinary):
    cap = 256 * 1024  # the trainer prints ~10 MB
    trainer = launch([sys.executable, "-c", PRINTER], dict(os.environ), tmp_path / "attempt", echo=True,
                     log_limit=lambda: cap)
    try:
        trainer.popen.wait(timeout=30)
        trainer.join_output(timeout=10)
    finally:
        trainer.popen.kill()
    log = trainer.stdout_path.read_bytes()
    assert len(log) <= cap
    head, marker, tail = log.partition(CUT_MARKER)
    assert marker and head.startswith(b"line 0000000 ") and len(head) == cap // 2
    assert tail.endswith(b"line 0199999 " + b"x" * 40 + b"\n"), "the newest output is at the end"
    assert len(tail) >= cap // 8
    echoed = capfdbinary.readouterr().out
    assert echoed.count(b"\n") == 200000, "the console echo is not cut"


# -- retention -------------------------------------------------------------------------------------


def test_choose_pruned_keeps_the_newest_and_the_first_of_each_signature():
    b = [Bundle(Path(f"/r/incidents/b{i}"), sig) for i, sig in enumerate(["a", "a", None, "b", "a", "b", None, "a"])]
    assert [p.path.name for p in choose_pruned(b, keep=3)] == ["b1", "b2", "b4"]
    assert [p.path.name for p in choose_pruned(b, keep=1)] == ["b1", "b2", "b4", "b5", "b6"]
    assert choose_pruned(b, keep=8) == []


def test_retention_prunes_old_bundles_journals_it_and_status_says_so(tmp_path):
    ckpt = tmp_path / "run" / "incidents" / "checkpoint-5"  # something a user keeps there: no manifest
    capture = BundleCapture(["graph", "graph", "graph", "lock", "graph", None])
    code, records, _, sup = _run(tmp_path, ["wedge"] * 6 + ["train"], capture=capture, keep_incidents=2,
                                 max_restarts=10, max_restarts_per_hour=100)
    ckpt.mkdir(parents=True, exist_ok=True)
    assert code == 0
    incidents = sup.run_dir / "incidents"
    left = sorted(p.name for p in incidents.iterdir())
    # Newest two (005, 006), plus the first "graph" (001) and the first "lock" (004).
    assert left == ["bundle-001", "bundle-004", "bundle-005", "bundle-006", "checkpoint-5"]
    pruned = [r for r in records if r["event"] == "incidents_pruned"]
    assert sum(len(r["removed"]) for r in pruned) == 2 and pruned[0]["keep"] == 2
    assert prune_incidents(incidents, 1) == [{"bundle": "bundle-005", "signature": "graph"}]
    assert (incidents / "checkpoint-5").is_dir(), "never touches what is not a bundle"
    summary = summarise(sup.run_dir / "journal.jsonl")
    assert summary["pruned"]["bundles"] == 2
    assert "pruned: 2 old incident bundle(s)" in render_status(summary)


# -- clocks ------------------------------------------------------------------------------------------


class JumpingWall:
    """Wall time that steps by +1 h, then -1 h, then +1 h ... every 7 s of real (fake) time, as NTP might."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock

    def __call__(self) -> float:
        steps = int((self.clock.now - 1000.0) // 7)
        return 1.8e9 + self.clock.now + (3600.0 if steps % 2 else -3600.0)


def test_a_wall_clock_jump_neither_fakes_nor_hides_a_verdict(tmp_path):
    # A wedge is still caught within the window plus one interval, as without the jumps...
    _, steady, _, _ = _run(tmp_path / "wedge", ["wedge", "train"])
    code, records, _, _ = _run(tmp_path / "wedge-jumps", ["wedge", "train"], wall=JumpingWall)
    assert code == 0
    incidents = [r for r in records if r["event"] == "incident"]
    assert len(incidents) == 1 and 10.0 <= incidents[0]["latency_s"] <= 11.0
    assert incidents[0]["latency_s"] == [r for r in steady if r["event"] == "incident"][0]["latency_s"]
    assert [r["kind"] for r in records if r["event"] == "attempt_ended"] == ["stall", "done"]

    # ... and a healthy 40 s attempt across several jumps gives no verdict at all.
    class Healthy(FakeTree):
        def __init__(self, clock, script):
            super().__init__(clock, script, train_for=40.0)

    code, records, _, _ = _run(tmp_path / "healthy", ["train"], tree_cls=Healthy, wall=JumpingWall)
    assert code == 0
    assert not [r for r in records if r["event"] == "incident"]
    assert [r["kind"] for r in records if r["event"] == "attempt_ended"] == ["done"]


class SteppedWall:
    """Wall time that steps by ``by`` seconds once, after it has been read ``after`` times."""

    def __init__(self, by: float, after: int):
        self.by, self.after, self.calls = by, after, 0

    def __call__(self, clock: FakeClock):
        def wall() -> float:
            self.calls += 1
            return 1.8e9 + clock.now + (self.by if self.calls > self.after else 0.0)
        return wall


@pytest.mark.parametrize("step", [3600.0, -3600.0])
def test_a_wall_clock_step_does_not_move_the_crash_loop_window(tmp_path, step):
    # At most 3 restarts an hour: the 4th crash in a row (within seconds) stops the run. A +1 h
    # step after the second crash made the policy forget the first two and keep restarting.
    common = dict(max_restarts=20, max_restarts_per_hour=3, backoff=0.0, backoff_max=0.0)
    code, steady, _, _ = _run(tmp_path / "steady", ["crash"] * 20, **common)
    code_stepped, stepped, _, _ = _run(tmp_path / "stepped", ["crash"] * 20, wall=SteppedWall(step, after=5), **common)
    started = [r for r in steady if r["event"] == "attempt_started"]
    assert len(started) == 4
    assert len([r for r in stepped if r["event"] == "attempt_started"]) == len(started)
    assert code_stepped == code


# -- disk space ----------------------------------------------------------------------------------------


def test_disk_watch_warns_once_and_recovers_with_hysteresis():
    free = [5000.0]

    class St:
        f_frsize = 1024 * 1024

        @property
        def f_bavail(self):
            return free[0]

    clock = FakeClock()
    watch = DiskWatch(Path("/"), 1000.0, clock, every_s=1.0, statvfs=lambda _p: St())
    readings = []
    for mb in (5000, 900, 800, 1050, 1200, 500):
        free[0] = mb
        readings.append(watch.check())
        assert watch.check() is None, "read at most once per every_s"
        clock.now += 1.0
    assert [r.low for r in readings] == [False, True, True, True, False, True]
    assert [r.newly_low for r in readings] == [False, True, False, False, False, False]
    assert DiskWatch(Path("/"), 0.0, clock).check() is None, "0 turns it off"


LOUD = r"""
import sys, time
from hangwatch.contract.heartbeat import beat
for i in range(60):
    sys.stdout.write(("%04d " % i) + "y" * 49_995 + "\n")  # 50 kB a line, 3 MB in all: more than the disk
    sys.stdout.flush()
    beat(step=i, phase="train")
    time.sleep(0.05)  # ~3 s in all: the disk reads low from ~0.5 s on, at >= 2 of the supervisor's 1 s disk reads
print("the end")
"""


@pytest.fixture
def small_disk(tmp_path):
    mount = tmp_path / "small"
    mount.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_low_disk_warns_once_cuts_logs_first_and_keeps_the_journal(hw, small_disk):
    hw.run_dir = small_disk / "run"
    result = hw.run(hw.fast_args(**{"--gpu-probe": "none", "--min-free-mb": "1.5"})
                    + ["--", sys.executable, "-c", LOUD], timeout=60)
    assert result.returncode == 0, result.stderr
    low = hw.events("disk_low")
    assert len(low) == 1 and low[0]["free_mb"] <= 1.5
    assert result.stderr.count("disk_low") == 1
    assert hw.events("run_finished")[-1]["outcome"] == "success", "the journal kept writing to the end"
    log = (hw.run_dir / "attempts" / "attempt-001" / "stdout.log").read_bytes()
    assert len(log) <= 1024 * 1024 and CUT_MARKER in log
    assert log.endswith(b"the end\n")
