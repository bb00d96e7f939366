"""The process table a capture writes: a trainer's command line never forges a row or an escape."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest


@pytest.mark.timeout(30)
def test_a_command_line_never_forges_a_row_or_an_escape_in_the_process_table():
    """A trainer chooses its own argv: a newline in it forged a pid-1 row in processes.txt."""
    import psutil

    from hangwatch.contract.capture import TreeProcess
    from hangwatch.diagnostics.proctable import process_table, render_table

    forged = "\n      1       0       1       1 S -   0.0   0.0    1  /sbin/init\x1b[2J"
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", forged])
    try:
        p = psutil.Process(proc.pid)
        # Just after exec the child's command line reads empty for a moment: wait for its own, bounded.
        deadline = time.monotonic() + 20
        while p.cmdline()[-1:] != [forged]:
            assert time.monotonic() < deadline, p.cmdline()
            time.sleep(0.01)
        rows = process_table([TreeProcess(proc.pid, p.create_time(), p.ppid(), os.getpgid(proc.pid),
                                          os.getsid(proc.pid), p.name(), tuple(p.cmdline()))])
    finally:
        proc.kill()
        proc.wait()
    text = render_table(rows)
    assert len(text.splitlines()) == 2 and "\x1b" not in text, text
    assert rows[0]["cmdline"][-1] == forged  # processes.json keeps it as it was
