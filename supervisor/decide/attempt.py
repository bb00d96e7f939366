"""One attempt's lifecycle as a state machine, and the pure decisions it makes.

An attempt moves through these states, and only along these edges::

    PREPARING --launched--> WATCHING --hang verdict--> CAPTURING --> KILLING
                               |  ^                        |            ^
                               |  +--engine restarted-- RESTARTING_ENGINE (level 1: only the
                               |                           |    rollout engine's worker is killed)
                               |                           +--failed----+
                               +--exit, crash or stop signal------------+
    KILLING --something was killed and a GPU probe is on--> RELEASING --> ENDED
    KILLING --nothing to wait for---------------------------------------> ENDED

``AttemptLifecycle.advance`` raises ``IllegalTransition`` on any other edge, so
a sequencing bug in the runner fails loudly instead of, say, killing before
the evidence was taken.

The decisions are plain functions of their inputs (no clock, no I/O): the
trainer's environment and argv for an attempt (``attempt_environment``,
``attempt_argv``), the cuda-graph escalation after a verdict (``escalate``),
and what carries over between attempts (``RunState``, rebuilt from the journal
on ``--resume``). The restart decision is ``restart.RestartPolicy.decide``.
"""

from __future__ import annotations

import enum
import os
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from hangwatch.contract import env as names
from hangwatch.contract.heartbeat import engine_heartbeat_path
from hangwatch.contract.journal import fold_journal
from hangwatch.contract.verdict import VerdictKind
from hangwatch.supervisor.decide.detector import WORKER_CALLS, DetectorConfig
from hangwatch.supervisor.decide.restart import AttemptOutcome


class AttemptState(str, enum.Enum):
    PREPARING = "preparing"
    WATCHING = "watching"
    CAPTURING = "capturing"
    KILLING = "killing"
    RELEASING = "releasing"
    RESTARTING_ENGINE = "restarting_engine"
    ENDED = "ended"


TRANSITIONS: Mapping[AttemptState, frozenset[AttemptState]] = {
    AttemptState.PREPARING: frozenset({AttemptState.WATCHING}),
    AttemptState.WATCHING: frozenset({AttemptState.CAPTURING, AttemptState.KILLING}),
    # CAPTURING -> WATCHING: observe-only (--on-hang observe) watches the same trainer on.
    AttemptState.CAPTURING: frozenset({AttemptState.KILLING, AttemptState.RESTARTING_ENGINE, AttemptState.WATCHING}),
    AttemptState.RESTARTING_ENGINE: frozenset({AttemptState.WATCHING, AttemptState.KILLING}),
    AttemptState.KILLING: frozenset({AttemptState.RELEASING, AttemptState.ENDED}),
    AttemptState.RELEASING: frozenset({AttemptState.ENDED}),
    AttemptState.ENDED: frozenset(),
}


class IllegalTransition(RuntimeError):
    """The runner tried an edge the lifecycle does not have."""


@dataclass
class AttemptLifecycle:
    """Where one attempt is; ``trail`` keeps every state with the (monotonic) time it was entered."""

    attempt: int
    state: AttemptState = AttemptState.PREPARING
    trail: list[tuple[AttemptState, float]] = field(default_factory=list)

    def advance(self, to: AttemptState, at: float) -> None:
        if to not in TRANSITIONS[self.state]:
            raise IllegalTransition(f"attempt {self.attempt}: {self.state.value} -> {to.value} is not a legal transition")
        self.state = to
        self.trail.append((to, at))


@dataclass(frozen=True)
class GraphPolicy:
    """The rollout engine's cuda-graph setting for an attempt."""

    cudagraphs_off: bool = False
    enforce_eager: bool = False

    def env(self) -> dict[str, str]:
        out = {names.CUDAGRAPHS: "0" if self.cudagraphs_off else "1"}
        if self.enforce_eager:
            out[names.ENFORCE_EAGER] = "1"
        return out

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> "GraphPolicy":
        return cls(env.get(names.CUDAGRAPHS) == "0", env.get(names.ENFORCE_EAGER) == "1")

    def describe(self) -> str:
        return f"cuda graphs {'off' if self.cudagraphs_off else 'on'}" + (", enforce_eager" if self.enforce_eager else "")


