"""The run journal: every decision, one JSON object per line, appended with fsync.

Append-only and fsynced per record, so after a crash (of the supervisor, the
machine, the disk) every decision that was acted on is on disk, and a reader
at most sees a torn last line, which ``read_journal`` skips.

Schema (all records have ``event``, ``ts`` (wall-clock seconds) and
``run_id``); see docs/journal.md for the fields of each event. ``fold_journal``
is the one reader that turns records into a run's story; the supervisor's
``--resume`` and ``hangwatch status`` both use it.
"""

from __future__ import annotations

import errno
import json
import math
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

from hangwatch.contract.capped import open_capped
from hangwatch.contract.private import open_private

EVENTS = (
    "run_started",
    "run_resumed",
    "attempt_started",
    "first_heartbeat",
    "trainer_info",
    "incident",
    "capture",
    "kill",
    "gpu_released",
    "attempt_ended",
    "restart_scheduled",
    "run_finished",
    "notify_failed",  # an alert could not be delivered (hangwatch.supervisor.operate.notify)
    "cohort_joined",
    "cohort_incident",
    "cohort_agreed",
    "cohort_culprit",  # the process holding a multi-node job up, named alike on every node from all nodes' stacks
    "member_lost",
    "cohort_unauthenticated",  # multi-node without a secret: anyone who reaches the store can forge records
    "cohort_value_ignored",  # a store value no node of this job wrote (or too large, deep...): ignored, once per key
    "cohort_store_binds_all",  # node 0's store listens on every interface (the --cohort host is not this machine's)
    "disk_low",  # free space under --min-free-mb (once a run; hangwatch.supervisor.operate.longrun)
    "incidents_pruned",  # bundles removed by --keep-incidents
    "recovery",  # the recovery level chosen for a hang verdict, and why (before any kill)
    "engine_restart",  # level-1 recovery: only the rollout engine's worker was killed
    "engine_recovered",  # the trainer progressed again after an engine restart
    "guardian_rearmed",  # the guardian died while we ran; a new one was started (hangwatch.supervisor.contain.guardian)
    "guardian_resumed",  # the guardian was stopped (SIGSTOP): resumed with SIGCONT
    "guardian_lost",  # the guardian died and no new one could be started
    "would_act",  # --on-hang observe: what the recovery would have been (nothing was killed)
    "recovered_by_itself",  # --on-hang observe: the trainer moved on after an incident not acted on
    "timeout_learned",  # --progress-timeout auto: a progress timeout learned from the beats' intervals, and its inputs
    "prewarm_ready",  # the next attempt's warm launcher is ready: pid, RSS, imports (hangwatch.supervisor.contain.prewarm)
    "prewarm_discarded",  # the next attempt's warm launcher was killed unused: it loaded a GPU library, and why
)


class JournalError(RuntimeError):
    """The journal could not be written; the supervisor cannot keep its record."""


