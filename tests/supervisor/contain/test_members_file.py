"""The members file: a recorded pid that now belongs to another process is never signalled."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import psutil
import pytest

from hangwatch.contract.procid import ProcKey, same_process
from hangwatch.supervisor.contain.members_file import kill_recorded


pytestmark = pytest.mark.timeout(30)


def test_pid_reuse_is_never_signalled(tmp_path):
    """A recorded pid whose create time differs is a different process: leave it alone."""
    victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        real = ProcKey.of(psutil.Process(victim.pid))
        impostor = ProcKey(victim.pid, real.create_time - 100.0)
        assert same_process(impostor) is None
        tree = tmp_path / "tree.json"
        tree.write_text(json.dumps({"members": [{"pid": impostor.pid, "create_time": impostor.create_time}]}))
        assert kill_recorded(tree, grace=0.2) == []
        time.sleep(0.2)
        assert victim.poll() is None, "a process with a reused pid was signalled"
        tree.write_text(json.dumps({"members": [{"pid": real.pid, "create_time": real.create_time}]}))
        assert kill_recorded(tree, grace=5) == [victim.pid]
        assert victim.wait(5) == -signal.SIGKILL
    finally:
        if victim.poll() is None:
            victim.kill()
            victim.wait()