def escalate(policy: GraphPolicy, verdict: VerdictKind, *, after_stall: str, eager_escalation: bool) -> GraphPolicy:
    """The policy for the next attempt after ``verdict``.

    A stall (GPU busy, host idle: the cuda-graph replay wedge) turns graphs off
    (``after_stall == "off"``); a stall with graphs already off adds
    ``enforce_eager`` when ``eager_escalation``. Anything else changes nothing.
    """
    if verdict is not VerdictKind.STALL or after_stall != "off":
        return policy
    return GraphPolicy(True, policy.enforce_eager or (policy.cudagraphs_off and eager_escalation))


def attempt_environment(
    base: Mapping[str, str],
    *,
    run_dir: Path,
    attempt: int,
    attempt_dir: Path,
    policy: GraphPolicy,
    resume_from: Path | None,
    sim_gpu: Path | None = None,
    detect_within: float | None = None,
    engine_recovery: str | None = None,
    supervisor_pid: int | None = None,
    stacks_signal: str | None = None,
    in_process_stacks: str | None = None,
    startup_hook: Path | None = None,
) -> tuple[dict[str, str], dict[str, str]]:
    """The trainer's whole environment, and the part we set (for the journal).
    ``detect_within``: ``engine_detect_within`` of the run's settings; ``engine_recovery``:
    ``engine`` or ``job`` (whether the trainer's generator may restart its engine alone).
    ``supervisor_pid``, ``stacks_signal``, ``in_process_stacks``: what a trainer process arms
    for the evidence (``contract.stackdump``); ``startup_hook``: the folder put first on
    ``PYTHONPATH`` with ``--in-process-stacks all`` (``contract.startup_hook``)."""
    ours = {
        names.RUN_DIR: str(run_dir),
        names.ATTEMPT: str(attempt),
        names.ATTEMPT_DIR: str(attempt_dir),
        names.HEARTBEAT: str(attempt_dir / "heartbeat.json"),
        names.ENGINE_HEARTBEAT: engine_heartbeat_path(attempt_dir / "heartbeat.json"),
        names.CONTROL: str(attempt_dir / "control.json"),
        **policy.env(),
    }
    if resume_from is not None:
        ours[names.RESUME_FROM] = str(resume_from)
    if sim_gpu is not None:
        ours[names.SIM_GPU] = str(sim_gpu)
    if detect_within is not None:
        ours[names.DETECT_WITHIN] = f"{detect_within:g}"
    if engine_recovery is not None:
        ours[names.ENGINE_RECOVERY] = engine_recovery
    if supervisor_pid is not None:
        ours[names.SUPERVISOR_PID] = str(supervisor_pid)
    if stacks_signal is not None:
        ours[names.STACKS_SIGNAL] = stacks_signal
    if in_process_stacks is not None:
        ours[names.IN_PROCESS_STACKS] = in_process_stacks
    full = names.without_ours(base)
    if startup_hook is not None:
        # The one variable of the trainer's own we change: journaled with ours.
        current = full.get("PYTHONPATH", "")
        ours["PYTHONPATH"] = str(startup_hook) + (os.pathsep + current if current else "")
    full.update(ours)
    return full, ours


# How long past its own deadline a capture may take to finish (its bundle's rename).
CAPTURE_SLACK_S = 2.0


def engine_detect_within(detector: DetectorConfig, capture_timeout: float) -> float:
    """The longest a wedged rollout engine can go before the supervisor has its verdict and its
    evidence: the engine step rule's timeout (the stall window in the generate phase when
    the rule is off), two sampling intervals of slack, the capture's deadline and its slack."""
    detect = detector.engine_step_timeout or detector.window_for("generate")
    return detect + 2 * detector.interval + capture_timeout + CAPTURE_SLACK_S


