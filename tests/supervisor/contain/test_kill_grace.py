"""The adaptive kill grace, with real processes: a wedged process (ignores SIGTERM,
uses no CPU) is SIGKILLed after the quiet period; one that is busy after SIGTERM
(an emergency checkpoint) gets the whole grace; the report says which rule applied."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from hangwatch.supervisor.contain.killer import TreeKiller

from fakes import FakeProcessTree

pytestmark = pytest.mark.timeout(60)

WEDGED = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); time.sleep(600)"
# SIGTERM starts a long "emergency save": the CPU burns until SIGKILL.
BUSY = ("import signal, time\n"
        "def save(*_):\n"
        "    while True: pass\n"
        "signal.signal(signal.SIGTERM, save); print('ready', flush=True); time.sleep(600)")
POLITE = ("import signal, sys, time\n"
          "signal.signal(signal.SIGTERM, lambda *_: sys.exit(0)); print('ready', flush=True); time.sleep(600)")


def _tree(procs: list[psutil.Process]) -> FakeProcessTree:
    """The killer's view of these real processes: those still running (a zombie is gone)."""
    return FakeProcessTree(procs, keep=lambda p: p.is_running() and p.status() != psutil.STATUS_ZOMBIE)


@pytest.fixture
def spawn():
    started: list[subprocess.Popen] = []

    def start(code: str) -> subprocess.Popen:
        proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                                start_new_session=True)
        started.append(proc)
        assert proc.stdout.readline().strip() == "ready"
        return proc

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait(5)


def _kill(popens: list[subprocess.Popen], grace: float, quiet: float):
    tree = _tree([psutil.Process(p.pid) for p in popens])
    killer = TreeKiller(tree, reap=lambda: [p.poll() for p in popens], quiet_s=quiet)
    return killer.kill(grace=grace, kill_timeout=5.0)


def test_a_wedged_process_is_sigkilled_after_the_quiet_period_not_the_grace(spawn):
    procs = [spawn(WEDGED), spawn(WEDGED)]
    report = _kill(procs, grace=20.0, quiet=0.5)
    assert report.confirmed and set(report.escalated) == {p.pid for p in procs}
    assert report.grace_rule == "quiet"
    assert report.to_json()["grace_rule"] == "quiet" and report.quiet_s == 0.5
    # Not a timing bound on the machine: the rule fired, so SIGKILL came before the grace.
    assert report.sigkill_after_s < 20.0


@pytest.mark.slow
def test_a_process_busy_after_sigterm_gets_the_full_grace_even_beside_a_wedged_one(spawn):
    busy, wedged = spawn(BUSY), spawn(WEDGED)
    report = _kill([busy, wedged], grace=2.0, quiet=0.3)
    assert report.confirmed and set(report.escalated) == {busy.pid, wedged.pid}
    assert report.grace_rule == "grace"
    assert report.sigkill_after_s >= 2.0


def test_processes_that_exit_on_sigterm_need_no_sigkill(spawn):
    report = _kill([spawn(POLITE)], grace=10.0, quiet=0.5)
    assert report.confirmed and report.escalated == () and report.grace_rule == "exited"
    assert report.sigkill_after_s is None


@pytest.mark.slow
def test_no_quiet_period_means_the_full_grace(spawn):
    report = _kill([spawn(WEDGED)], grace=1.0, quiet=None)
    assert report.grace_rule == "grace" and report.sigkill_after_s >= 1.0


def test_a_grace_of_zero_sends_sigkill_first_and_never_sigterm(spawn):
    """The engine-level kill: a busy process that would save something on SIGTERM gets no
    chance to (its SIGTERM handler never runs), and the report says no grace applied."""
    busy = spawn(BUSY)
    report = _kill([busy], grace=0.0, quiet=0.5)
    assert report.confirmed and report.grace_rule == "none" and report.sigkill_after_s == 0.0
    assert [s["signal"] for s in report.signals] and {s["signal"] for s in report.signals} == {"SIGKILL"}
    assert busy.wait(5) == -9
    assert report.escalated == ()


def test_a_kill_timeout_of_zero_still_lets_sigkill_land(spawn):
    """With no wait after SIGKILL every target read as a survivor: a level-1 restart became a job
    restart, and a whole-tree kill exit 74 (unkillable)."""
    tree = _tree([psutil.Process(spawn(WEDGED).pid)])
    report = TreeKiller(tree, reap=lambda: None).kill(grace=0.0, kill_timeout=0.0)
    assert report.confirmed and report.survivors == ()


@pytest.mark.slow
def test_a_launcher_left_alone_is_sigkilled_without_waiting_out_its_teardown(spawn):
    """torchrun's agent: its workers die at SIGTERM, it stays busy tearing down. Named as the
    launcher, it is SIGKILLed once everything else is gone; not named, it keeps the grace."""
    launcher, worker = spawn(BUSY), spawn(POLITE)
    tree = _tree([psutil.Process(p.pid) for p in (launcher, worker)])
    killer = TreeKiller(tree, reap=lambda: [p.poll() for p in (launcher, worker)], quiet_s=0.3)
    report = killer.kill(grace=10.0, kill_timeout=5.0, launcher=launcher.pid)
    assert report.confirmed and report.grace_rule == "launcher" and report.escalated == (launcher.pid,)
    assert report.sigkill_after_s < 10.0

    launcher, worker = spawn(BUSY), spawn(POLITE)
    report = _kill([launcher, worker], grace=1.5, quiet=0.3)
    assert report.grace_rule == "grace", "without the launcher named, a busy process keeps its grace"


@pytest.mark.slow
def test_a_lone_root_is_never_taken_for_a_launcher(spawn):
    """A single-process trainer writing an emergency checkpoint: nothing else was in the tree."""
    root = spawn(BUSY)
    tree = _tree([psutil.Process(root.pid)])
    report = TreeKiller(tree, reap=lambda: root.poll(), quiet_s=0.3).kill(grace=1.5, kill_timeout=5.0,
                                                                           launcher=root.pid)
    assert report.grace_rule == "grace" and report.sigkill_after_s >= 1.5


LAUNCHER = """
import os, signal, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", '''
import time
from hangwatch.trainer import beat
for step in range(3):
    beat(step=step, phase="train"); time.sleep(0.2)
time.sleep(600)  # hangs: no more beats
'''])
def teardown(*_):
    child.terminate()
    end = time.monotonic() + 30
    while time.monotonic() < end:  # a long, busy teardown, like an agent's
        pass
    sys.exit(1)
signal.signal(signal.SIGTERM, teardown)
sys.exit(child.wait())
"""


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_the_supervisor_names_the_root_a_launcher_when_only_its_workers_beat(tmp_path):
    run_dir = tmp_path / "run"
    argv = [str(Path(sys.executable).parent / "hangwatch"), "run", "--quiet", "--run-dir", str(run_dir),
            "--gpu-probe", "none", "--interval", "0.25", "--progress-timeout", "1.5", "--grace", "20",
            "--max-restarts", "0", "--", sys.executable, "-c", LAUNCHER]
    env = {k: v for k, v in os.environ.items() if not k.startswith("HANGWATCH_")}
    subprocess.run(argv, env=env, capture_output=True, text=True, timeout=80)
    journal = [json.loads(line) for line in (run_dir / "journal.jsonl").read_text().splitlines()]
    (kill,) = [r for r in journal if r["event"] == "kill"]
    assert kill["grace_rule"] == "launcher" and kill["sigkill_after_s"] < 20
