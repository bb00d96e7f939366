"""``hangwatch run [options] -- COMMAND...``: supervise a training command.

The order matters: settings first (``--resume`` enters the run's working directory),
then everything that can be refused as a usage error (the probe, the cohort options)
before the run directory is written, then the join, the Supervisor and its effects.
"""

from __future__ import annotations

import argparse
import os

from hangwatch.cli.cohort_join import PENDING_STOP, StoppedJoining, cohort_membership, join_cohort, stopped_joining
from hangwatch.cli.errors import UsageError
from hangwatch.cli.rundir import note_not_started
from hangwatch.cli.run_settings import run_settings
from hangwatch.cli.run_wiring import (contain, default_capture_hook, open_run_dir, prewarm, resume_state, route_stops,
                                      start_guardian, start_log, supervise)
from hangwatch.contract.private import check_import_path
from hangwatch.contract.tools import abort_running_tools
from hangwatch.supervisor.config import build, build_operate, save_values


def cmd_run(args: argparse.Namespace) -> int:
    from hangwatch.cli import operate  # noqa: PLC0415  (keep `hangwatch --help` fast)
    from hangwatch.supervisor.contain import guardian  # noqa: PLC0415
    from hangwatch.supervisor.watch.probes import ProbeError, make_probe  # noqa: PLC0415
    from hangwatch.supervisor.runner import Supervisor  # noqa: PLC0415
    from hangwatch.supervisor.contain.tree_ops import LocalTree  # noqa: PLC0415

    # Twice: the interpreter made PYTHONPATH's relative and empty entries absolute at its start (our
    # own lazy imports), and the helpers we start resolve them in the directory --resume enters.
    check_import_path(os.environ.get("PYTHONPATH"))  # before it is used: a lazy import, a helper's start
    values, command, resume_dir, explicit = run_settings(args)  # --resume enters the run's working directory
    check_import_path(os.environ.get("PYTHONPATH"))
    config = build(values, command, explicit=explicit)
    operate_config = build_operate(values)
    try:
        probe, probe_note = make_probe(config.gpu_probe)
    except ProbeError as exc:
        raise UsageError(str(exc)) from exc

    run_dir = config.run_dir
    membership = cohort_membership(args, config)  # a usage error here leaves no run directory behind
    open_run_dir(run_dir, resumed=resume_dir is not None, given=values.get("run_dir"))
    values["run_dir"] = str(run_dir)
    save_values(run_dir, values, command, cwd=os.getcwd())
    log = start_log(run_dir, probe_note)
    state, lost = resume_state(run_dir, log) if resume_dir is not None else (None, None)

    try:
        cohort = join_cohort(args, config, log, membership, values.get("checkpoint_dir"))
    except UsageError as exc:
        note_not_started(run_dir, f"refused while joining the cohort: {exc}")
        raise
    except StoppedJoining as exc:
        return stopped_joining(run_dir, exc.signum, exc.told)
    supervisor = Supervisor(config, probe, default_capture_hook(), state=state, cohort=cohort)
    if lost is not None:
        log.warning("attempt_lost", message=f"attempt {lost} was left open by the dead supervisor: journaled as supervisor_lost")
    ops = operate.start(config, operate_config, supervisor.state.run_id, probe.name, log)
    supervisor.journal, supervisor.observer = ops.journal, ops.observer  # status file, alerts, metrics
    route_stops(supervisor, PENDING_STOP)
    containment = contain(supervisor, config, log, resumed=resume_dir is not None)
    prewarm(supervisor, config)
    keeper, guardian_state = start_guardian(supervisor, log)
    log.info("run_dir", message=f"run directory: {run_dir}")
    try:
        return supervise(supervisor, config, log, resumed=resume_dir is not None, guardian_state=guardian_state,
                         containment=containment)
    finally:
        abort_running_tools()  # an abandoned capture's py-spy would otherwise hold our exit up
        ops.close()  # bounded: queued alerts get NOTIFY_DRAIN_S at most
        if keeper is not None:
            guardian.stop(keeper)
        if isinstance(supervisor.tree, LocalTree):
            supervisor.tree.close()
        if cohort is not None:
            cohort.close()
        probe.close()