class Journal:
    def __init__(self, path: Path, run_id: str) -> None:
        self.path = path
        self.run_id = run_id
        self._lock = threading.Lock()
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)

    def append(self, event: str, **fields: Any) -> dict[str, Any]:
        if event not in EVENTS:
            raise ValueError(f"unknown journal event {event!r}")
        record = {"event": event, "ts": round(time.time(), 4), "run_id": self.run_id, **fields}
        line = json.dumps(record, default=str, separators=(",", ":")) + "\n"
        with self._lock:
            try:
                # Never through a symlink, always 0600 and ours (see contract.private).
                fd = open_private(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
                try:
                    _write_whole(fd, line.encode())
                finally:
                    os.close(fd)
            except OSError as exc:
                raise JournalError(f"cannot append to {self.path}: {exc}") from exc
        return record


def _write_whole(fd: int, data: bytes) -> None:
    """Append ``data`` whole and fsync it, or leave the file as it was.

    A short write (a full disk) would leave a fragment that the next record is
    appended onto, losing both lines to the reader; so on any failure the file
    is truncated back to where this record began.
    """
    start = os.lseek(fd, 0, os.SEEK_END)
    done = 0
    try:
        while done < len(data):
            n = os.write(fd, data[done:])
            if n <= 0:
                raise OSError(errno.ENOSPC, "short write")
            done += n
        os.fsync(fd)
    except OSError:
        if done:
            try:
                os.ftruncate(fd, start)
            except OSError:
                pass  # the reader still skips the torn last line
        raise


def read_journal(path: Path) -> list[dict[str, Any]]:
    return list(iter_journal(path))


# A record is a few KiB at most (a kill lists its pids, a capture its paths). A longer
# line is no record of ours, and a journal over the total cap is no journal: both are
# refused without being read whole (a 3 GiB line, or a link to /dev/zero, would take all
# memory; a FIFO would block: the file is opened without waiting and must be regular).
MAX_LINE_BYTES = 1 << 20
MAX_JOURNAL_BYTES = 1 << 30


def iter_journal(path: Path) -> Iterator[dict[str, Any]]:
    fd = open_capped(path, MAX_JOURNAL_BYTES, what="a journal may have")
    with open(fd, "rb") as handle:
        read = 0
        while read <= MAX_JOURNAL_BYTES:
            raw = handle.readline(MAX_LINE_BYTES + 1)
            if not raw:
                return
            read += len(raw)
            if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
                read += _skip_line(handle)  # no record of ours: skipped like a torn one, never held whole
                continue
            record = parse_record(raw)
            if record is not None:
                yield record


# `status` and `report` read run dirs other users may write; a journal's 1 GiB of small
# records was 1.7 GB of dicts per 200 MB read (8 GB at the cap). They keep its first and
# its last records up to this weight each (bytes, plus a dict's or list's or value's share
# for each `{`, `[` and `,`: what the parsed record holds, not what the line is long), and
# say how many bytes between them they did not read. A real run's journal is far under it.
MAX_SHOWN_WEIGHT = 16 << 20
_VALUE_WEIGHT = 64


def record_weight(raw: bytes) -> int:
    """About what a parsed line holds in memory, from its bytes (counted in C: no parse)."""
    return len(raw) + _VALUE_WEIGHT * (raw.count(b"{") + raw.count(b"[") + raw.count(b","))


def read_journal_bounded(path: Path, budget: int | None = None) -> tuple[list[dict[str, Any]], int]:
    """The journal's first records and its last ones, each up to ``budget`` weight, and the bytes
    between them left unread (0: every record). Memory and time stay bounded whatever the
    file holds; a journal under the budget reads exactly as ``read_journal``."""
    budget = MAX_SHOWN_WEIGHT if budget is None else budget
    fd = open_capped(path, MAX_JOURNAL_BYTES, what="a journal may have")
    with open(fd, "rb") as handle:
        head: list[dict[str, Any]] = []
        weight = 0
        pos = 0
        while pos <= MAX_JOURNAL_BYTES:  # it may grow as it is read (a live run, or a hostile writer)
            raw = handle.readline(MAX_LINE_BYTES + 1)
            if not raw:
                return head, 0
            if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
                pos += len(raw) + _skip_line(handle)
                continue
            weight += record_weight(raw)
            if weight > budget:
                break  # this line and what follows: the tail's, or left out
            pos += len(raw)
            record = parse_record(raw)
            if record is not None:
                head.append(record)
        # The last records: the file's last ``budget`` bytes (weight is at least the bytes), from
        # a line's start, newest first for as long as the budget holds; only those are parsed.
        size = max(pos, os.fstat(handle.fileno()).st_size)  # as it is now: it may have grown meanwhile
        start = max(pos, size - budget)
        data = os.pread(handle.fileno(), size - start, start)
        if start > pos and os.pread(handle.fileno(), 1, start - 1) != b"\n":
            cut = data.find(b"\n") + 1  # inside a line: from the next one (none: nothing)
            data, start = (data[cut:], start + cut) if cut else (b"", start + len(data))
        kept: list[bytes] = []
        total, end = 0, len(data)
        while end > 0:
            begin = data.rfind(b"\n", 0, end - 1) + 1  # the line ending at ``end`` (with its newline)
            raw = data[begin:end]
            if len(raw) <= MAX_LINE_BYTES:  # a longer line is no record of ours: skipped
                total += record_weight(raw)
                if total > budget:
                    break  # this line and those before it, back to the head's end: left out
                kept.append(raw)
            end = begin
        tail = [r for r in map(parse_record, reversed(kept)) if r is not None]
        return head + tail, start + end - pos


def _skip_line(handle: Any) -> int:
    skipped = 0
    while skipped <= MAX_JOURNAL_BYTES:
        chunk = handle.readline(MAX_LINE_BYTES)
        skipped += len(chunk)
        if not chunk or chunk.endswith(b"\n"):
            break
    return skipped


def parse_record(raw: bytes) -> dict[str, Any] | None:
    """One journal line as a record, or None when it is not a whole, well-typed record of ours."""
    line = raw.strip()
    if not line:
        return None
    try:
        record = json.loads(line.decode("utf-8"))
    except (ValueError, RecursionError):
        # A torn last line after a crash mid-write; every earlier line is whole.
        # (Undecodable bytes, or a line nested too deeply: no record of ours either.)
        return None
    if isinstance(record, dict) and "event" in record and _well_typed(record):
        return record
    return None


_NUMBERS = ("attempt", "pid", "ts", "exit_code", "start_step", "end_step", "latency_s")
# What a real record can hold: a timestamp a clock can show, a pid the kernel can give.
_HUGE = float(1 << 63)
_RANGES = {"ts": (0, 1e11), "pid": (0, 1 << 31), "attempt": (0, 1 << 31)}


def _well_typed(record: Mapping[str, Any]) -> bool:
    """A record whose fields have the types we write. Anything else (an edited or
    forged line) is skipped like a torn one, so every reader gets records it can fold."""
    if "ts" in record and record["ts"] is None:
        return False  # every record is written with its time; a null one failed every fold
    for name in _NUMBERS:
        value = record.get(name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            return False  # NaN/Infinity too: every reader turns these into ints and times
        low, high = _RANGES.get(name, (-_HUGE, _HUGE))
        if not low <= value < high:
            return False
    if record.get("event") in ("attempt_started", "attempt_ended") and record.get("attempt") is None:
        return False  # an attempt's record names its attempt
    env = record.get("env") or {}
    return (isinstance(record.get("event"), str) and isinstance(env, dict)
            and all(isinstance(v, str) for v in env.values()))


@dataclass
class AttemptRecord:
    attempt: int
    pid: int | None
    started: float
    env: dict[str, str]
    resume_from: str | None = None
    ended: float | None = None
    outcome: str | None = None  # the verdict kind once ended
    exit_code: int | None = None
    reason: str | None = None
    evidence: str | None = None
    start_step: int | None = None
    end_step: int | None = None
    #: the run was stopped (SIGINT/SIGTERM/SIGHUP: a user, a scheduler's preemption) as this
    #: attempt ended: its end says nothing of the trainer
    interrupted: bool = False

    @property
    def judged(self) -> bool:
        """Whether its end is a verdict on the trainer, one the restart policy counts (and a
        restart followed): not one a dead supervisor left (``supervisor_lost``, closed by
        ``--resume``), nor one the run's stop ended (a hang caught before the stop stays one)."""
        if self.outcome is None or self.outcome == "supervisor_lost":
            return False
        return not (self.interrupted and self.outcome in ("stopped", "done"))


@dataclass
class RunRecord:
    run_id: str | None = None
    attempts: list[AttemptRecord] = field(default_factory=list)
    incidents: list[dict[str, Any]] = field(default_factory=list)
    stalls: int = 0
    finished: dict[str, Any] | None = None
    supervisor_pids: list[int] = field(default_factory=list)
    #: the last ``restart_scheduled`` when no attempt started after it (the supervisor died in the backoff)
    pending_restart: dict[str, Any] | None = None
    #: the graph policy decided since the last ``attempt_started`` (``recovery``, a level-1
    #: ``engine_restart``, ``restart_scheduled``: ``cudagraphs``, ``enforce_eager``), the latest
    #: winning; None when none was (the last attempt's start environment still holds)
    decided_policy: dict[str, Any] | None = None
    #: a stall incident (the graph wedge) after which no policy was decided: the supervisor died
    #: between the incident and its recovery (during the capture, mostly)
    unanswered_stall: bool = False
    #: multi-node: this node's membership (``cohort_joined``) and the cohort's decisions, in order
    cohort: dict[str, Any] | None = None
    cohort_events: list[dict[str, Any]] = field(default_factory=list)
    #: the wall time of the last engine restart that was carried out (``engine_restart`` not
    #: ``ok: false``): the engine retry window counts from it, across ``--resume`` too
    last_engine_restart_ts: float | None = None
    #: --on-hang observe: incidents the trainer moved on from by itself (``recovered_by_itself``)
    recovered_by_itself: int = 0
    #: --progress-timeout auto: the last ``timeout_learned`` record (the value and its inputs), carried
    #: to the next attempt and across ``--resume``
    learned_timeout: dict[str, Any] | None = None


def fold_journal(records: Sequence[Mapping[str, Any]]) -> RunRecord:
    """A run's story from its records, tolerant of missing optional fields."""
    run = RunRecord(run_id=records[0].get("run_id") if records else None)
    by_number: dict[int, AttemptRecord] = {}
    for r in records:
        event = r.get("event")
        if event in ("run_started", "run_resumed"):
            run.supervisor_pids.append(int(r.get("pid") or 0))
            run.finished = None  # a cohort node's run that stopped with its cohort (75) is resumed with the job
        elif event == "attempt_started":
            a = AttemptRecord(int(r["attempt"]), r.get("pid"), float(r.get("ts", 0.0)), dict(r.get("env") or {}),
                              r.get("resume_from"))
            by_number[a.attempt] = a
            run.attempts.append(a)
            run.pending_restart = run.decided_policy = None
            run.unanswered_stall = False
        elif event == "attempt_ended" and int(r.get("attempt", -1)) in by_number:
            a = by_number[int(r["attempt"])]
            a.ended, a.outcome, a.exit_code = float(r.get("ts", 0.0)), r.get("kind"), r.get("exit_code")
            a.reason, a.evidence = r.get("reason"), r.get("evidence_path")
            a.start_step, a.end_step = r.get("start_step"), r.get("end_step")
        elif event == "incident":
            run.incidents.append({k: r.get(k) for k in ("attempt", "kind", "reason", "latency_s", "ts")})
            if r.get("kind") == "stall":
                run.stalls += 1
                # A same wedge's incident (another rank's engine stuck under the old policy) decides none,
                # nor does one observed only (--on-hang observe keeps the policy).
                run.unanswered_stall = run.unanswered_stall or not (r.get("same_wedge") or r.get("observe_only"))
            if r.get("observe_only"):
                run.incidents[-1]["observe_only"] = True
        elif event == "capture" and run.incidents and r.get("evidence_path") \
                and run.incidents[-1].get("attempt") == r.get("attempt") and "evidence_path" not in run.incidents[-1]:
            # Each incident's own bundle: an attempt with engine-level restarts has several.
            run.incidents[-1]["evidence_path"] = r["evidence_path"]
        elif event == "restart_scheduled":
            run.pending_restart = dict(r)
        elif event in ("would_act", "recovered_by_itself") and run.incidents \
                and run.incidents[-1].get("attempt") == r.get("attempt"):
            # The incident it follows (observe-only mode): what would have been done, and its end.
            if event == "would_act":
                run.incidents[-1]["would_act"] = {k: r.get(k) for k in ("level", "scope", "reason", "cudagraphs",
                                                                        "enforce_eager", "would_kill")}
            else:
                run.recovered_by_itself += 1
                run.incidents[-1]["recovered_after_s"] = r.get("after_s")
        if event == "timeout_learned" and isinstance(r.get("timeout_s"), (int, float)):
            run.learned_timeout = {k: v for k, v in r.items() if k not in ("run_id", "event")}
        if event == "engine_restart" and r.get("ok", True) is not False and isinstance(r.get("ts"), (int, float)):
            run.last_engine_restart_ts = float(r["ts"])
        if event in ("recovery", "engine_restart", "restart_scheduled") and r.get("cudagraphs") in ("on", "off") \
                and r.get("ok", True) is not False:
            run.decided_policy = {"cudagraphs": r["cudagraphs"], "enforce_eager": bool(r.get("enforce_eager"))}
            run.unanswered_stall = False
        elif event == "run_finished":
            run.finished = {k: r.get(k) for k in ("outcome", "exit_code", "reason", "ts")}
            if r.get("outcome") == "interrupted" and run.attempts:
                run.attempts[-1].interrupted = True
        elif event == "cohort_joined":
            run.cohort = {k: r.get(k) for k in ("node_rank", "nnodes", "cohort_id", "store", "hosts_store")}
        elif event in ("cohort_incident", "cohort_agreed", "cohort_culprit", "member_lost"):
            run.cohort_events.append({k: v for k, v in r.items() if k not in ("run_id", "reports", "suspect_evidence")})
    return run
