"""Run an external tool (py-spy, nvidia-smi) with a hard deadline.

Every helper the supervisor starts goes through ``run_bounded`` because:
* a wedged tool must never wedge the supervisor: the tool runs in its own
  process group, which is SIGKILLed at the deadline;
* the supervisor is a child subreaper and treats its other children as the
  trainer's tree; helper pids are registered in ``HELPER_PIDS`` while they run
  so the tree scanner leaves them out (and never kills a capture tool as if it
  were part of the run).
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from typing import Mapping, Sequence

HELPER_PIDS: set[int] = set()
_helpers_lock = threading.Lock()
_RUNNING_TOOLS: set[int] = set()  # the subset of HELPER_PIDS started by run_bounded (own process groups)


@dataclass(frozen=True)
class ToolResult:
    argv: tuple[str, ...]
    returncode: int | None
    stdout: str
    stderr: str
    duration_s: float
    timed_out: bool = False
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and not self.timed_out and self.returncode == 0


def add_helper(pid: int) -> None:
    """``pid`` is one of the supervisor's helpers: the tree scanner leaves it out."""
    with _helpers_lock:
        HELPER_PIDS.add(pid)


def forget_helper(pid: int) -> None:
    """``pid`` is no longer a helper (it ended, or it became a member of the tree)."""
    with _helpers_lock:
        HELPER_PIDS.discard(pid)


def helper_pids() -> frozenset[int]:
    with _helpers_lock:
        return frozenset(HELPER_PIDS)


def run_bounded(
    argv: Sequence[str],
    timeout: float,
    *,
    env: Mapping[str, str] | None = None,
    max_output: int = 16 * 1024 * 1024,
) -> ToolResult:
    """Run ``argv`` for at most ``timeout`` seconds. Never raises for a tool problem:
    a missing binary, a timeout or a non-zero exit come back as data."""
    started = time.monotonic()
    try:
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=dict(env) if env is not None else None,
            start_new_session=True,
        )
    except OSError as exc:
        return ToolResult(tuple(argv), None, "", "", time.monotonic() - started, error=f"{argv[0]}: {exc.strerror or exc}")
    with _helpers_lock:
        HELPER_PIDS.add(proc.pid)
        _RUNNING_TOOLS.add(proc.pid)
    try:
        try:
            out, err = proc.communicate(timeout=max(0.01, timeout))
            timed_out = False
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_group(proc.pid)
            try:
                out, err = proc.communicate(timeout=2.0)
            except subprocess.TimeoutExpired:
                # A process in uninterruptible sleep survives SIGKILL for a while;
                # give up on its output rather than wait.
                out, err = b"", b""
        return ToolResult(
            tuple(argv),
            proc.returncode,
            out[:max_output].decode("utf-8", "replace"),
            err[:max_output].decode("utf-8", "replace"),
            time.monotonic() - started,
            timed_out=timed_out,
            error=f"{argv[0]} did not finish within {timeout:.1f} s" if timed_out else None,
        )
    finally:
        with _helpers_lock:
            HELPER_PIDS.discard(proc.pid)
            _RUNNING_TOOLS.discard(proc.pid)


def abort_running_tools() -> list[int]:
    """SIGKILL every tool ``run_bounded`` is still waiting for (the supervisor is exiting:
    an abandoned capture's py-spy must not hold the exit up until its own deadline)."""
    with _helpers_lock:
        pids = sorted(_RUNNING_TOOLS)
    for pid in pids:
        _kill_group(pid)
    return pids


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        # Already gone (the group died on its own between timeout and kill).
        pass
