"""Orphans and kill races, and busy hangs, on real processes where it matters.

The reaction race (tree walk): a process of the tree that reacts to its parent's death by
double-forking a bare worker (a new session, an empty environment, the intermediate gone at
once). The supervisor's SIGKILL used to take the root at once through its parent-death
signal (SIGKILL): the member saw its parent die and forked before the guardian had read its
EOF, and the worker, in no recorded group or session, with no mark and no living parent of
ours, survived every run. The root's parent-death signal is now SIGSTOP while an armed
guardian will kill it: nobody below it sees a parent die.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
from waiting import alive, sigkill_all, wait_for

from hangwatch.supervisor.watch.probes import NoProbe
from hangwatch.supervisor.contain.tree_ops import LocalTree

# The root forks a member that polls its parent; once the parent is gone it says so, then
# double-forks a bare worker that writes its pid.
REACTOR = r"""
import os, sys, time
tmp = sys.argv[1]
root = os.getpid()
if os.fork() == 0:
    while os.getppid() == root:
        time.sleep(0.005)
    open(tmp + "/reacted", "w").close()
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            os.execve("/bin/sh", ["sh", "-c", "echo $$ > " + tmp + "/worker.tmp; mv " + tmp + "/worker.tmp "
                      + tmp + "/worker; exec sleep 120"], {})
        os._exit(0)
    time.sleep(120); os._exit(0)
open(tmp + "/root.tmp", "w").write(str(os.getpid())); os.rename(tmp + "/root.tmp", tmp + "/root")
time.sleep(120)
"""


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_a_member_reacting_to_its_parents_death_forks_nothing_that_survives(tmp_path: Path) -> None:
    run = tmp_path / "run"
    supervisor = subprocess.Popen(
        [sys.executable, "-m", "hangwatch.cli", "run", "--run-dir", str(run), "--gpu-probe", "none",
         "--interval", "0.2", "--containment", "tree", "--quiet", "--", sys.executable, "-c", REACTOR, str(tmp_path)],
        cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    started: list[int] = []
    try:
        wait_for(lambda: (tmp_path / "root").exists(), timeout=60, what="attempt 1 started")
        root = int((tmp_path / "root").read_text())
        wait_for(lambda: psutil.Process(root).children(), timeout=20, what="member forked")
        started += [root, *(c.pid for c in psutil.Process(root).children())]
        wait_for(lambda: all(str(p) in (run / "tree.json").read_text() for p in started), timeout=20,
                 what="root and member recorded")
        supervisor.kill()
        supervisor.wait(10)
        wait_for(lambda: not any(alive(p) for p in started), timeout=20, what="root and member killed")
        if (tmp_path / "reacted").exists():
            # It saw its parent die and forked: the worker must not outlive the run.
            wait_for(lambda: (tmp_path / "worker").exists(), timeout=10, what="the worker's pid")
            worker = int((tmp_path / "worker").read_text())
            started.append(worker)
            wait_for(lambda: not alive(worker), timeout=5, what=f"bare worker {worker} killed")
    finally:
        if supervisor.poll() is None:
            supervisor.kill()
            supervisor.wait(10)
        if (tmp_path / "worker").exists():
            started.append(int((tmp_path / "worker").read_text() or 0))
        sigkill_all([p for p in started if p > 0])


def test_the_root_is_stopped_not_killed_only_while_an_armed_guardian_will_kill_it(tmp_path: Path) -> None:
    """A stopped root nobody kills would hold its GPU memory for good: SIGSTOP only with the tree
    walk and a guardian that is still there; a cgroup (nothing escapes it) keeps SIGKILL."""
    tree = LocalTree(tmp_path, NoProbe(), echo=False)
    try:
        assert tree._root_death_signal() == signal.SIGKILL  # no guardian
        armed = [True]
        tree._guardian = lambda state: None
        tree._guardian_armed = lambda: armed[0]
        assert tree._root_death_signal() == signal.SIGSTOP
        armed[0] = False  # the guardian died (or never confirmed it was armed)
        assert tree._root_death_signal() == signal.SIGKILL
        armed[0] = True
        tree.containment = object()  # type: ignore[assignment]  (any cgroup containment)
        assert tree._root_death_signal() == signal.SIGKILL
    finally:
        tree.containment = None
        tree.close()


def test_the_guardian_stops_its_recorded_members_by_pidfd_without_a_scan() -> None:
    """The supervisor's death orphans its adopted children; one that reacts (forks a bare worker)
    races the guardian's start-up, so the members told are pinned by pidfd and stopped first.
    A member whose pid now names another process (create time differs) is never pinned."""
    from hangwatch.supervisor.contain.guardian_process import Pinned

    child = subprocess.Popen(["sleep", "60"])
    other = subprocess.Popen(["sleep", "60"])
    pinned = Pinned()
    try:
        born = psutil.Process(child.pid).create_time()
        pinned.update([[child.pid, born], [other.pid, born - 100.0], "junk", [1, 0.0]])
        assert list(pinned.fds) == [(child.pid, born)]
        pinned.stop()
        wait_for(lambda: psutil.Process(child.pid).status() == psutil.STATUS_STOPPED, timeout=10,
                 what="the pinned member stopped")
        assert psutil.Process(other.pid).status() != psutil.STATUS_STOPPED
        pinned.update([])  # no longer a member: its pidfd is closed
        assert pinned.fds == {}
    finally:
        for proc in (child, other):
            proc.kill()
            proc.wait(10)
        for fd in pinned.fds.values():
            os.close(fd)


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_a_guardian_that_dies_is_replaced_so_the_stopped_root_is_still_killed(tmp_path: Path) -> None:
    """The root's parent-death signal is SIGSTOP while a guardian is armed. A guardian killed
    later (a user's kill, the OOM killer) left nobody to kill the root when the supervisor died:
    it stayed stopped, holding its memory, until --resume. A dead guardian is now replaced."""
    run = tmp_path / "run"
    trainer = "import os, sys, time; open(sys.argv[1], 'w').write(str(os.getpid())); time.sleep(120)"
    supervisor = subprocess.Popen(
        [sys.executable, "-m", "hangwatch.cli", "run", "--run-dir", str(run), "--gpu-probe", "none",
         "--interval", "0.2", "--containment", "tree", "--quiet", "--", sys.executable, "-c", trainer,
         str(tmp_path / "root")],
        cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    root = 0
    try:
        wait_for(lambda: (tmp_path / "root").exists() and (tmp_path / "root").read_text(), timeout=60,
                 what="the trainer started")
        root = int((tmp_path / "root").read_text())
        wait_for(lambda: str(root) in (run / "tree.json").read_text(), timeout=20, what="the root recorded")

        def guardians() -> list[psutil.Process]:
            return [c for c in psutil.Process(supervisor.pid).children()
                    if "hangwatch.supervisor.contain.guardian_process" in " ".join(c.cmdline())]

        (first,) = guardians()
        first.kill()
        journal = run / "journal.jsonl"
        wait_for(lambda: '"guardian_rearmed"' in journal.read_text(), timeout=30, what="a new guardian")
        assert [g.pid for g in guardians()] != [first.pid]
        supervisor.kill()
        supervisor.wait(10)
        wait_for(lambda: not alive(root), timeout=20, what=f"the root {root} killed, not left stopped")
    finally:
        if supervisor.poll() is None:
            supervisor.kill()
            supervisor.wait(10)
        if root:
            sigkill_all([root])
