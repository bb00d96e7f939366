"""Polling with a deadline, for tests that wait on real processes and files."""

from __future__ import annotations

import time


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
