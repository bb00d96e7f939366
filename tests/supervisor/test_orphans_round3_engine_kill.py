"""The engine-level kill (level 1: only the wedged rollout engine's worker) takes what the worker
started, not just its process group.

The worker runs in a session and group of its own, and the kill was of that group. A child of the
worker that left the group (``setpgid``: its own group; ``setsid``: its own session), as a compile
helper or an engine core of its own may, kept running after the worker died, orphaned, holding
what it held (GPU memory) while the standby took over, until the whole attempt ended; the GPU
release check looked only at the killed pids. Reproduced with real processes: the worker killed,
both children alive. Now the kill takes the members in the group, those in a session the worker
leads, and every descendant of these; the standby (the trainer's child, not the worker's) lives.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from waiting import alive, sigkill_all, wait_for

from hangwatch.supervisor.contain.killer import TreeKiller
from hangwatch.supervisor.contain.launcher import Reaper
from hangwatch.supervisor.watch.proctree import ProcessTree

# The worker: a child in a group of its own, one in a session of its own, and one of those with a
# child of its own; their pids to argv[1]. Then it hangs.
WORKER = r"""
import os, subprocess, sys, time
own_group = subprocess.Popen(["sleep", "60"], process_group=0)
own_session = subprocess.Popen([sys.executable, "-c",
    "import subprocess, sys, time\n"
    "c = subprocess.Popen(['sleep', '60'], process_group=0)\n"
    "open(sys.argv[1], 'w').write(str(c.pid))\n"
    "time.sleep(60)\n", sys.argv[1] + ".grandchild"], start_new_session=True)
while not os.path.exists(sys.argv[1] + ".grandchild"):
    time.sleep(0.01)
grandchild = open(sys.argv[1] + ".grandchild").read()
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write(f"{own_group.pid} {own_session.pid} {grandchild}")
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
time.sleep(60)
"""


@pytest.mark.timeout(60)
def test_the_engine_level_kill_takes_the_workers_children_that_left_its_group(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    worker = subprocess.Popen([sys.executable, "-c", WORKER, str(pids)], start_new_session=True)
    standby = subprocess.Popen(["sleep", "60"], start_new_session=True)
    children: list[int] = []
    try:
        wait_for(pids.exists, timeout=30, what="the worker's children started")
        children = [int(p) for p in pids.read_text().split()]
        tree = ProcessTree()  # this test process is the supervisor: the worker and the standby are its children
        report = TreeKiller(tree, Reaper(tree).reap).kill(grace=0, kill_timeout=5, pgids=frozenset({worker.pid}))
        worker.wait(10)
        wait_for(lambda: not any(alive(p) for p in children), timeout=10,
                 what="the worker's children that left its group killed with it")
        assert report is not None and report.confirmed
        assert set(report.pids) == {worker.pid, *children}
        assert alive(standby.pid), "the standby is not the worker's: it lives on"
    finally:
        for proc in (worker, standby):
            proc.kill()
            proc.wait(10)
        sigkill_all(children)
