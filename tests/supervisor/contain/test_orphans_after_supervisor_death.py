"""Orphans left when the supervisor and its guardian die together, on real processes.

A node-wide OOM kill or a kill of everything the user owns can take the guardian along
with the supervisor. ``--resume`` then has to clean up alone: with a cgroup it empties
the dead run's cgroups; with the tree walk it had only ``tree.json``, which names what a
tick saw. A worker that escaped (new session, double fork) after the last tick kept
running, training on GPU memory the resumed attempt needs. It still carries its
attempt's mark (``HANGWATCH_ATTEMPT_DIR``), which ``--resume`` now reads from the journal.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
from waiting import alive, wait_for
import json
from waiting import sigkill_all
from hangwatch.contract.journal import Journal
from hangwatch.supervisor.contain.members_file import TreeFile

# Attempt 1 escapes a SIGTERM-ignoring worker when told (the test's "go" file); attempt 2 exits 0.
ESCAPER = r"""
import os, signal, sys, time
tmp = sys.argv[1]
if os.environ.get("HANGWATCH_ATTEMPT") != "1":
    sys.exit(0)
open(tmp + "/root.tmp", "w").write(str(os.getpid())); os.rename(tmp + "/root.tmp", tmp + "/root")
while not os.path.exists(tmp + "/go"):
    time.sleep(0.02)
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        open(tmp + "/worker.tmp", "w").write(str(os.getpid())); os.rename(tmp + "/worker.tmp", tmp + "/worker")
        time.sleep(120); os._exit(0)
    os._exit(0)
time.sleep(120)
"""


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _reap(supervisor: subprocess.Popen, pids: list[int]) -> None:
    """Whatever a test started: the supervisor, and every pid its trainer reported."""
    if supervisor.poll() is None:
        supervisor.kill()
        supervisor.wait(10)
    for pid in pids:
        _kill(pid)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_resume_kills_a_worker_that_escaped_after_the_last_tick_when_the_guardian_died_too(tmp_path):
    hw = [sys.executable, "-m", "hangwatch.cli", "run"]
    run = tmp_path / "run"
    supervisor = subprocess.Popen(
        hw + ["--run-dir", str(run), "--gpu-probe", "none", "--interval", "0.2", "--containment", "tree",
              "--quiet", "--", sys.executable, "-c", ESCAPER, str(tmp_path)],
        cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    started: list[int] = []
    try:
        wait_for(lambda: (tmp_path / "root").exists(), timeout=60, what="attempt 1 started")
        started.append(int((tmp_path / "root").read_text()))
        wait_for(lambda: any("hangwatch.supervisor.contain.guardian_process" in " ".join(c.cmdline())
                             for c in psutil.Process(supervisor.pid).children()), timeout=20, what="guardian")
        guardians = [c.pid for c in psutil.Process(supervisor.pid).children()
                     if "hangwatch.supervisor.contain.guardian_process" in " ".join(c.cmdline())]
        started += guardians
        # No tick from here on: whatever escapes now is in no tree.json and unknown to the guardian.
        supervisor.send_signal(signal.SIGSTOP)
        (tmp_path / "go").write_text("")
        wait_for(lambda: (tmp_path / "worker").exists(), timeout=30, what="worker escaped")
        worker = int((tmp_path / "worker").read_text())
        started.append(worker)
        for pid in guardians:
            _kill(pid)
        supervisor.kill()
        supervisor.wait(10)
        wait_for(lambda: not any(alive(p) for p in guardians), timeout=10, what="guardian gone")
        assert alive(worker), "precondition: nothing left to kill the escaped worker"

        resumed = subprocess.run(hw + ["--resume", str(run), "--quiet"], cwd=tmp_path,
                                 capture_output=True, text=True, timeout=90)
        assert resumed.returncode == 0, resumed.stderr[-2000:]
        wait_for(lambda: not alive(worker), timeout=10, what="escaped worker killed by --resume")
        assert f"{worker}" in resumed.stderr  # the orphans_killed warning names it
    finally:
        _reap(supervisor, started)


def test_resume_marks_are_only_this_runs_attempt_dirs(tmp_path):
    """The journal names the path; a mark outside the run's attempts is none of this run's."""
    from hangwatch.supervisor.contain.guardian import MARK_SLACK_S
    from hangwatch.supervisor.contain.left_behind import resume_marks

    run = tmp_path / "run"
    (run / "attempts" / "attempt-001").mkdir(parents=True)
    records = [
        {"event": "run_started", "ts": 100.0},
        {"event": "attempt_started", "ts": 101.0, "env": {"HANGWATCH_ATTEMPT_DIR": str(run / "attempts" / "attempt-001")}},
        {"event": "attempt_started", "ts": 102.0, "env": {"HANGWATCH_ATTEMPT_DIR": "/"}},
        {"event": "attempt_started", "ts": 103.0, "env": {"HANGWATCH_ATTEMPT_DIR": str(tmp_path / "other" / "attempts" / "x")}},
        {"event": "attempt_started", "ts": 104.0, "env": {"HANGWATCH_ATTEMPT_DIR": 7}},
        {"event": "attempt_started", "ts": 105.0},
    ]
    assert resume_marks(records, str(run)) == [
        (f"HANGWATCH_ATTEMPT_DIR={run / 'attempts' / 'attempt-001'}", 100.0 - MARK_SLACK_S)]
    assert resume_marks([], str(run)) == []


# Attempt 1's child forks, when told, a bare worker: a new session, an empty environment (no
# mark), SIGTERM ignored; the child itself lives on, in the trainer's group.
BARE_CHILD = r"""
import os, signal, sys, time
tmp = sys.argv[1]
if os.fork() == 0:
    while not os.path.exists(tmp + "/go"):
        time.sleep(0.02)
    if os.fork() == 0:
        os.setsid()
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        os.execve("/bin/sh", ["sh", "-c", "echo $$ > " + tmp + "/worker.tmp; mv " + tmp + "/worker.tmp "
                  + tmp + "/worker; exec sleep 120"], {})
    time.sleep(120); os._exit(0)
