"""The guardian: its replacement when killed, the sessions it sweeps, its mark check, its re-arm delay.

A guardian that is killed is replaced as soon as it dies, not at the keeper's next poll.

Polled once a second, the keeper left the tree unguarded for up to that second more than a new
guardian's start (0.09 s here). A ``kill -9`` of the guardian and then of the supervisor 0.2 s later
(tree walk, real processes) left the stopped root, its children and two escaped workers alive;
3 s later, nothing. The keeper now waits on the guardian's stdout, which reads EOF the moment it
is gone."""

from __future__ import annotations

import signal
import subprocess
import sys

import psutil
import pytest
from waiting import alive, sigkill_all, wait_for

from hangwatch.supervisor.contain import guardian, guardian_process
import os
import time
from hangwatch.supervisor.contain.guardian_process import _carries


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


# A member of the tree that hands off to a bare worker with a double fork and does not reap the
# intermediate (a SIGTERM handler that forks and goes on, a daemonising helper): the worker's
# parent is gone at once (to the supervisor, then to init), so no descendant walk reaches it.
HAND_OFF = r"""
import os, sys, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execve("/bin/sh", ["sh", "-c", "echo $$ > " + sys.argv[1] + ".tmp; mv " + sys.argv[1] + ".tmp "
                  + sys.argv[1] + "; exec sleep 60"], {})
    os._exit(0)
time.sleep(60)
"""


@pytest.mark.timeout(60)
def test_the_guardian_kills_a_worker_whose_intermediate_is_gone_through_the_session_it_leads(tmp_path) -> None:
    """Measured with the tree walk (random SIGKILLs of the supervisor during kills whose SIGTERM
    handlers hand off this way): 3 of 8 runs left such a worker alive, then 1 of 5."""
    pidfile = tmp_path / "worker"
    member = subprocess.Popen([sys.executable, "-c", HAND_OFF, str(pidfile)], start_new_session=True, env={})
    worker = 0
    try:
        wait_for(pidfile.exists, timeout=30, what="the worker started")
        worker = int(pidfile.read_text())
        assert psutil.Process(worker).ppid() != member.pid
        killed = guardian_process.kill_state({"members": [[member.pid, psutil.Process(member.pid).create_time()]]})
        assert worker in killed
        wait_for(lambda: not alive(worker), timeout=10, what="the handed-off worker killed")
        member.wait(10)
    finally:
        member.kill()
        member.wait(10)
        sigkill_all([worker] if worker else [])


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


def test_the_guardians_session_sweep_never_takes_a_session_whose_leader_pid_was_reused(monkeypatch):
    """The guardian takes every process of a session a found process leads. Whether it leads one
    was asked of its pid alone: a found process gone (a zombie reaped by its parent outside the
    tree) whose pid now belongs to another session's leader made that stranger's whole session
    ours. Here the reuse is simulated: the pid of a process of ours that exited 'leads' the
    session a stranger is in."""
    import os
    import subprocess

    import psutil

    from hangwatch.supervisor.contain import guardian_process as guardian

    gone = subprocess.Popen(["true"])
    found = psutil.Process(gone.pid)  # found while it lived
    gone.wait()
    stranger = subprocess.Popen(["sleep", "60"], start_new_session=True)
    real_getsid = os.getsid

    def getsid(pid: int) -> int:
        if pid in (gone.pid, stranger.pid):
            return gone.pid  # the pid reused by the stranger's session leader
        return real_getsid(pid)

    monkeypatch.setattr(guardian.os, "getsid", getsid)
    try:
        taken = guardian._stopped_led_sessions([found])
        assert stranger.pid not in {p.pid for p in taken}
    finally:
        stranger.kill()
        stranger.wait()


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_a_stopped_guardian_is_not_armed_and_is_resumed_and_journaled() -> None:
    """A SIGSTOPped guardian counted as armed: with the supervisor then SIGKILLed, an escaped worker
    ran on until the guardian got SIGCONT. It is not armed while stopped; the keeper resumes it."""
    events: list[tuple[str, str]] = []
    keeper = guardian.start()
    try:
        keeper.keep_armed(lambda event, message: events.append((event, message)), every=0.5)
        first = keeper.proc
        first.send_signal(signal.SIGSTOP)
        wait_for(lambda: guardian.is_stopped(first.pid), timeout=5, what="the guardian stopped")
        wait_for(lambda: [e for e, _ in events] == ["guardian_resumed"], timeout=10,
                 what="the stopped guardian resumed and journaled")
        assert keeper.armed() and keeper.proc is first and not guardian.is_stopped(first.pid)
        assert "SIGCONT" in events[0][1]
    finally:
        guardian.stop(keeper)


def test_a_process_stopped_is_seen_stopped() -> None:
    proc = subprocess.Popen(["sleep", "30"])
    try:
        assert not guardian.is_stopped(proc.pid)
        proc.send_signal(signal.SIGSTOP)
        wait_for(lambda: guardian.is_stopped(proc.pid), timeout=5, what="stopped")
    finally:
        proc.kill()
        proc.wait(10)
    assert not guardian.is_stopped(proc.pid)
