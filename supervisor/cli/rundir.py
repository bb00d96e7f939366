"""One live supervisor per run directory, and an honest journal across supervisors.

* ``lock``: the supervisor holds an exclusive ``flock`` on ``RUN_DIR/supervisor.lock``
  for its whole life. Two supervisors on one directory would share ``tree.json``
  and kill each other's trainers; the kernel drops the lock when the holder
  dies, SIGKILL included, so a stale lock cannot block ``--resume``.
* ``refuse_existing``: ``run`` on a directory that already holds a journal would
  append a second run to it; finished runs get a new directory, interrupted
  ones (a dead supervisor, a stop, checkpoints that could not be listed) ``--resume``.
* ``close_lost_attempt``: on ``--resume``, the attempt the dead supervisor was
  watching gets its ``attempt_ended`` (kind ``supervisor_lost``), so no reader
  shows it "running" forever.
* ``note_not_started``: a run that stopped before its journal began (refused while
  joining its cohort, stopped during the join) says why in ``not_started.json``,
  which ``hangwatch status`` reads where there is no journal.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hangwatch.contract.atomic import write_file
from hangwatch.contract.capped import open_regular, read_capped
from hangwatch.contract.exitcodes import EXIT_CHECKPOINTS, EXIT_COHORT, EXIT_USAGE
from hangwatch.contract.errors import ConfigError
from hangwatch.contract.journal import Journal, fold_journal, read_journal
from hangwatch.contract.private import open_private
from hangwatch.contract.terminal import one_line

LOCK_NAME = "supervisor.lock"
LOST = "supervisor_lost"
NOT_STARTED = "not_started.json"  # why a run stopped before its journal began (status reads it)


class RunDirBusy(ConfigError):
    """Another live supervisor holds the run directory."""


def lock(run_dir: Path) -> int:
    """Take the run directory for this process; returns the fd to keep open (never inherited)."""
    path = run_dir / LOCK_NAME
    fd = open_private(path, os.O_RDWR | os.O_CREAT)  # never through a link: it is truncated and written
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _read_pid(fd)
        os.close(fd)
        raise RunDirBusy(
            f"{run_dir} is in use by a live supervisor{f' (pid {holder})' if holder else ''}: two supervisors on "
            "one run directory would kill each other's trainers; stop that one first, or use another --run-dir"
        ) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def held_by_live_supervisor(run_dir: Path) -> bool | None:
    """True if a live supervisor holds the lock, False if none does, None if the
    directory has no lock file (a run from before the lock existed)."""
    try:
        # Only a regular file, never through a link, and no device opened even for an instant:
        # root's `hangwatch status` on another user's run dir opened whatever their lock-file link
        # named (a FIFO, reproduced; their terminal, or /dev/watchdog); a FIFO also hung open().
        fd = open_regular(run_dir / LOCK_NAME, follow_symlinks=False)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # also drops our shared lock
    return False


def _read_pid(fd: int) -> int | None:
    try:
        return int(os.pread(fd, 32, 0).decode().strip() or 0) or None
    except (OSError, ValueError):
        return None


def refuse_existing(run_dir: Path) -> None:
    """``run --run-dir`` on a directory that already holds a run: refused with the way forward."""
    journal = run_dir / "journal.jsonl"
    if not journal.exists():
        return
    try:
        run = fold_journal(read_journal(journal))
        finished, cohort = run.finished, run.cohort is not None
    except (OSError, ValueError):
        finished, cohort = None, False
    if finished is not None and resumable_finish(finished, cohort=cohort):
        raise ConfigError(
            f"--run-dir {run_dir} already holds a run that was {_ended_how(finished)}; continue it from its newest "
            f"checkpoint with hangwatch run --resume {run_dir}, or give a new --run-dir"
        )
    if finished is not None:
        raise ConfigError(
            f"--run-dir {run_dir} already holds a finished run ({finished.get('outcome')}, exit "
            f"{finished.get('exit_code')}); give a new --run-dir (its journal is never appended to)"
        )
    raise ConfigError(
        f"--run-dir {run_dir} already holds a run that did not finish; continue it with "
        f"hangwatch run --resume {run_dir}, or give a new --run-dir"
    )


def resumable_finish(finished: Mapping[str, Any], *, cohort: bool) -> bool:
    """Whether a finished run may go on with ``--resume``: one that was stopped (SIGINT, SIGTERM,
    SIGHUP: a user, a scheduler preempting the job), one that stopped because its checkpoints
    could not be listed (76: access fixed, it resumes), and a cohort node's that stopped with its
    cohort (75: the job resumes on every node). Not a success, nor a give-up of the restart
    policy: those start a new run."""
    code = finished.get("exit_code")
    return (finished.get("outcome") == "interrupted" or code == EXIT_CHECKPOINTS
            or (cohort and code == EXIT_COHORT))


def _ended_how(finished: Mapping[str, Any]) -> str:
    if finished.get("outcome") == "interrupted":
        return f"stopped ({finished.get('reason') or 'a signal'}, exit {finished.get('exit_code')})"
    return f"ended with exit {finished.get('exit_code')} ({finished.get('reason') or finished.get('outcome')})"


def close_lost_attempt(run_dir: Path, killed: list[int]) -> int | None:
    """Journal the end of the attempt a dead supervisor left open; returns its number."""
    path = run_dir / "journal.jsonl"
    records = read_journal(path)
    run = fold_journal(records)
    open_attempts = [a for a in run.attempts if a.outcome is None]
    if not open_attempts or not records:
        return None
    attempt = max(open_attempts, key=lambda a: a.attempt)
    pids = run.supervisor_pids
    who = f"pid {pids[-1]}" if pids else "the supervisor"
    Journal(path, run.run_id or str(records[0].get("run_id", ""))).append(
        "attempt_ended",
        attempt=attempt.attempt,
        kind=LOST,
        exit_code=None,
        signal=None,
        reason=(f"{who} died while this attempt ran; --resume killed {len(killed)} leftover process(es)"
                if killed else f"{who} died while this attempt ran; nothing of its tree was left"),
        killed=killed,
        duration_s=None,
        start_step=attempt.start_step,
        end_step=None,
        evidence_path=None,
    )
    return attempt.attempt


def note_not_started(run_dir: Path, why: str, exit_code: int = EXIT_USAGE) -> None:
    with contextlib.suppress(OSError):
        write_file(run_dir / NOT_STARTED, json.dumps({"why": one_line(why)[:2000], "exit_code": exit_code}).encode())


def read_not_started(run_dir: Path) -> str | None:
    try:  # status reads run dirs other users may write: a regular file only (a FIFO hung it), capped
        record = json.loads(read_capped(run_dir / NOT_STARTED, 8192))
        return f"{one_line(str(record['why']))[:2000]} (exit {int(record['exit_code'])})"
    except (OSError, ValueError, TypeError, KeyError):
        return None
