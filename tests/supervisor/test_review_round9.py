"""Review round 9: today's non-replay changes, probed in process."""

from __future__ import annotations

import pytest

from hangwatch.supervisor.operate.notify import _held, render

pytestmark = pytest.mark.timeout(30)


def test_an_alerts_own_paths_are_not_redacted_as_text_but_the_trainers_text_is():
    """Each field of an alert is redacted now; the run's paths too, as text: a run under a folder
    named like a key (``sk-2026-experiments``) reached a --notify-command as ``/data/[REDACTED]/...``
    in ``run_dir``, ``bundle`` and ``report``, so a hook that copies the bundle found nothing."""
    run_dir = "/data/sk-2026-experiments/run1"
    token = "hf_abcdefghijklmnopqrstuvwxyzABCDEF12"
    payload = {"event": "incident", "host": "node1", "run_dir": run_dir, "run_id": "c838d032d17e", "attempt": 1,
               "kind": "stall", "reason": "no progress", "phase": f"download {token}", "action": "restarting",
               "bundle": f"{run_dir}/attempt-1/incident-1", "report": f"{run_dir}/attempt-1/incident-1/report.html"}
    event = _held(payload)
    for key in ("run_dir", "bundle", "report", "run_id", "host"):
        assert event[key] == payload[key], key
    assert token not in event["phase"]
    title, body = render(payload)
    assert payload["report"] in body and token not in body


_DOUBLE_FORK = r"""
import os, sys, time
r, w = os.pipe()
if os.fork() == 0:  # the intermediate: a session of its own, a worker in it, then gone (unreaped)
    os.setsid()
    pid = os.fork()
    if pid == 0:
        os.execvp("sleep", ["sleep", "60"])
    os.write(w, f"{os.getpid()} {pid}\n".encode())
    os._exit(0)
print(os.read(r, 100).decode().strip(), flush=True)
time.sleep(60)  # the engine worker: never reaps its child
"""


def test_the_engine_level_kill_takes_a_double_forked_child_whose_intermediate_led_its_session():
    """The engine worker's child left the worker's group with setsid and forked the real helper
    (a compile server), then exited: the worker has not reaped it, so it is a zombie that still
    leads the helper's session; the helper itself was reparented (to us, the subreaper), so no
    descendant walk reaches it. Sessions were taken only when a member of the worker's *group* led
    one, and a zombie leader did not count: the helper outlived the engine-level kill, holding
    what it held. Every target that leads a session counts, zombie or not (its pid is not free)."""
    import os
    import subprocess
    import sys

    import psutil

    from hangwatch.supervisor.contain.killer import _of_groups
    from tests.waiting import wait_for

    worker = subprocess.Popen([sys.executable, "-c", _DOUBLE_FORK], stdout=subprocess.PIPE, text=True,
                              start_new_session=True)
    helper_pid = None
    try:
        assert worker.stdout is not None
        middle_pid, helper_pid = map(int, worker.stdout.readline().split())
        middle = psutil.Process(middle_pid)
        wait_for(lambda: middle.status() == psutil.STATUS_ZOMBIE, timeout=10)
        members = [psutil.Process(worker.pid), middle, psutil.Process(helper_pid)]
        stranger = subprocess.Popen(["sleep", "60"], start_new_session=True)  # a session no target leads
        try:
            members.append(psutil.Process(stranger.pid))
            chosen = {p.pid for p in _of_groups(members, frozenset({os.getpgid(worker.pid)}), None, {}, [])}
        finally:
            stranger.kill()
            stranger.wait()
        assert {worker.pid, middle_pid} <= chosen
        assert helper_pid in chosen, "the double-forked helper escaped the engine-level kill"
        assert stranger.pid not in chosen
    finally:
        if helper_pid is not None:
            try:
                os.kill(helper_pid, 9)
            except ProcessLookupError:
                pass
        worker.kill()
        worker.wait()


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
