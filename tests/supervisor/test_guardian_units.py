"""The guardian's small decisions: its mark check on paths that are not UTF-8, its re-arm delay."""

import os
import subprocess
import sys
import time

import psutil
import pytest

from hangwatch.supervisor.contain.guardian_process import _carries

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


def test_a_guardian_that_never_starts_is_retried_less_and_less_often():
    """Every 10 s for a multi-day run was a Python start and a journal record each time."""
    from hangwatch.supervisor.contain.guardian import rearm_delay

    delays = [rearm_delay(n, 10.0, 600.0) for n in range(1, 12)]
    assert delays[:4] == [10.0, 20.0, 40.0, 80.0]
    assert delays[-1] == 600.0 and all(a <= b for a, b in zip(delays, delays[1:]))
    assert rearm_delay(10_000, 10.0, 600.0) == 600.0, "no overflow after days of failures"
