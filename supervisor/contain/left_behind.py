"""``--resume``: kill what a dead supervisor left, when its guardian died with it.

The guardian (``guardian_process``) kills the tree when the supervisor dies; when both died
at once (one ``kill -9``, the node's OOM kill), the resumed run does it before its first
attempt, from the dead supervisor's ``tree.json`` and journal, as the guardian would have.
"""

from __future__ import annotations

import os
from typing import Any, Mapping, Sequence

import psutil

from hangwatch.contract.env import ATTEMPT_DIR
from hangwatch.contract.procid import ProcKey, same_process
from hangwatch.supervisor.contain.guardian import MARK_SLACK_S
from hangwatch.supervisor.contain.guardian_process import groups_and_sessions, kill_state


def kill_left_behind(members: Sequence[ProcKey], marks: Sequence[tuple[str, float]], grace: float = 2.0) -> list[int]:
    """``--resume``: kill what a dead supervisor left, as its guardian would have (for when the
    guardian died too: both killed by one ``kill -9``, the node's OOM kill, a guardian killed and
    the supervisor within the second before its replacement armed). ``members``: ``tree.json``'s,
    which name only what a tick saw; ``marks``: ``resume_marks``. Killing just those left what was
    forked after the last tick without a mark (an ``exec`` with an empty environment,
    ``setproctitle``) alive: with the tree walk the root stays stopped and its children run on,
    forking. So, as the guardian does: the recorded members stopped first, then everything in the
    sessions and groups they are in now (which only our tree's processes can be in: the root
    started its own session) born since the first of them, the marked, and every descendant of
    those, all stopped before the kill. Never the caller or its ancestors (a shell that inherited a
    mark). Returns the pids signalled."""
    live = [k for k in members if same_process(k) is not None]
    groups, sessions = groups_and_sessions(k.pid for k in live)
    state = {"members": [[k.pid, k.create_time] for k in live], "groups": sorted(groups),
             "sessions": sorted(sessions), "marks": [[m, since] for m, since in marks]}
    return kill_state(state, grace, spare=_caller_and_ancestors())


def _caller_and_ancestors() -> set[int]:
    try:
        return {os.getpid(), *(p.pid for p in psutil.Process().parents())}
    except psutil.Error:
        return {os.getpid(), os.getppid()}


def resume_marks(records: Sequence[Mapping[str, Any]], run_dir: str) -> list[tuple[str, float]]:
    """``--resume``: the marks of a dead supervisor's attempts, from its journal, for when its
    guardian died with it (a node's OOM kill, a kill of every process the user owns).
    ``tree.json`` names only what a tick saw; what was forked and escaped after the last one
    (a new session, so no parent-death signal reaches it) still carries its attempt's mark.
    Each mark is ``HANGWATCH_ATTEMPT_DIR=<the dir>`` as the attempt's environment had it, kept
    only when that dir is one of ``run_dir``'s attempts (the journal names the path; a path
    elsewhere is no mark of this run's), born since the run's first record."""
    if not records:
        return []
    try:
        since = float(records[0].get("ts", 0.0)) - MARK_SLACK_S
        attempts = os.path.realpath(os.path.join(run_dir, "attempts"))
    except (TypeError, ValueError, OSError):
        return []
    marks = []
    for record in records:
        env = record.get("env") if record.get("event") == "attempt_started" else None
        value = env.get(ATTEMPT_DIR) if isinstance(env, dict) else None
        if isinstance(value, str) and value and os.path.dirname(os.path.realpath(value)) == attempts:
            marks.append((f"{ATTEMPT_DIR}={value}", since))
    return marks
