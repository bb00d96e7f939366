"""The guardian: kills the tree if the supervisor itself dies.

A supervisor that is SIGKILLed (OOM killer, a scheduler's hard kill) runs no
cleanup. The trainer dies with it through its parent-death signal, but
processes that escaped into their own sessions would be orphaned, holding GPU
memory. The guardian is a tiny separate process that blocks reading a pipe
from the supervisor; the kernel closes the pipe when the supervisor dies,
however it dies, and the guardian then kills what ``tree.json`` recorded.

Usage (by the supervisor only): ``python -m supervisor.guardian TREE_JSON``
with stdin connected to a pipe the supervisor holds open.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from supervisor.tools import HELPER_PIDS, _helpers_lock
from supervisor.treefile import kill_recorded


def start(tree_json: Path) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-m", "supervisor.guardian", str(tree_json)],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        start_new_session=True,
    )
    # Never part of the supervised tree: not sampled, not captured, not killed.
    with _helpers_lock:
        HELPER_PIDS.add(proc.pid)
    return proc


def stop(proc: subprocess.Popen, timeout: float = 5.0) -> None:
    """Normal shutdown: closing the pipe is the same signal as our death."""
    try:
        if proc.stdin is not None:
            proc.stdin.close()
        proc.wait(timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        proc.kill()
    with _helpers_lock:
        HELPER_PIDS.discard(proc.pid)


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    tree_json = Path(argv[0])
    while sys.stdin.buffer.read(65536):
        pass  # the supervisor never writes; EOF means it closed the pipe or died
    killed = kill_recorded(tree_json)
    if killed:
        print(f"hangwatch guardian: supervisor gone; killed {killed}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    os.environ.pop("HANGWATCH_HEARTBEAT", None)
    sys.exit(main(sys.argv[1:]))
