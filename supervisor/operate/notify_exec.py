"""Runs one ``--notify-command`` try, and everything it starts, inside a deadline.

Why a process of its own: the supervisor is a child subreaper and treats its
descendants as the trainer's tree. A notify command run straight from it was
therefore captured as the trainer (its command line in the incident bundle),
killed with the trainer's tree, and a daemon it left behind (``curl ... &``,
a ``setsid`` helper) was re-parented to the supervisor, counted as the next
attempt's process, and never bounded by the alert's timeout.

This runner is itself a subreaper: whatever the command forks, however it
leaves its session or group, stays below the runner, which the supervisor
registers as a helper (left out of the tree, with its whole subtree). The try
ends when the shell and every process it started have ended; at the deadline
everything still running below the runner is SIGKILLed and reaped.

Usage (by the supervisor only)::

    python -P -m hangwatch.supervisor.operate.notify_exec TIMEOUT_S COMMAND

The event JSON comes in ``HANGWATCH_EVENT_JSON`` (removed before the command
runs) and is written to the command's stdin. The command's stderr is the
runner's; its stdout goes to /dev/null. The runner prints one JSON line on its
own stdout: ``{"status": N | null, "timed_out": bool, "killed": N,
"lingered": bool}``, where a negative status is the signal that ended the shell.
Standard library only: it starts for every alert.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
import threading
import time

from hangwatch.supervisor.watch.proctree import scan_proc

PR_SET_CHILD_SUBREAPER = 36
PAYLOAD_ENV = "HANGWATCH_EVENT_JSON"
_POLL_S = 0.02
_KILL_ROUNDS_S = 2.0  # SIGKILL rounds at the deadline: a forking loop is outrun, a D-state one is not


def _descendants(root: int) -> list[int]:
    """Every process below ``root`` (by parent links, from one pass over /proc)."""
    children: dict[int, list[int]] = {}
    for stat in scan_proc().values():
        children.setdefault(stat.ppid, []).append(stat.pid)
    found, stack = [], list(children.get(root, []))
    while stack:
        pid = stack.pop()
        found.append(pid)
        stack.extend(children.get(pid, []))
    return found


def _reap() -> tuple[list[tuple[int, int]], bool]:
    """Exited children (pid, wait status) collected without blocking; True once none is left."""
    done = []
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return done, True
        if pid == 0:
            return done, False
        done.append((pid, status))


def _feed(pipe, data: bytes) -> None:
    try:
        pipe.write(data)
    except OSError:
        pass  # the command exited without reading it all: judged by its status
    finally:
        try:
            pipe.close()
        except OSError:
            pass


def run(timeout: float, command: str, payload: bytes) -> dict:
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    deadline = time.monotonic() + max(0.0, timeout)
    env = {k: v for k, v in os.environ.items() if k != PAYLOAD_ENV}
    shell = subprocess.Popen(["/bin/sh", "-c", command], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                             env=env)
    # A thread: a command that never reads would block a large write, and the deadline with it.
    threading.Thread(target=_feed, args=(shell.stdin, payload), daemon=True).start()
    status: int | None = None
    while True:
        exited, none_left = _reap()
        for pid, wait_status in exited:
            if pid == shell.pid:
                status = os.waitstatus_to_exitcode(wait_status)
                shell.returncode = status  # reaped here, not by Popen
        if none_left:
            return {"status": status, "timed_out": False, "killed": 0, "lingered": False}
        if time.monotonic() >= deadline:
            break
        time.sleep(_POLL_S)
    killed: set[int] = set()
    stop = time.monotonic() + _KILL_ROUNDS_S
    while time.monotonic() < stop:
        for pid in _descendants(os.getpid()):
            try:
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
            except ProcessLookupError:
                pass  # exited since the scan
        exited, none_left = _reap()
        for pid, wait_status in exited:
            if pid == shell.pid:
                code = os.waitstatus_to_exitcode(wait_status)
                # Exited on its own just before the deadline, or killed by us (no status of its own).
                status = None if code == -signal.SIGKILL and pid in killed else code
        if none_left:
            break
        time.sleep(_POLL_S)
    return {"status": status, "timed_out": status is None, "killed": len(killed),
            "lingered": status is not None and bool(killed)}


def main() -> int:
    timeout, command = float(sys.argv[1]), sys.argv[2]
    payload = os.environ.get(PAYLOAD_ENV, "").encode()
    result = run(timeout, command, payload)
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
