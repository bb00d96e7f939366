"""A run dir whose path holds bytes that are not UTF-8 must not crash the guardian's mark check."""

import os
import subprocess
import sys
import time

import psutil
import pytest

from hangwatch.supervisor.guardian import _carries

pytestmark = pytest.mark.timeout(30)


def test_a_mark_that_is_not_utf8_is_matched_not_a_crash(tmp_path):
    attempt_dir = os.fsdecode(os.fsencode(str(tmp_path)) + b"/run-\xff/attempts/attempt-001")
    env = {"PATH": os.environ.get("PATH", ""), "HANGWATCH_ATTEMPT_DIR": attempt_dir}
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], env=env)
    try:
        born = psutil.Process(child.pid).create_time()
        marks = [(f"HANGWATCH_ATTEMPT_DIR={attempt_dir}", born - 1)]
        deadline = time.monotonic() + 10
        while not _carries(child.pid, born, marks):  # before the exec its environ is still ours
            assert time.monotonic() < deadline, "the child's environ never showed the mark"
            time.sleep(0.05)
    finally:
        child.kill()
        child.wait()
