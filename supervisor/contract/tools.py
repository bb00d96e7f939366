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
from typing import IO, Mapping, Sequence

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
    run_as: tuple[int, int] | None = None,
    pass_fds: Sequence[int] = (),
) -> ToolResult:
    """Run ``argv`` for at most ``timeout`` seconds. Never raises for a tool problem:
    a missing binary, a timeout or a non-zero exit come back as data.

    ``run_as``: (uid, gid) to drop to first (root running a program another user controls).
    ``pass_fds``: descriptors the tool inherits (a binary opened by us, run as ``/proc/self/fd/N``)."""
    started = time.monotonic()
    drop: dict[str, object] = {} if run_as is None else {"user": run_as[0], "group": run_as[1], "extra_groups": []}
    try:
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=dict(env) if env is not None else None,
            start_new_session=True,
            pass_fds=tuple(pass_fds),
            **drop,  # type: ignore[arg-type]
        )
    except OSError as exc:
        return ToolResult(tuple(argv), None, "", "", time.monotonic() - started, error=f"{argv[0]}: {exc.strerror or exc}")
    with _helpers_lock:
        HELPER_PIDS.add(proc.pid)
        _RUNNING_TOOLS.add(proc.pid)
    try:
        # Each pipe is drained into at most max_output bytes (the rest is read and dropped):
        # communicate() would hold all of it, and a tool that floods its output (a hostile
        # trainer's stacks, a fake interpreter) would take the supervisor's memory.
        out, err = _Drain(proc.stdout, max_output), _Drain(proc.stderr, max_output)
        deadline = started + max(0.01, timeout)
        timed_out = not _finished(proc, (out, err), deadline)
        if timed_out:
            _kill_group(proc.pid)
            # A process in uninterruptible sleep survives SIGKILL for a while;
            # give up on the rest of its output rather than wait.
            _finished(proc, (out, err), time.monotonic() + 2.0)
        return ToolResult(
            tuple(argv),
            proc.returncode,
            out.text(),
            err.text(),
            time.monotonic() - started,
            timed_out=timed_out,
            error=f"{argv[0]} did not finish within {timeout:.1f} s" if timed_out else None,
        )
    finally:
        with _helpers_lock:
            HELPER_PIDS.discard(proc.pid)
            _RUNNING_TOOLS.discard(proc.pid)


class _Drain:
    """Reads one pipe to its end in a thread, keeping the first ``cap`` bytes."""

    def __init__(self, stream: IO[bytes] | None, cap: int) -> None:
        self._chunks: list[bytes] = []
        self._cap = cap
        self.thread = threading.Thread(target=self._run, args=(stream,), name="tool-output", daemon=True)
        self.thread.start()

    def _run(self, stream: IO[bytes] | None) -> None:
        if stream is None:
            return
        kept = 0
        with stream:
            while True:
                chunk = stream.read1(1 << 16)  # type: ignore[attr-defined]
                if not chunk:
                    return
                if kept < self._cap:
                    self._chunks.append(chunk[: self._cap - kept])
                    kept += len(self._chunks[-1])

    def text(self) -> str:
        return b"".join(self._chunks).decode("utf-8", "replace")


def _finished(proc: subprocess.Popen[bytes], drains: tuple[_Drain, ...], deadline: float) -> bool:
    """True once the process exited and closed its output, before ``deadline``."""
    try:
        proc.wait(timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        return False
    for drain in drains:
        drain.thread.join(max(0.0, deadline - time.monotonic()))
    return not any(d.thread.is_alive() for d in drains)


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
