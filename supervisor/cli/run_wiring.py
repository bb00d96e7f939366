"""Building a run from its config: the run directory, the Supervisor and the effects around it.

``hangwatch run`` calls these in order: open (or, on ``--resume``, take over) the run
directory, inject the diagnostics capture, put the tree under containment, start the
guardian, then supervise. The supervisor never imports diagnostics: the capture is
injected here, at the top.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hangwatch.contract.capture import CaptureHook

from hangwatch.cli.errors import UsageError
from hangwatch.contract.exitcodes import EXIT_INTERNAL, EXIT_USAGE
from hangwatch.contract.private import private_dir


def open_run_dir(run_dir: Path, *, resumed: bool, given: str | None = None) -> None:
    """Create (0700) or check the run dir, lock it for this process's life, refuse a used one."""
    from hangwatch.cli import rundir  # noqa: PLC0415
    from hangwatch.contract.private import check_ancestors  # noqa: PLC0415

    leads = f"--run-dir {given}: " if given and Path(os.path.abspath(Path(given).expanduser())) != run_dir else ""
    try:
        if given:
            check_ancestors(Path(given).expanduser(), "run directory")  # as written: a link on the way counts
        private_dir(run_dir, f"{leads}run directory")  # refuses a directory another user controls
    except OSError as exc:
        raise UsageError(f"--run-dir {run_dir}: cannot create it: {exc}") from exc
    try:
        rundir.lock(run_dir)  # held for this process's life; the kernel drops it even on SIGKILL
    except OSError as exc:
        raise UsageError(f"--run-dir {run_dir}: cannot lock it: {exc}") from exc
    if not resumed:
        rundir.refuse_existing(run_dir)


def start_log(run_dir: Path, probe_note: str | None) -> Any:
    """The run's log (RUN_DIR/hangwatch.log and the console), with what the run goes without."""
    from hangwatch.cli import logsetup  # noqa: PLC0415
    from hangwatch.supervisor.contain import launcher  # noqa: PLC0415

    logsetup.configure(run_dir / "hangwatch.log")
    import structlog  # noqa: PLC0415

    log = structlog.get_logger("hangwatch.cli")
    if probe_note:
        log.warning("gpu_detection_off", message=probe_note)
    if not launcher.set_child_subreaper():
        log.warning("no_subreaper", message="PR_SET_CHILD_SUBREAPER unavailable: escaped processes may be missed")
    return log


def resume_state(run_dir: Path, log: Any) -> tuple[Any, int | None]:
    """Kill what the dead supervisor left, close its open attempt, and rebuild the run's state."""
    from hangwatch.cli import rundir  # noqa: PLC0415
    from hangwatch.supervisor.runner import load_state  # noqa: PLC0415
    from hangwatch.contract.journal import read_journal  # noqa: PLC0415
    from hangwatch.supervisor.contain.left_behind import kill_left_behind, resume_marks  # noqa: PLC0415
    from hangwatch.supervisor.contain.members_file import recorded  # noqa: PLC0415

    try:  # what escaped after the last tick, should the guardian have died too (an unreadable journal: below)
        marks = resume_marks(read_journal(run_dir / "journal.jsonl"), str(run_dir))
    except (OSError, ValueError):
        marks = []
    killed = kill_left_behind(recorded(run_dir / "tree.json"), marks)  # as its guardian would have
    if killed:
        log.warning("orphans_killed", message=f"killed {len(killed)} survivor(s) of the previous supervisor: {killed}")
    try:
        lost = rundir.close_lost_attempt(run_dir, killed)
        return load_state(run_dir), lost
    except (OSError, ValueError) as exc:
        raise UsageError(f"--resume {run_dir}: cannot read the journal: {exc}") from exc


def route_stops(supervisor: Any, pending: list[int]) -> None:
    """SIGINT, SIGTERM and SIGHUP stop the run, SIGCONT says it was suspended; ``pending``: stops
    that came after the cohort join, before these handlers, replayed now."""
    import signal  # noqa: PLC0415

    # In a cohort a stop on this node stops every node, and another node's stop stops this one.
    stop = supervisor.cohort.bind_stop(supervisor.request_stop) if supervisor.cohort is not None else supervisor.request_stop
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, stop)
    signal.signal(signal.SIGCONT, supervisor.note_continued)  # a suspended job: that time is not silence
    for sig in pending[:1]:  # a stop that came after the join, before the handlers above
        stop(sig, None)


def prewarm(supervisor: Any, config: Any) -> None:
    """The next attempt's launcher process started ahead: by default for launchers known not to
    touch the GPU at import, with --prewarm-launcher for any, with --no-prewarm-launcher never."""
    from hangwatch.supervisor.contain.tree_ops import LocalTree  # noqa: PLC0415

    if not isinstance(supervisor.tree, LocalTree):
        return
    if config.prewarm_launcher is False:
        supervisor.tree.cold_reason = "prewarming is off (--no-prewarm-launcher)"
        return
    from hangwatch.supervisor.contain.prewarm import Prewarmer  # noqa: PLC0415

    def journal(event: str, fields: dict) -> None:
        supervisor.journal.append(event, attempt=supervisor.state.attempt, **fields)

    supervisor.tree.prewarm = Prewarmer(config.prewarm_import, clock=supervisor.tree.clock, notify=journal,
                                        mode="on" if config.prewarm_launcher else "auto")


