"""Joining a multi-node cohort at the start of ``hangwatch run`` (docs/multinode.md).

``cohort_membership`` finds this node's place and checks the multi-node options before
anything is written; ``join_cohort`` connects to the store and waits for every node. A
stop during the join (it may wait minutes) ends it and tells the other nodes; a stop
just after it is held in ``PENDING_STOP`` until the run's own handlers replay it.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import signal
import sys
from pathlib import Path
from typing import Any

from hangwatch.cli.errors import UsageError
from hangwatch.cli.rundir import note_not_started
from hangwatch.diagnostics.across_nodes import culprit_across
from hangwatch.supervisor.config import MAX_SECONDS


def cohort_membership(args: argparse.Namespace, config: Any) -> Any:
    """This node's place in a multi-node cohort (None for a single-node run), checked before
    anything is written: a mistake in the multi-node options is a usage error, not a run."""
    from hangwatch.supervisor.cohort.membership import joined_before, membership_from  # noqa: PLC0415

    _check_cohort_numbers(args)
    try:
        membership = membership_from(os.environ, endpoint=getattr(args, "cohort", None),
                                     node_rank=getattr(args, "node_rank", None), nnodes=getattr(args, "nnodes", None),
                                     cohort_id=getattr(args, "cohort_id", None))
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    joined = joined_before(config.run_dir / "journal.jsonl") if getattr(args, "resume", None) is not None else None
    if getattr(args, "resume", None) is not None and (membership is not None or joined is not None):
        # A whole job is resumed on every node, each with its cohort options again (they are not saved
        # settings); a node resumed alone ran as a single node, its launcher waiting for a rendezvous.
        node = f" (this run was node {joined.get('node_rank')} of {joined.get('nnodes')})" if joined else ""
        if membership is None:
            raise UsageError(f"--resume is not supported for a multi-node cohort{node} without its cohort options: "
                             "resume every node of the job together, each with its --cohort, --node-rank and "
                             "--nnodes given again")
        if joined is None or (joined.get("node_rank"), joined.get("nnodes")) != (membership.node_rank, membership.nnodes):
            was = f"this run was node {joined.get('node_rank')} of {joined.get('nnodes')}" if joined else \
                "this run was not a multi-node cohort node"
            raise UsageError(f"--resume with --node-rank {membership.node_rank} --nnodes {membership.nnodes}: {was}; "
                             "resume each node's own run with its own rank")
    if membership is None:
        rank = getattr(args, "node_rank", None)
        if rank:  # this node would run alone as if it were node 0: its peers wait for a node that never joins
            raise UsageError(f"--node-rank {rank}: no multi-node cohort is set up (no --nnodes above 1, --cohort, "
                             "Slurm or NNODES); add --nnodes N --cohort HOST:PORT, or drop --node-rank")
    return membership


def join_cohort(args: argparse.Namespace, config: Any, log: Any, membership: Any,
                 checkpoint_given: str | None = None) -> Any:
    """Multi-node: join the cohort of per-node supervisors (None for a single-node run)."""
    from hangwatch.supervisor.cohort.errors import CohortError, JoinStopped  # noqa: PLC0415
    from hangwatch.supervisor.cohort.launcher import runs_launcher  # noqa: PLC0415
    from hangwatch.supervisor.cohort.membership import barrier_timeout, settings_fingerprint  # noqa: PLC0415
    from hangwatch.supervisor.cohort.node import Cohort  # noqa: PLC0415
    from hangwatch.supervisor.cohort.store import StoreError, TCPStoreClient  # noqa: PLC0415
    import time  # noqa: PLC0415

    if membership is None:
        return None
    if config.on_hang == "observe":
        # The nodes answer an incident together (docs/multinode.md): one node watching only while the
        # others restart would split the job. Observe-only is for a single-node run for now.
        raise UsageError("--on-hang observe is for a single-node run: a multi-node job's nodes answer each "
                         "incident together; drop --on-hang observe, or watch one node on its own first")
    # A job resumes on every node or on none: one node from scratch while the others resume splits it.
    fingerprint = {**settings_fingerprint(config, membership.nnodes, checkpoint_given), "resumed": getattr(args, "resume", None) is not None}
    from hangwatch.supervisor.cohort.values import load_secret  # noqa: PLC0415

    try:  # before the join: a secret file anyone may read is refused, as a usage error
        secret = load_secret(getattr(args, "cohort_secret_file", None), os.environ)
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    from hangwatch.supervisor.cohort.launcher import rendezvous_port  # noqa: PLC0415

    if secret is not None and rendezvous_port(config.command) == membership.port:
        # torchrun would share the store (its node 0 finds the port taken and connects as a client),
        # but the authenticated store takes only hangwatch's nodes: every launcher would be refused.
        raise UsageError(f"--cohort port {membership.port} is also the launcher's rendezvous port: with a cohort "
                         "secret the store takes only hangwatch's own nodes, and the launcher's rendezvous would be "
                         f"refused; give --cohort another port (for example {membership.port + 1 if membership.port < 65535 else membership.port - 1})")
    lease = float(getattr(args, "lease_timeout", 15.0))
    join = float(getattr(args, "join_timeout", None) or 120.0)
    started = time.monotonic()

    # The join may wait minutes for the other nodes: a stop then ends it, and the others are told
    # (the default action killed this node unsaid, and they waited out their join timeout or lease).
    def stopped(signum: int, _frame: Any) -> None:
        _hold_stops()  # a second signal during the goodbye is not a second interruption
        raise JoinStopped(signum)

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, stopped)
    log.info("cohort", message=(f"node {membership.node_rank} of {membership.nnodes}; cohort store "
                                f"{membership.endpoint}" + (" (hosted here)" if membership.is_leader else "")
                                + ("; records authenticated with the job's secret" if secret else
                                   "; unauthenticated (no --cohort-secret-file or $HANGWATCH_COHORT_SECRET)")))
    cohort = None
    try:
        store = TCPStoreClient(membership.host, membership.port, master=membership.is_leader,
                               timeout=max(2.0, lease / 3), connect_timeout=join,  # as long as the join waits
                               secret=secret)
        cohort = Cohort(store, membership, fingerprint, lease_interval=max(0.2, lease / 10), lease_timeout=lease,
                        barrier_timeout=barrier_timeout(config), launcher=runs_launcher(config.command),
                        secret=secret)
        cohort.name_culprit = culprit_across  # every node names the rank that holds the job up
        cohort.join(timeout=join, spent=time.monotonic() - started)  # reaching the store counts: one bound in all
        _hold_stops()  # joined: a stop now waits for the run's handlers, which replay it
    except JoinStopped as exc:
        _hold_stops()
        told = False
        if cohort is not None:
            with contextlib.suppress(Exception):
                told = cohort.leave_joining(exc.signum)
        if "store" in locals():
            store.close()
        raise StoppedJoining(exc.signum, told) from None
    except (StoreError, CohortError) as exc:
        _hold_stops()
        if "store" in locals():
            store.close()
        raise UsageError(f"--cohort: {exc}") from exc
    return cohort


PENDING_STOP: list[int] = []  # signals held while the join ends, before the run's own handlers


def _hold_stops() -> None:
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda signum, _frame: PENDING_STOP.append(signum))


class StoppedJoining(Exception):
    def __init__(self, signum: int, told: bool) -> None:
        super().__init__(signum)
        self.signum, self.told = signum, told


def stopped_joining(run_dir: Path, signum: int, told: bool) -> int:
    """This node was stopped while it joined the cohort: why on stderr and in the run directory
    (``hangwatch status`` reads it where there is no journal yet), exit 128 + the signal."""
    name = signal.Signals(signum).name
    why = f"stopped by {name} while joining the cohort; " + (
        "the other nodes were told" if told else "no other node had been reached (they wait out their join timeout)")
    print(f"hangwatch: {why}", file=sys.stderr)
    note_not_started(run_dir, why, exit_code=128 + signum)
    return 128 + signum



def _check_cohort_numbers(args: argparse.Namespace) -> None:
    """Refused when given, cohort or not: a value that cannot be meant is never silently ignored."""
    nnodes = getattr(args, "nnodes", None)
    if nnodes is not None and nnodes < 1:
        raise UsageError(f"--nnodes {nnodes}: must be at least 1 (the number of nodes, one hangwatch run on each)")
    lease = getattr(args, "lease_timeout", None)
    if lease is not None and not (math.isfinite(lease) and 0 < lease <= MAX_SECONDS):
        raise UsageError(f"--lease-timeout {lease:g}: must be a positive number of seconds, at most {MAX_SECONDS:.0f} "
                         "(default 15)")
    join = getattr(args, "join_timeout", None)
    if join is not None and not (math.isfinite(join) and 0 < join <= MAX_SECONDS):
        raise UsageError(f"--join-timeout {join:g}: must be a positive number of seconds, at most {MAX_SECONDS:.0f} "
                         "(default 120)")
