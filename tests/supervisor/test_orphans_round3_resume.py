"""``--resume`` after the supervisor and its guardian both died (one ``kill -9`` of every hangwatch
process, a node's OOM kill, the guardian killed and the supervisor within the second before its
replacement armed).

``tree.json`` names only what a tick saw. With the tree walk the root stays stopped (its
parent-death signal), but its children run on and fork: what they started after the last tick
without the attempt's mark (an ``exec`` with an empty environment, ``setproctitle``) survived the
resume, which killed only the recorded and the marked. Measured end to end (guardian and
supervisor SIGKILLed together, then ``--resume``): 6 of the first attempt's 15 processes were left,
each an env-less ``sleep`` of a recorded child, reparented to init. The resume now kills as the
guardian does: the recorded members stopped first, their sessions and groups, the marked, and every
descendant of those.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
from waiting import alive, sigkill_all, wait_for

from hangwatch.contract.journal import Journal
from hangwatch.supervisor.contain.members_file import TreeFile

# A recorded child of the trainer: it forks an env-less ``sleep`` in its own session (not
# recorded, no mark) and one in its group, then waits, as a data loader that respawns would.
CHILD = r"""
import os, subprocess, sys, time
a = subprocess.Popen(["sleep", "60"], env={})
b = subprocess.Popen(["sleep", "60"], env={}, start_new_session=True)
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write(f"{a.pid} {b.pid}\n")
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
time.sleep(60)
"""


class _Log:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def warning(self, event: str, **fields) -> None:
        self.lines.append(f"{event}: {fields.get('message', '')}")


@pytest.mark.timeout(60)
def test_resume_kills_what_recorded_members_forked_after_the_last_tick_without_a_mark(tmp_path: Path) -> None:
    from hangwatch.cli.run_wiring import resume_state

    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    journal = Journal(run / "journal.jsonl", "r3")
    journal.append("run_started", pid=999999, command=["x"], run_dir=str(run))
    journal.append("attempt_started", attempt=1, pid=999999, create_time=0.0, argv=["x"],
                   env={"HANGWATCH_ATTEMPT_DIR": str(run / "attempts" / "attempt-001")})
    pids = tmp_path / "pids"
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(pids)], start_new_session=True,
                             env={k: v for k, v in os.environ.items() if not k.startswith("HANGWATCH_")})
    forked: list[int] = []
    try:
        wait_for(pids.exists, timeout=30, what="the child forked")
        forked = [int(p) for p in pids.read_text().split()]
        TreeFile(run / "tree.json").update([psutil.Process(child.pid)])  # the last tick saw only the child
        log = _Log()
        resume_state(run, log)
        child.wait(10)
        wait_for(lambda: not any(alive(p) for p in forked), timeout=10,
                 what="what the recorded child forked after the last tick killed")
        assert child.returncode == -signal.SIGKILL
        lost = [json.loads(line) for line in (run / "journal.jsonl").read_text().splitlines()][-1]
        assert lost["event"] == "attempt_ended" and set(lost["killed"]) >= {child.pid, forked[0]}
    finally:
        child.kill()
        child.wait(10)
        sigkill_all(forked)