def attempt_argv(command: Sequence[str], resume_arg: str | None, resume_from: Path | None) -> list[str]:
    """The command, plus ``--resume-arg`` with ``{checkpoint}`` filled in when resuming.

    The template is split into arguments first and the path substituted into
    each argument afterwards, so the path stays inside the argument it was put
    in whatever it contains (quotes, spaces): a checkpoint folder's name can
    never add arguments of its own.
    """
    argv = list(command)
    if resume_from is not None and resume_arg:
        argv += [token.replace("{checkpoint}", str(resume_from)) for token in shlex.split(resume_arg)]
    return argv


@dataclass
class RunState:
    """What carries from one attempt to the next (and across ``--resume``)."""

    run_id: str
    attempt: int = 0
    history: list[AttemptOutcome] = field(default_factory=list)
    stalls: int = 0
    policy: GraphPolicy = GraphPolicy()
    #: wall time of the run's last engine restart (level 1), for ``--engine-retry-window``
    last_engine_restart_wall: float | None = None
    #: the journal's last stall incident has no recovery after it (``RunRecord.unanswered_stall``):
    #: the resumed run decides its policy (``escalate``) before its first attempt
    unanswered_stall: bool = False
    #: --progress-timeout auto: the last learned progress timeout journaled (``timeout_learned``),
    #: in force from the next attempt's start
    learned_timeout: dict[str, Any] | None = None

    @classmethod
    def from_journal(cls, records: Sequence[Mapping[str, Any]]) -> "RunState":
        run = fold_journal(records)
        state = cls(run_id=run.run_id or "", stalls=run.stalls, last_engine_restart_wall=run.last_engine_restart_ts,
                    unanswered_stall=run.unanswered_stall, learned_timeout=run.learned_timeout)
        for a in run.attempts:
            state.attempt = max(state.attempt, a.attempt)
            state.policy = GraphPolicy.from_env(a.env)
            # The policy skips an attempt that was not judged (``AttemptRecord.judged``): a preempted
            # job, resumed, has spent no restart.
            if a.judged and a.outcome in VerdictKind._value2member_map_:
                state.history.append(AttemptOutcome(a.attempt, VerdictKind(a.outcome), float(a.ended or 0.0),
                                                    a.start_step, a.end_step))
        if run.decided_policy is not None:
            # Decided after the last attempt started (a stall's recovery, a level-1 engine restart,
            # a restart scheduled before the supervisor died in the backoff): the engine that
            # wedged must not come back with graphs on.
            r = run.decided_policy
            state.policy = GraphPolicy(r["cudagraphs"] == "off", bool(r["enforce_eager"]))
        return state


# -- two-level recovery ----------------------------------------------------------

ENGINE_WORKER_MODULE = "hangwatch.generator.worker"
GENERATE_PHASES = frozenset({"generate"})
# The generator's phases in which the trainer waits on a request to its engine worker other than
# generate: the standby's start, the weight load and wake, the sleep ("start" is not one: trainers
# beat it for their own start-up too).
WORKER_WAIT_PHASES = frozenset({"standby", "load", "sleep"})
# Of those, the ones that wait on the engine the rollouts run on (its pid in the beat,
# ``evidence["waiting_on"]``) are ``WORKER_CALLS``: a wedge there is restarted at the engine level too.


@dataclass(frozen=True)
class RecoveryLevel:
    """1: kill only the rollout engine's worker group, the trainer lives on; 2: the whole tree."""

    level: int
    reason: str
    engine_pgids: frozenset[int] = frozenset()


def engine_groups(tree: Sequence[Any]) -> frozenset[int]:
    """Process groups of the generator's engine workers (each runs in its own session)."""
    return frozenset(p.pgid for p in tree
                     if ENGINE_WORKER_MODULE in " ".join(p.cmdline) and p.pgid > 0)


