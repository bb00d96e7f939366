"""The generator's own kill of its worker (close, a timed-out call) takes the worker's
descendants that left its process group too: a child that called setsid() outlived a group
kill, holding its (GPU) memory. Real processes; no engine is started."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import psutil
import pytest

from hangwatch.generator.process import WorkerProcess

pytestmark = pytest.mark.timeout(60)

# The "worker": leads its own group (as the real one: start_new_session), starts a child that
# leaves the group with setsid() and ignores SIGTERM, prints the child's pid, then waits.
WORKER = r"""
import os, signal, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c",
    "import os, signal, time; os.setsid(); signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    "print('ready', flush=True); time.sleep(60)"], stdout=subprocess.PIPE, text=True)
child.stdout.readline()
print(child.pid, flush=True)
time.sleep(60)
"""


def test_a_worker_child_that_left_the_group_is_killed_with_the_worker(tmp_path):
    worker = WorkerProcess("fake", {}, log_dir=str(tmp_path))
    worker.proc = subprocess.Popen([sys.executable, "-c", WORKER], stdout=subprocess.PIPE, text=True,
                                   start_new_session=True)
    escaped = int(worker.proc.stdout.readline())
    child = psutil.Process(escaped)
    try:
        assert os.getpgid(escaped) != worker.proc.pid, "the child left the worker's group"
        exit = worker.kill(grace_s=0.3, confirm_s=10.0)
        assert exit.escalated_to_sigkill
        assert not child.is_running() or child.status() == psutil.STATUS_ZOMBIE, \
            "the child that left the worker's group outlived its kill"
    finally:
        if child.is_running():
            child.send_signal(signal.SIGKILL)
        if worker.proc.poll() is None:
            worker.proc.kill()
        worker.proc.wait(timeout=10)