def start_guardian(supervisor: Any, log: Any) -> tuple[Any, str]:
    """The guardian (kills the tree if we are SIGKILLed), and what to journal about it."""
    from hangwatch.supervisor.contain import guardian  # noqa: PLC0415
    from hangwatch.supervisor.contain.tree_ops import LocalTree  # noqa: PLC0415

    keeper = guardian.start(later=True)  # one that does not arm now is tried again (keep_armed)
    exc = keeper.start_error
    if exc is not None:
        log.warning("guardian_unavailable", message=(
            f"{exc}: if this supervisor is SIGKILLed, processes that left the trainer's session "
            "will not be killed; hangwatch run --resume kills them later (another start is tried in a second, then after 10 s, doubling to 10 min)"))
    if isinstance(supervisor.tree, LocalTree):
        supervisor.tree.attach_guardian(keeper.send, keeper.armed)  # the tree goes over the pipe, not through a file

    def guardian_event(event: str, message: str) -> None:
        (log.warning if event == "guardian_rearmed" else log.error)(event, message=message)
        try:
            supervisor.journal.append(event, pid=keeper.proc.pid if keeper.proc is not None else None, message=message)
        except Exception:  # noqa: BLE001  (a journal that cannot be written is the main loop's to report)
            pass

    keeper.keep_armed(guardian_event)  # a guardian that dies is replaced (a user's kill, the OOM killer)
    return keeper, "armed" if exc is None else f"unavailable: {exc}"


def supervise(supervisor: Any, config: Any, log: Any, *, resumed: bool, guardian_state: str,
               containment: Any) -> int:
    """Run; a failure of hangwatch itself kills the tree and ends the journal (exit 70)."""
    from hangwatch.contract.journal import JournalError  # noqa: PLC0415
    from hangwatch.supervisor.contain import launcher  # noqa: PLC0415

    try:
        return supervisor.run(resumed=resumed, guardian=guardian_state, containment=containment)
    except launcher.LaunchError as exc:
        if supervisor.cohort is not None:  # the other nodes read why this one left (docs/multinode.md)
            supervisor.cohort.gave_up(str(exc))
        supervisor.journal.append("run_finished", outcome="launch_failed", exit_code=EXIT_USAGE, reason=str(exc),
                                  attempts=supervisor.state.attempt)
        raise UsageError(str(exc)) from exc
    except Exception as exc:
        if supervisor.cohort is not None:
            supervisor.cohort.gave_up(f"hangwatch failed on node {supervisor.cohort.node_rank}: "
                                      f"{type(exc).__name__}: {exc}")
        if isinstance(exc, JournalError):
            # Supervising without a record breaks the promise that every decision is
            # on disk (and the disk is likely full): stop cleanly instead.
            log.error("journal_failed", message=f"{exc}; killing the tree and stopping (exit {EXIT_INTERNAL})")
        else:
            log.exception("internal_error", message=f"hangwatch failed: {exc}")
        try:
            supervisor.tree.kill(grace=config.kill.grace, kill_timeout=config.kill.kill_timeout)
        finally:
            try:
                supervisor.journal.append("run_finished", outcome="internal_error", exit_code=EXIT_INTERNAL,
                                          reason=f"{type(exc).__name__}: {exc}", attempts=supervisor.state.attempt)
            except JournalError:
                pass  # already reported above; nothing more can be recorded
        return EXIT_INTERNAL


def contain(supervisor: Any, config: Any, log: Any, resumed: bool = False) -> str:
    """Put the real tree under kernel containment where possible; returns which was used."""
    from hangwatch.supervisor.contain.cgroup import CgroupError, detect, kill_stale  # noqa: PLC0415
    from hangwatch.supervisor.contain.tree_ops import LocalTree  # noqa: PLC0415

    if not isinstance(supervisor.tree, LocalTree):
        return "tree"
    if resumed:
        killed = kill_stale(supervisor.state.run_id)
        if killed:
            log.warning("orphans_killed", message=f"killed {len(killed)} process(es) left in the previous "
                                                  f"supervisor's cgroups: {killed}")
    try:
        containment, why_not = detect(config.containment, supervisor.state.run_id)
    except CgroupError as exc:
        raise UsageError(f"{exc} (--containment auto falls back to the process-tree walk where no cgroup can be "
                         "used; --containment tree always uses it)") from exc
    supervisor.tree.containment = containment
    if containment is None and config.containment == "auto":
        log.warning("no_cgroup_containment", message=(
            f"kernel containment unavailable ({why_not}); falling back to the process-tree walk: a process "
            "forked and escaped in the instant before a SIGKILL of this supervisor can survive it"))
    return supervisor.tree.containment_name


def default_capture_hook() -> "CaptureHook":
    """The full diagnostics capture (py-spy stacks, process table, GPU state, logs).

    Injected into the supervisor here, at the top, so the supervisor never
    imports diagnostics; if it fails at run time the supervisor falls back to
    the samples-only capture by itself.
    """
    from hangwatch.diagnostics.capture import IncidentCapture  # noqa: PLC0415

    return IncidentCapture()  # also offers early_round: the first stacks while a hang builds