open(tmp + "/root.tmp", "w").write(str(os.getpid())); os.rename(tmp + "/root.tmp", tmp + "/root")
time.sleep(120)
"""


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_guardian_kills_a_bare_worker_forked_after_the_last_tick_by_a_live_member(tmp_path):
    """Tree walk: a worker with neither a recorded group nor a mark, forked while nobody looked,
    is still its live parent's child when the guardian acts: it is ours and dies with it."""
    run = tmp_path / "run"
    supervisor = subprocess.Popen(
        [sys.executable, "-m", "hangwatch.cli", "run", "--run-dir", str(run), "--gpu-probe", "none",
         "--interval", "0.2", "--containment", "tree", "--quiet", "--", sys.executable, "-c", BARE_CHILD, str(tmp_path)],
        cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    started: list[int] = []
    try:
        wait_for(lambda: (tmp_path / "root").exists(), timeout=60, what="attempt 1 started")
        root = int((tmp_path / "root").read_text())
        started.append(root)
        wait_for(lambda: psutil.Process(root).children(), timeout=20, what="child forked")
        started += [c.pid for c in psutil.Process(root).children()]
        # the child recorded: tree.json names it (the guardian was told the same)
        wait_for(lambda: all(str(p) in (run / "tree.json").read_text() for p in started), timeout=20,
                 what="tree recorded")
        supervisor.send_signal(signal.SIGSTOP)  # no tick from here on
        (tmp_path / "go").write_text("")
        wait_for(lambda: (tmp_path / "worker").exists(), timeout=30, what="bare worker started")
        worker = int((tmp_path / "worker").read_text())
        started.append(worker)
        supervisor.kill()
        supervisor.wait(10)
        wait_for(lambda: not any(alive(p) for p in started), timeout=20, what="the guardian killed everything")
    finally:
        _reap(supervisor, started)


# A recorded child of the trainer: it forks an env-less ``sleep`` in its own session (not
# recorded, no mark) and one in its group, then waits, as a data loader that respawns would.
CHILD = r"""
import os, subprocess, sys, time
a = subprocess.Popen(["sleep", "60"], env={})
b = subprocess.Popen(["sleep", "60"], env={}, start_new_session=True)
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write(f"{a.pid} {b.pid}\n")
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
time.sleep(60)
"""


class _Log:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def warning(self, event: str, **fields) -> None:
        self.lines.append(f"{event}: {fields.get('message', '')}")


@pytest.mark.timeout(60)
def test_resume_kills_what_recorded_members_forked_after_the_last_tick_without_a_mark(tmp_path: Path) -> None:
    from hangwatch.cli.run_wiring import resume_state

    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    journal = Journal(run / "journal.jsonl", "r3")
    journal.append("run_started", pid=999999, command=["x"], run_dir=str(run))
    journal.append("attempt_started", attempt=1, pid=999999, create_time=0.0, argv=["x"],
                   env={"HANGWATCH_ATTEMPT_DIR": str(run / "attempts" / "attempt-001")})
    pids = tmp_path / "pids"
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(pids)], start_new_session=True,
                             env={k: v for k, v in os.environ.items() if not k.startswith("HANGWATCH_")})
    forked: list[int] = []
    try:
        wait_for(pids.exists, timeout=30, what="the child forked")
        forked = [int(p) for p in pids.read_text().split()]
        TreeFile(run / "tree.json").update([psutil.Process(child.pid)])  # the last tick saw only the child
        log = _Log()
        resume_state(run, log)
        child.wait(10)
        wait_for(lambda: not any(alive(p) for p in forked), timeout=10,
                 what="what the recorded child forked after the last tick killed")
        assert child.returncode == -signal.SIGKILL
        lost = [json.loads(line) for line in (run / "journal.jsonl").read_text().splitlines()][-1]
        assert lost["event"] == "attempt_ended" and set(lost["killed"]) >= {child.pid, forked[0]}
    finally:
        child.kill()
        child.wait(10)
        sigkill_all(forked)
