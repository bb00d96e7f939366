"""The guardian: kills the tree if the supervisor itself dies.

A supervisor that is SIGKILLed (OOM killer, a scheduler's hard kill) runs no
cleanup. The trainer dies with it through its parent-death signal, but
processes that escaped into their own sessions would be orphaned, holding GPU
memory. The guardian is a tiny separate process that blocks reading a pipe
from the supervisor; the kernel closes the pipe when the supervisor dies,
however it dies, and the guardian then kills what ``tree.json`` recorded.

Usage (by the supervisor only): ``python -m hangwatch.supervisor.guardian TREE_JSON``
with stdin connected to a pipe the supervisor holds open.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
from pathlib import Path

from hangwatch.contract.pyexec import module_command
from hangwatch.contract.tools import HELPER_PIDS, _helpers_lock
from hangwatch.supervisor.treefile import kill_recorded


ARMED = b"armed\n"


class GuardianError(RuntimeError):
    """The guardian could not be started or did not report itself armed."""


def start(tree_json: Path, timeout: float = 10.0) -> subprocess.Popen:
    """Start the guardian and wait (at most ``timeout``) until it says it is armed.

    Raises ``GuardianError`` when it cannot start or does not confirm: the
    caller must then say that a SIGKILLed supervisor would leave orphans.
    """
    try:
        proc = subprocess.Popen(
            module_command("hangwatch.supervisor.guardian") + [str(tree_json)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            start_new_session=True,
        )
    except OSError as exc:
        raise GuardianError(f"cannot start the guardian: {exc}") from exc
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    line = os.read(proc.stdout.fileno(), len(ARMED)) if ready else b""
    if line != ARMED:
        proc.kill()
        proc.wait(timeout=timeout)
        why = f"it exited with {proc.returncode}" if line == b"" and ready else f"no confirmation within {timeout:g} s"
        raise GuardianError(f"the guardian did not arm ({why})")
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
    # Armed from here on: whatever ends our stdin makes us kill the recorded tree.
    os.write(sys.stdout.fileno(), ARMED)
    while sys.stdin.buffer.read(65536):
        pass  # the supervisor never writes; EOF means it closed the pipe or died
    killed = kill_recorded(tree_json)
    if killed:
        print(f"hangwatch guardian: supervisor gone; killed {killed}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    os.environ.pop("HANGWATCH_HEARTBEAT", None)
    sys.exit(main(sys.argv[1:]))