@dataclass(frozen=True)
class RecoverySituation:
    """Everything ``recovery_level`` judges, as it stands at a hang verdict.

    ``mode``: ``--recovery``; ``phase``: the trainer's last beat's phase; ``tree``: the process
    tree (``TreeProcess``-like: pid, pgid, cmdline); ``last_engine_restart`` and ``now``: the
    runner's monotonic clock, for ``retry_window``; ``evidence``/``window``: the verdict's.
    ``engines_beat``: an engine has beaten in this attempt (its file may be gone by the verdict,
    the new worker not beating yet). ``retry_pending``: an engine restart of this attempt whose
    retry has not moved the trainer on yet; a hang now is that retry failing, a job restart
    whatever the retry window says (the generator retries a batch once). ``same_wedge``: the
    stuck engine had a request in flight under the old policy at that restart (another rank
    wedged at the same time): the same wedge, so neither the pending retry nor the retry window
    makes it a job restart.
    """

    verdict_kind: VerdictKind
    mode: str
    phase: str | None
    tree: Sequence[Any]
    trainer_pgid: int
    last_engine_restart: float | None
    now: float
    retry_window: float
    in_cohort: bool = False
    evidence: Mapping[str, Any] = field(default_factory=dict)
    window: float | None = None
    engines_beat: bool = False
    retry_pending: bool = False
    same_wedge: bool = False

    def __post_init__(self) -> None:
        if self.evidence is None:  # a verdict without evidence
            object.__setattr__(self, "evidence", {})


def _job(reason: str) -> RecoveryLevel:
    return RecoveryLevel(2, reason)


def recovery_level(s: RecoverySituation) -> RecoveryLevel:
    """Whether this incident can be recovered by restarting the rollout engine alone.

    Level 1 only when everything says the trainer is healthy and merely waiting on
    rollouts: a stall (GPU busy, host idle) while the trainer's last beat was the
    ``generate`` phase, with an isolated engine worker in the tree. Anything else,
    or a second engine-level incident within ``retry_window``, is a job restart.

    Where the engines beat their steps (``evidence["engine_beats"]``), they say which one
    the trainer waits on (``engine_pid``, the in-flight engine silent the longest), and the
    level follows them: no engine in flight, or one still stepping when another rule fired
    (on a node with several ranks, the last beat's phase may be another rank's), is not an
    engine wedge; the kill is narrowed to that worker's group, so a standby worker, asleep
    and healthy, survives to take over; and a stuck worker already gone (the generator's
    own timeout killed it) is level 1 with nothing left to kill. Without beats (an older
    worker) every engine group is the suspect. The rules, in order: ``_never_engine_level``,
    then the suspects (``_suspect_groups``), then ``_retried_too_soon``.
    """
    ruled = _never_engine_level(s)
    if ruled is not None:
        return ruled
    suspects = _suspect_groups(s)
    if isinstance(suspects, RecoveryLevel):
        return suspects
    groups, waited_on, call = suspects
    too_soon = _retried_too_soon(s)
    if too_soon is not None:
        return too_soon
    if not groups:
        return RecoveryLevel(1, f"the stuck engine worker (pid {s.evidence.get('engine_pid')}) is gone already: its "
                                f"generator restarts it", frozenset())
    if waited_on is not None:
        return RecoveryLevel(1, f"the rollout engine's worker (pid {s.evidence.get('waiting_on')}) is wedged in the "
                                f"generator's {call!r} phase while the trainer waits on it", groups)
    return RecoveryLevel(1, "the rollout engine's worker is wedged while the trainer waits on it", groups)


def _never_engine_level(s: RecoverySituation) -> RecoveryLevel | None:
    """The job restarts that need no look at the tree: the mode, a cohort, the verdict, a failed retry."""
    if s.mode == "job":
        return _job("--recovery job")
    if s.in_cohort:
        return _job("multi-node: an engine restart on one node would desynchronise the ranks")
    if s.verdict_kind is not VerdictKind.STALL:
        return _job(f"a {s.verdict_kind.value} is not an engine wedge")
    if s.retry_pending and not s.same_wedge:
        return _job("the trainer stalled again before the retry after the last engine restart moved it on")
    return None


def _own_threads(phase: str | None) -> RecoveryLevel:
    """The job restart for a trainer that was not waiting on rollouts."""
    if phase in WORKER_WAIT_PHASES:
        # Waiting on its engine worker, but not for rollouts: not its own threads (the journal said
        # so, and pointed the user at the wrong process).
        return _job(f"the trainer was waiting on its rollout engine's worker in phase {phase!r}, and its "
                    f"beat names no worker of the tree to restart alone" if phase in WORKER_CALLS else
                    f"the trainer was waiting on its rollout engine's worker in phase {phase!r} (its standby "
                    f"worker's start): the engine the rollouts run on is not the stuck one")
    return _job(f"the trainer was in phase {phase or 'unknown'!r}, not waiting on rollouts: its own "
                f"threads are stalled")


