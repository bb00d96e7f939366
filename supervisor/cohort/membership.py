"""Who is in the cohort and what every node must share.

``Membership`` (this node's rank, the node count, the store's address and the cohort's
id) from options or the scheduler's environment; the settings fingerprint every node
publishes at join and the checks that refuse a node whose settings differ (pure);
the barrier's deadline from the run's options; the cohort a resumed run had joined.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from hangwatch.contract.journal import iter_journal
from hangwatch.supervisor.cohort.errors import CohortRefused
from hangwatch.supervisor.cohort.values import parse


@dataclass(frozen=True)
class Membership:
    node_rank: int
    nnodes: int
    host: str
    port: int
    cohort_id: str = "hangwatch"

    def __post_init__(self) -> None:
        if self.nnodes < 1 or not 0 <= self.node_rank < self.nnodes:
            raise ValueError(f"--node-rank {self.node_rank} must be in [0, --nnodes {self.nnodes})")
        if not 0 < self.port < 65536:
            raise ValueError(f"--cohort port {self.port} is not a TCP port")

    @property
    def is_leader(self) -> bool:
        return self.node_rank == 0

    @property
    def endpoint(self) -> str:
        """HOST:PORT as it is written, an IPv6 address in brackets ('fd00::5:29600' reads as a port 5)."""
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def membership_from(env: Mapping[str, str], *, endpoint: str | None = None, node_rank: int | None = None,
                    nnodes: int | None = None, cohort_id: str | None = None, default_port: int = 29600) -> Membership | None:
    """The cohort this node belongs to, from options first, then Slurm, then torchrun-style variables.

    None for a single-node run (nothing says there is more than one node).
    """
    def first(*names: str) -> str | None:
        return next((env[n] for n in names if env.get(n)), None)

    rank = node_rank if node_rank is not None else _int(first("SLURM_NODEID", "NODE_RANK", "GROUP_RANK"), "node rank")
    count = nnodes if nnodes is not None else _int(first("SLURM_NNODES", "NNODES"), "node count")
    if count is None or count <= 1:
        if endpoint is None:
            if node_rank is None and nnodes is None and rank:  # (--node-rank alone: the CLI says so in its words)
                # NODE_RANK=1 with no node count (Lightning-style variables: NODE_RANK and WORLD_SIZE): this
                # node ran alone, unwatched by the others, the very split a cohort exists to prevent.
                name = next(n for n in ("SLURM_NODEID", "NODE_RANK", "GROUP_RANK") if env.get(n))
                raise ValueError(f"the environment's {name}={env[name]} says this is node {rank} of a multi-node job, "
                                 f"but no node count above 1 is set (SLURM_NNODES, NNODES or --nnodes): this node would "
                                 f"be watched alone; add --nnodes N --cohort HOST:PORT, or unset {name}")
            return None
        if count is None:  # a cohort of one: this node would run alone, its peers refused for their node count
            raise ValueError(f"--cohort {endpoint}: a multi-node run needs the node count too: --nnodes N "
                             "(or SLURM_NNODES / NNODES in the environment)")
    host = None
    port = default_port
    if endpoint:
        host, _, port_text = endpoint.rpartition(":")
        if not host or not port_text.isdigit():
            raise ValueError(f"--cohort {endpoint!r}: expected HOST:PORT (for example node0:29600)")
        if ":" in host and not (host.startswith("[") and host.endswith("]")):
            raise ValueError(f"--cohort {endpoint!r}: an IPv6 address goes in brackets, [ADDRESS]:PORT "
                             "(for example [fd00::5]:29600)")
        port = int(port_text)
    else:
        nodelist = first("SLURM_JOB_NODELIST", "SLURM_NODELIST")
        host = first_host(nodelist) if nodelist else first("MASTER_ADDR")
    if host is not None and host.startswith("[") and host.endswith("]"):
        host = host[1:-1]  # [fd00::5]:29600 as torchrun's endpoints are written; the store wants the bare address
    if host is None:
        raise ValueError("a multi-node run needs the store's address: --cohort HOST:PORT (or SLURM_JOB_NODELIST / MASTER_ADDR)")
    if rank is None:
        raise ValueError("a multi-node run needs this node's rank: --node-rank N (or SLURM_NODEID / NODE_RANK)")
    job = cohort_id or first("SLURM_JOB_ID", "TORCHELASTIC_RUN_ID") or "hangwatch"
    return Membership(rank, count or 1, host, port, job)


def settings_fingerprint(config: Any, nnodes: int, checkpoint_given: str | None = None) -> dict[str, Any]:
    """The settings every node must share (``config``: the run's ``RunConfig``); ``Cohort`` adds the lease.

    Only what would make the nodes act apart: options each node may set for itself (its
    detector's windows, its restart limits: every node counts the same attempts, and every
    node's decision is exchanged, ``settled``)
    are left out.

    ``checkpoint_given``: --checkpoint-dir as the user wrote it. The folder is the same on two
    nodes when either its resolved path or that path, made absolute without resolving links,
    matches: ``/scratch/ckpt`` on every node, with ``/scratch`` a link to each node's own disk,
    is one setting (it was refused, the resolved paths differ).
    """
    checkpoint = config.checkpoint
    given = os.path.abspath(os.path.expanduser(checkpoint_given)) if checkpoint and checkpoint_given else None
    return {
        "nnodes": nnodes,
        "checkpoint_dir": str(checkpoint.directory) if checkpoint else None,
        "checkpoint_dir_given": given,
        "checkpoint_glob": checkpoint.glob if checkpoint else None,
        "checkpoint_marker": checkpoint.marker if checkpoint else None,
        # A node without --resume-arg relaunches its ranks from step 0 while the others resume
        # from the agreed checkpoint: their step counters and data order part, silently.
        "resume_arg_given": bool(config.resume_arg),
        # The node whose trainer crashed judges the crash; the others saw their ranks hang. With
        # --on-crash stop on some nodes only, a crash stopped the job or restarted it by where it was.
        "on_crash": config.restart.on_crash,
        "cudagraphs_after_stall": config.cudagraphs_after_stall,
        "eager_escalation": config.eager_escalation,
        # Each node waits this long for the others' capture before it kills: a shorter wait on one
        # node would kill its ranks, and wake the others', in the middle of their capture.
        "capture_timeout": config.capture_timeout,
        # The barrier before relaunch waits for it (``barrier_timeout``): a node that waits longer for
        # its GPU release than the others' barrier allows is taken for gone by them (75, 75).
        "gpu_release_timeout": config.kill.gpu_release_timeout,
    }


def barrier_timeout(config: Any) -> float:
    """How long a node waits for the others' reports and decisions before relaunch.

    Every node reports only after its kill and its wait for the GPU release, both bounded
    by options; a fixed deadline (it was 300 s) under a longer ``--gpu-release-timeout``, or
    with a GPU probe that stopped answering (the release cannot be seen, so it is waited
    out), ended a healthy job with 75 on every node.
    """
    kill = config.kill
    return BARRIER_BASE_S + kill.gpu_release_timeout + kill.grace + kill.kill_timeout


BARRIER_BASE_S = 300.0


def joined_before(journal: Path) -> Mapping[str, Any] | None:
    """The cohort a run's journal says it joined (its ``cohort_joined`` record), or None.

    ``--resume`` takes a run's settings from its run dir, and the cohort options are
    not among them: without this a cohort node resumed alone ran as a single node,
    its launcher waiting for a rendezvous that would never complete.
    """
    try:
        return next((r for r in iter_journal(journal) if r.get("event") == "cohort_joined"), None)
    except (OSError, ValueError):
        return None  # no readable journal: --resume itself says so


def first_host(nodelist: str) -> str:
    """The first host of a Slurm node list: ``gpu[07-09,12],cpu1`` gives ``gpu07``."""
    head = nodelist.split(",")[0] if "[" not in nodelist.split(",")[0] else nodelist[: nodelist.index("]") + 1]
    if "[" not in head:
        return head.strip()
    prefix, _, ranges = head.partition("[")
    first_range = ranges.rstrip("]").split(",")[0]
    return prefix + first_range.split("-")[0]


def _int(text: str | None, what: str) -> int | None:
    if text is None:
        return None
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"the environment's {what} {text!r} is not a number") from None


def check_settings(fingerprint: Mapping[str, Any], launcher: bool, theirs: Mapping[str, Any]) -> None:
    """Refuse this node (``CohortRefused``, saying what differs) when its ``fingerprint`` is not node 0's.

    ``theirs``: node 0's join record; ``launcher``: whether this node runs one (``launcher.runs_launcher``).
    """
    trains = launcher and theirs.get("launcher", True) is not False
    theirs = {k: v for k, v in theirs.items() if k not in ("nonce", "generation", "launcher")}
    differ = sorted(k for k in set(theirs) | set(fingerprint) if theirs.get(k) != fingerprint.get(k))
    if not trains:  # a node that runs no launcher resumes no ranks: compared once all joined (check_resume_args)
        differ = [k for k in differ if k != "resume_arg_given"]
    given = fingerprint.get("checkpoint_dir_given")
    if given is not None and theirs.get("checkpoint_dir_given") == given:
        differ = [k for k in differ if k != "checkpoint_dir"]  # the same path, resolved through other links
    differ = [k for k in differ if k != "checkpoint_dir_given"]  # an alternative match only, never a refusal
    if "resumed" in differ:
        # Not an option that differs: one node resumes its run while node 0 runs another (a new job, or
        # still the job this node's dead supervisor left: node 0 stops with 75 within its lease).
        which = ("this node resumes its run (--resume), node 0 does not" if fingerprint.get("resumed") else
                 "node 0 resumes its run (--resume), this node starts a new one")
        raise CohortRefused(f"{which}: a job resumes on every node or on none; once every node has stopped, "
                            "resume each node's run with hangwatch run --resume RUN_DIR and its cohort options")
    if differ:
        what = "; ".join(f"{k}: node 0 has {theirs.get(k)!r}, this node {fingerprint.get(k)!r}" for k in differ)
        raise CohortRefused(f"settings differ from node 0's ({what}); start every node with the same options")


def check_resume_args(records: Mapping[int, str | None], fingerprint: Mapping[str, Any], launcher: bool) -> bool:
    """Every node that runs a launcher takes --resume-arg, or none does; a node that runs none
    (a rollout or reward server) may go without it, and then needs no checkpoint. Returns whether
    this node's checkpoints count in the agreement (``Cohort.needs_checkpoint``).

    ``records``: every node's join record, as the store holds it. Such a node had to be given
    --resume-arg like the trainers (it was part of the settings
    every node must share), and its command was relaunched with it after every incident once
    a checkpoint existed: ``trl vllm-serve ... --resume_from_checkpoint=...`` is refused by
    vLLM's parser (exit 2), so the server never came back and the job crashed at each attempt
    until its restart budget ran out. Checked on the whole set of join records, once every node
    joined: node 0 may be that server, and then no trainer was compared with another.
    """
    joined: dict[int, dict[str, Any]] = {}
    for n, raw in records.items():
        try:
            record = parse(raw) if raw is not None else {}
        except ValueError:
            record = {}
        joined[n] = record if isinstance(record, dict) else {}
    trainers = {n: bool(r.get("resume_arg_given")) for n, r in joined.items() if r.get("launcher", True) is not False}
    with_arg = sorted(n for n, given in trainers.items() if given)
    without = sorted(n for n, given in trainers.items() if not given)
    if with_arg and without:
        raise CohortRefused(f"settings differ between the nodes that run a launcher: nodes {with_arg} were given "
                            f"--resume-arg, nodes {without} were not (their ranks would start from step 0 while the "
                            "others resume); start every training node with the same --resume-arg")
    # A node relaunched without the argument while the trainers resume by it takes no checkpoint: its own
    # (none on a server's node-local disk) must not hold the job back to an older common step, or none.
    return bool(launcher or fingerprint.get("resume_arg_given") or not with_arg)
