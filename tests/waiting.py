"""Polling with a deadline, for tests that wait on real processes and files, and the few
process checks they poll."""

from __future__ import annotations

import os
import signal
import time

import psutil


def wait_for(predicate, timeout: float = 20.0, what: str = "condition") -> None:
    """Poll ``predicate`` until true; a file caught mid-write (OSError, ValueError) counts as not yet."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if predicate():
                return
        except (OSError, ValueError):
            pass
        time.sleep(0.05)
    raise AssertionError(f"{what} not reached in {timeout} s")


def alive(pid: int) -> bool:
    """Running (a zombie is dead: only its parent's wait is missing)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def sigkill_all(pids) -> None:
    """SIGKILL each of ``pids`` that is still there (a test's clean-up)."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