def _stall_span(s: RecoverySituation) -> float:
    """How long the stall had held: the window, or for the progress rule (its timeout is the
    window then) the stall it suspected."""
    return float(s.evidence.get("stall_suspected_s") or s.window or 0.0)


def _suspect_groups(s: RecoverySituation) -> tuple[frozenset[int], int | None, str | None] | RecoveryLevel:
    """The engine worker groups to kill (with the worker a weight load or sleep waits on, and
    that call), or the job restart that says why no engine worker is the suspect."""
    evidence = s.evidence
    groups = engine_groups(s.tree) - {s.trainer_pgid}
    engine_pid = evidence.get("engine_pid")
    # The worker a wedged weight load or sleep waits on, as the trainer's generator beat it: its
    # group alone, if it is an engine worker's of the tree (a standby beside it survives).
    # (The worker's own beat says which call it is in, whatever phase the trainer's shared file shows.)
    call = evidence.get("waiting_on_phase") if evidence.get("waiting_on_phase") in WORKER_CALLS else s.phase
    waited_on = next((p.pgid for p in s.tree if p.pid == evidence.get("waiting_on") and p.pgid in groups), None) \
        if call in WORKER_CALLS and engine_pid is None else None
    if waited_on is not None and evidence.get("waiting_on_phase") is not None \
            and float(evidence.get("waiting_on_silent_s") or 0.0) < _stall_span(s) / 2:
        return _job(f"the rollout engine's worker (pid {evidence.get('waiting_on')}) entered its {call!r} call "
                    f"only {float(evidence.get('waiting_on_silent_s') or 0.0):.0f} s ago: the stall is elsewhere")
    if waited_on is not None:
        return frozenset({waited_on}), waited_on, call
    if evidence.get("engine_beats") or s.engines_beat:
        beaten = _beaten_engine_group(s, groups)
        return beaten if isinstance(beaten, RecoveryLevel) else (beaten, None, call)
    if s.phase not in GENERATE_PHASES:
        return _own_threads(s.phase)
    if not groups:
        return _job("no isolated engine worker in the tree")
    return groups, None, call


def _beaten_engine_group(s: RecoverySituation, groups: frozenset[int]) -> frozenset[int] | RecoveryLevel:
    """Where the engines beat: the stuck engine's group (none if it is gone), or why it is not an engine wedge.

    The engines say who waits on whom: a stuck engine with a request in flight has its
    rank waiting on it, whatever the heartbeat's phase (with several ranks on a node the
    file holds whichever rank beat last, often one already past its rollouts).
    """
    engine_pid = s.evidence.get("engine_pid")
    if engine_pid is None:
        return _own_threads(s.phase) if s.phase not in GENERATE_PHASES else \
            _job("no rollout engine had a request in flight: the trainer was not waiting on one")
    silent = float(s.evidence.get("engine_silent_s") or 0.0)
    # An engine silent for half of the stall's span is part of it.
    if s.evidence.get("rule") != "engine_step" and silent < _stall_span(s) / 2:
        return _job(f"the rollout engine (pid {engine_pid}) was still stepping ({silent:.0f} s since its last "
                    f"step): the stall is elsewhere")
    holder = next((p for p in s.tree if p.pid == engine_pid), None)
    if holder is not None and holder.pgid not in groups:
        return _job("no isolated engine worker: the stuck engine runs inside the trainer's process")
    return frozenset({holder.pgid}) if holder is not None else frozenset()


def _retried_too_soon(s: RecoverySituation) -> RecoveryLevel | None:
    """A second engine wedge within ``--engine-retry-window`` (not the same wedge) is a job restart."""
    if s.last_engine_restart is not None and s.now - s.last_engine_restart < s.retry_window and not s.same_wedge:
        return _job(f"a second engine wedge {s.now - s.last_engine_restart:.0f} s after the last engine restart "
                    f"(--engine-retry-window {s.retry_window:g} s)")
    return None
