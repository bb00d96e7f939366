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


pytestmark = pytest.mark.timeout(30)


_DOUBLE_FORK = r"""
import os, sys, time
r, w = os.pipe()
if os.fork() == 0:  # the intermediate: a session of its own, a worker in it, then gone (unreaped)
    os.setsid()
    pid = os.fork()
    if pid == 0:
        os.execvp("sleep", ["sleep", "60"])
    os.write(w, f"{os.getpid()} {pid}\n".encode())
    os._exit(0)
print(os.read(r, 100).decode().strip(), flush=True)
time.sleep(60)  # the engine worker: never reaps its child
"""


def test_the_engine_level_kill_takes_a_double_forked_child_whose_intermediate_led_its_session():
    """The engine worker's child left the worker's group with setsid and forked the real helper
    (a compile server), then exited: the worker has not reaped it, so it is a zombie that still
    leads the helper's session; the helper itself was reparented (to us, the subreaper), so no
    descendant walk reaches it. Sessions were taken only when a member of the worker's *group* led
    one, and a zombie leader did not count: the helper outlived the engine-level kill, holding
    what it held. Every target that leads a session counts, zombie or not (its pid is not free)."""
    import os
    import subprocess
    import sys

    import psutil

    from hangwatch.supervisor.contain.killer import _of_groups

    worker = subprocess.Popen([sys.executable, "-c", _DOUBLE_FORK], stdout=subprocess.PIPE, text=True,
                              start_new_session=True)
    helper_pid = None
    try:
        assert worker.stdout is not None
        middle_pid, helper_pid = map(int, worker.stdout.readline().split())
        middle = psutil.Process(middle_pid)
        wait_for(lambda: middle.status() == psutil.STATUS_ZOMBIE, timeout=10)
        members = [psutil.Process(worker.pid), middle, psutil.Process(helper_pid)]
        stranger = subprocess.Popen(["sleep", "60"], start_new_session=True)  # a session no target leads
        try:
            members.append(psutil.Process(stranger.pid))
            chosen = {p.pid for p in _of_groups(members, frozenset({os.getpgid(worker.pid)}), None, {}, [])}
        finally:
            stranger.kill()
            stranger.wait()
        assert {worker.pid, middle_pid} <= chosen
        assert helper_pid in chosen, "the double-forked helper escaped the engine-level kill"
        assert stranger.pid not in chosen
    finally:
        if helper_pid is not None:
            try:
                os.kill(helper_pid, 9)
            except ProcessLookupError:
                pass
        worker.kill()
        worker.wait()
