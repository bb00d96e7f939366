"""A guardian that is killed is replaced as soon as it dies, not at the keeper's next poll.

Polled once a second, the keeper left the tree unguarded for up to that second more than a new
guardian's start (0.09 s here). A ``kill -9`` of the guardian and then of the supervisor 0.2 s later
(tree walk, real processes) left the stopped root, its children and two escaped workers alive;
3 s later, nothing. The keeper now waits on the guardian's stdout, which reads EOF the moment it
is gone."""

from __future__ import annotations

import signal
import subprocess

import psutil
import pytest
from waiting import wait_for

from hangwatch.supervisor import guardian


@pytest.mark.timeout(60)
def test_a_killed_guardian_is_replaced_at_its_death_not_at_the_next_poll() -> None:
    events: list[tuple[str, str]] = []
    keeper = guardian.start()
    member = subprocess.Popen(["sleep", "60"])
    try:
        keeper.send({"members": [[member.pid, psutil.Process(member.pid).create_time()]]})
        first = keeper.proc
        keeper.keep_armed(lambda event, message: events.append((event, message)), every=600.0)
        first.send_signal(signal.SIGKILL)
        wait_for(lambda: keeper.proc is not first and keeper.armed(), timeout=20,
                 what="a new guardian armed when the old one died (the poll is 600 s away)")
        assert [e for e, _ in events] == ["guardian_rearmed"]
        keeper._stopping.set()  # no re-arm from here: the pipe's end below is our "death"
        keeper.proc.stdin.close()
        member.wait(15)
        assert member.returncode == -signal.SIGKILL, "the new guardian was told the tree and killed it"
    finally:
        member.kill()
        member.wait(10)
        guardian.stop(keeper)
