"""The incident path: from a verdict to a tree that is gone, or an engine that was restarted.

What the runner does with each verdict of an attempt (docs/journal.md, docs/generator.md)::

    a hang verdict: journal the incident -> capture its evidence (bounded) -> decide the
        recovery level (``attempt.recovery_level``) and journal it
        level 1: kill only the rollout engine's worker (``engine_level``); the trainer lives
                 on and is watched again, in the same attempt
        level 2: the job -> kill the whole tree -> wait for its GPU memory to be released
    an exit, a crash or a stop: kill what the trainer left behind (-> release)
    observe-only (``--on-hang observe``): a hang verdict is journaled, captured and alerted as
        above, then ``would_act`` says what would have been done (the level, the processes it
        would kill, the graph policy it would decide); nothing is killed, the policy is kept
        and the same trainer is watched on (``decide/observe_only.py``)

The incident is journaled before anything is killed, and the policy it decides
(``attempt.escalate``) is journaled with the recovery, so a ``--resume`` after a
supervisor that died in between keeps it. The side effects come in through small
injected interfaces: ``TreeOps``, the GPU probe, the capture (``capture.BoundedCapture``),
the journal, a clock, the runner's stop-aware pause, its lifecycle and, in a multi-node
job, what the incident path tells the other nodes (``CohortVoice``).
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, NamedTuple, Protocol

import structlog

from hangwatch.contract.capture import CaptureRequest
from hangwatch.contract.redact import redact_argv
from hangwatch.contract.heartbeat import read_heartbeat
from hangwatch.contract.journal import Journal
from hangwatch.contract.samples import Sample
from hangwatch.contract.verdict import Verdict, VerdictKind
from hangwatch.supervisor.contain.killer import KillReport
from hangwatch.supervisor.contain.tree_ops import Trainer, TreeOps
from hangwatch.supervisor.decide.attempt import (CAPTURE_SLACK_S, AttemptState, RecoveryLevel, RecoverySituation,
                                                 RunState, escalate, recovery_level)
from hangwatch.supervisor.decide.detector import DetectorConfig
from hangwatch.supervisor.decide.gpu_release import gpu_released
from hangwatch.supervisor.recover.capture import BoundedCapture
from hangwatch.supervisor.recover.engine_level import EngineLevel, engines_in_a_call, stuck_engine
from hangwatch.supervisor.watch.probes import GpuProbe, NoProbe

log = structlog.get_logger("hangwatch.run")


@dataclass(frozen=True)
class IncidentSettings:
    """The run's settings the incident path reads (``RunConfig``'s, which recover does not import)."""

    recovery: str  # --recovery: auto, or job
    engine_retry_window: float
    cudagraphs_after_stall: str
    eager_escalation: bool
    detector: DetectorConfig  # its thresholds go into every capture request
    grace: float
    kill_timeout: float
    gpu_release_mib: float
    gpu_release_timeout: float


def barrier_wait(started: float, now: float, capture_timeout: float, interval: float) -> float:
    """How long this node waits at ``now`` for the other nodes' captures, its own begun at ``started``.

    No longer than the latest of theirs can run: each begins within a tick of the announcement (two
    are allowed: a slow tick; this node's began at it or after it), and ends, taken or abandoned,
    by its deadline and the slack (``BoundedCapture``). Waiting a whole capture timeout after this node's own capture
    kept every node's ranks hung for up to twice the timeout when one node never reported."""
    return max(0.0, started + 2 * interval + capture_timeout + CAPTURE_SLACK_S - now)


class CohortVoice(Protocol):
    """What the incident path tells the other nodes of a multi-node job (``cohort.link.CohortLink``)."""

    @property
    def node_rank(self) -> int: ...

    def incident(self, attempt: int, verdict: Verdict) -> None: ...

    def wants_capture(self, verdict: Verdict) -> bool: ...

    def captured(self, attempt: int, timeout: float) -> None: ...

    def evidence_taken(self, attempt: int, bundle: Path | None) -> None: ...


@dataclass(frozen=True)
class AttemptFiles:
    """Where an attempt's files are: its folder, the trainer's heartbeat, the control file."""

    attempt_dir: Path
    heartbeat: Path
    control: Path


class Answer(NamedTuple):
    """What became of a verdict: the verdict the attempt ends with (a crash of a failed engine
    retry is re-read as the wedge escalating), the attempt's bundle, and whether the trainer
    lives on and is watched again (a level-1 engine restart)."""

    verdict: Verdict
    evidence: Path | None
    watch_again: bool


class Contained(NamedTuple):
    """The tree's kill (None: nothing was left to kill) and the trainer's exit status."""

    report: KillReport | None
    exit_code: int | None


class IncidentPath:
    """Answers an attempt's verdicts, and kills what is left at its end.

    ``probe``: the run's GPU probe as it is now; ``pause(seconds)``: the runner's sleep, False
    when a stop came meanwhile; ``stopping``: a stop signal came; ``enter``: the attempt's
    lifecycle (``AttemptLifecycle``) moves on; ``retention``: after each bundle, old ones are pruned.
    """

    def __init__(self, settings: IncidentSettings, *, run_dir: Path, state: RunState, tree: TreeOps,
                 probe: Callable[[], GpuProbe], capture: BoundedCapture, engine_level: EngineLevel,
                 journal: Callable[[], Journal], clock: Callable[[], float], wall: Callable[[], float],
                 pause: Callable[[float], bool], stopping: Callable[[], bool],
                 enter: Callable[[AttemptState], None], retention: Callable[[], None],
                 cohort: CohortVoice | None = None) -> None:
        self.settings = settings
        self.run_dir = run_dir
        self.state = state
        self.tree = tree
        self.probe = probe
        self.capture = capture
        self.engine_level = engine_level
        self.journal = journal
        self.clock = clock
        self.wall = wall
        self.pause = pause
        self.stopping = stopping
        self.enter = enter
        self.retention = retention
        self.cohort = cohort

    # -- a verdict -------------------------------------------------------------------

    def answer(self, verdict: Verdict, samples: list[Sample], trainer: Trainer, files: AttemptFiles, *,
               evidence: Path | None, engines_beat: bool) -> Answer:
        """The incident (for a hang), and the engine restart when level 1 can recover it.
        ``evidence``: the attempt's bundle so far; ``engines_beat``: a rollout engine has beaten
        its steps in this attempt."""
        attempt = self.state.attempt
        engine = self.engine_level
        retrying = engine.unrecovered(attempt)
        # Another rank's engine, stuck under the old policy since before the last engine restart
        # (several ranks wedged at once): the same wedge, so the same policy and level 1 again.
        same_wedge = verdict.kind is VerdictKind.STALL and engine.ran_old_policy(attempt, stuck_engine(verdict.evidence))
        if verdict.kind.is_hang and not retrying:
            # An engine restart whose retried rollouts came back, then the trainer's own threads hung
            # in that step: the engine was recovered (journaled before this incident, which is its own).
            engine.ended(attempt, read_heartbeat(files.heartbeat), self.clock(), hang=True)
        # The attempt's bundle: this verdict's, or an earlier engine-level incident's.
        evidence = self.open(verdict, samples, trainer, files.attempt_dir, escalate_policy=not same_wedge) or evidence
        if not verdict.kind.is_hang:
            return Answer(self._after_exit(verdict, files.heartbeat), evidence, False)
        level = self._decide_level(verdict, trainer, retrying=retrying, same_wedge=same_wedge,
                                   engines_beat=engines_beat)
        in_flight = engines_in_a_call(samples[-1] if samples else None)
        if level.level == 1 and self._restart_engine(level, verdict, files.control, evidence, in_flight):
            return Answer(verdict, evidence, True)  # the trainer lives on: watch it again, in the same attempt
        if level.level == 2 and self.settings.recovery == "auto" and verdict.kind is VerdictKind.STALL:
            log.info("recovery_level", message=f"restarting the job, not the engine alone: {level.reason}")
        return Answer(verdict, evidence, False)

    def _after_exit(self, verdict: Verdict, heartbeat: Path) -> Verdict:
        """An exit, a crash or a stop: the verdict the attempt ends with."""
        attempt = self.state.attempt
        # The beat it left may say the retry's rollouts came back: the engine was recovered
        # (journaled), and a crash after it is the trainer's own.
        self.engine_level.ended(attempt, read_heartbeat(heartbeat), self.clock())
        retrying = self.engine_level.unrecovered(attempt)
        if retrying and verdict.kind is VerdictKind.CRASH and not self.stopping():
            # The batch's retry on the restarted engine failed and took the trainer down:
            # that is the engine wedge escalating to the job (level 2), not a crash of
            # the trainer's own for --on-crash to judge.
            self.engine_level.retry_failed(attempt, f"the retry after the engine restart failed "
                                                    f"({verdict.reason})")
            verdict = dataclasses.replace(verdict, kind=VerdictKind.STALL,
                                          reason=f"engine wedge not recovered at the engine level: {verdict.reason}")
        return verdict

    def open(self, verdict: Verdict, samples: list[Sample], trainer: Trainer, attempt_dir: Path, *,
             escalate_policy: bool = True, observe_only: bool = False) -> Path | None:
        """Journal a hang verdict and capture its evidence (before anything is killed); the bundle."""
        st = self.state
        evidence = None
        if self.cohort is not None:
            self.cohort.incident(st.attempt, verdict)
        if verdict.kind.is_hang and (self.cohort is None or self.cohort.wants_capture(verdict)):
            self.enter(AttemptState.CAPTURING)
            self.journal().append(
                "incident",
                attempt=st.attempt,
                kind=verdict.kind.value,
                onset=verdict.onset,
                detected_at=verdict.detected_at,
                onset_wall=self.wall() - (self.clock() - verdict.onset),
                latency_s=round(verdict.detected_at - verdict.onset, 3),
                reason=verdict.reason,
                window=verdict.window,
                evidence=dict(verdict.evidence),
                phase=verdict.phase,
                # Another rank's engine in the same wedge decides no policy: a --resume after a
                # supervisor that died in its capture must not decide one for it (fold_journal).
                **({"observe_only": True} if observe_only else {} if escalate_policy else {"same_wedge": True}),
            )
            log.error("incident", message=f"{verdict.kind.value} in attempt {st.attempt}: {verdict.reason}")
            started = self.clock()
            evidence = self._capture(verdict, samples, trainer, attempt_dir)
            self.retention()
            if self.cohort is not None and verdict.kind is not VerdictKind.COHORT_LOST:
                self.cohort.captured(st.attempt, barrier_wait(started, self.clock(), self.capture.timeout,
                                                              self.settings.detector.interval))
                self.cohort.evidence_taken(st.attempt, evidence)
            if verdict.kind is VerdictKind.STALL:
                st.stalls += 1
            if escalate_policy and not observe_only:
                st.policy = escalate(st.policy, verdict.kind, after_stall=self.settings.cudagraphs_after_stall,
                                     eager_escalation=self.settings.eager_escalation)
        return evidence

    def _capture(self, verdict: Verdict, samples: list[Sample], trainer: Trainer, attempt_dir: Path) -> Path | None:
        tree = self.tree.describe()
        request = CaptureRequest(
            run_dir=self.run_dir,
            run_id=self.state.run_id,
            attempt=self.state.attempt,
            verdict=verdict,
            samples=samples,
            tree=tree,
            log_paths={"stdout": trainer.stdout_path, "stderr": trainer.stderr_path, "attempt_dir": attempt_dir},
            thresholds=self.settings.detector.to_json(),
            deadline=time.monotonic() + self.capture.timeout,  # the hook's own clock: real time
            gpu_probe=self.probe().name,
            extra={**self.capture.early_extra(verdict),
                   **({"node_rank": self.cohort.node_rank} if self.cohort is not None else {})},
        )
        return self.capture.take(request)

    def observe_only(self, verdict: Verdict, samples: list[Sample], trainer: Trainer, files: AttemptFiles, *,
                     evidence: Path | None, engines_beat: bool) -> Path | None:
        """``--on-hang observe``: the incident and its bundle, and ``would_act``: what would have been
        done. Nothing is killed and the graph policy stays; the caller watches the trainer on."""
        st = self.state
        evidence = self.open(verdict, samples, trainer, files.attempt_dir, observe_only=True) or evidence
        tree = self.tree.describe()
        level = self._level(verdict, trainer, tree, retrying=self.engine_level.unrecovered(st.attempt),
                            same_wedge=False, engines_beat=engines_beat)
        would = escalate(st.policy, verdict.kind, after_stall=self.settings.cudagraphs_after_stall,
                         eager_escalation=self.settings.eager_escalation)
        killed = [p for p in tree if level.level == 2 or p.pgid in level.engine_pgids]
        self.journal().append(
            "would_act", attempt=st.attempt, kind=verdict.kind.value, level=level.level,
            scope="engine" if level.level == 1 else "job", reason=level.reason,
            would_kill=[{"pid": p.pid, "create_time": p.create_time, "cmdline": redact_argv(list(p.cmdline))}
                        for p in killed],
            cudagraphs="off" if would.cudagraphs_off else "on", enforce_eager=would.enforce_eager,
            policy_now={"cudagraphs": "off" if st.policy.cudagraphs_off else "on",
                        "enforce_eager": st.policy.enforce_eager},
            evidence_path=str(evidence) if evidence else None)
        log.warning("would_act", message=(
            f"observe-only: would have {'restarted the rollout engine' if level.level == 1 else 'restarted the job'} "
            f"({len(killed)} process(es) killed); nothing was done, watching on"))
        self.enter(AttemptState.WATCHING)
        return evidence

    def _level(self, verdict: Verdict, trainer: Trainer, tree: list, *, retrying: bool, same_wedge: bool,
               engines_beat: bool) -> RecoveryLevel:
        """The recovery level ``attempt.recovery_level`` gives this verdict (a pure decision)."""
        return recovery_level(RecoverySituation(
            verdict.kind, mode=self.settings.recovery, phase=verdict.phase, tree=tree,
            trainer_pgid=trainer.pid, last_engine_restart=self.engine_level.last_restart, now=self.clock(),
            retry_window=self.settings.engine_retry_window, in_cohort=self.cohort is not None,
            evidence=verdict.evidence, window=verdict.window, engines_beat=engines_beat,
            retry_pending=retrying, same_wedge=same_wedge))

    def _decide_level(self, verdict: Verdict, trainer: Trainer, *, retrying: bool, same_wedge: bool,
                      engines_beat: bool) -> RecoveryLevel:
        """The recovery level (``attempt.recovery_level``), journaled with the policy this incident decided."""
        st = self.state
        level = self._level(verdict, trainer, self.tree.describe(), retrying=retrying, same_wedge=same_wedge,
                            engines_beat=engines_beat)
        # With the policy this incident decided: a --resume after it must keep it.
        self.journal().append("recovery", attempt=st.attempt, level=level.level,
                              scope="engine" if level.level == 1 else "job", reason=level.reason,
                              cudagraphs="off" if st.policy.cudagraphs_off else "on",
                              enforce_eager=st.policy.enforce_eager)
        if retrying and level.level == 2:
            # The retry hung before it moved the trainer on: that engine restart failed, as when
            # the retry crashes (before, only the crash said so: status read 'the trainer lived on').
            self.engine_level.retry_failed(st.attempt, f"the retry after the engine restart hung ({level.reason})")
        return level

    def _restart_engine(self, level: RecoveryLevel, verdict: Verdict, control: Path, evidence: Path | None,
                        in_flight: frozenset[int]) -> bool:
        """Level 1 (``engine_level``); True when the trainer lives on and is watched again."""
        self.enter(AttemptState.RESTARTING_ENGINE)
        if not self.engine_level.restart(self.state.attempt, self.state.policy, level, verdict, control, evidence,
                                         in_flight=in_flight):
            return False
        self.enter(AttemptState.WATCHING)
        return True

    # -- the attempt's end: kill, release --------------------------------------------------

    def contain(self, verdict: Verdict, trainer: Trainer, *, launcher: int | None,
                trainer_code: int | None) -> Contained:
        """Kill the tree (``launcher``: a root that is only a launcher, SIGKILLed once its workers
        are gone), then wait for its GPU memory; the kill and the trainer's exit status."""
        self.enter(AttemptState.KILLING)
        report = self._kill(reason=verdict.kind.value, launcher=launcher)
        trainer.join_output(timeout=2.0)
        if trainer_code is None:
            trainer_code = self.tree.exit_code(trainer)
        if report is not None and report.pids and not isinstance(self.probe(), NoProbe):
            self.enter(AttemptState.RELEASING)
            self._wait_gpu_release(report)
        return Contained(report, trainer_code)

    def _kill(self, reason: str, launcher: int | None = None) -> KillReport | None:
        report = self.tree.kill(grace=self.settings.grace, kill_timeout=self.settings.kill_timeout,
                                launcher=launcher)
        if report is None:
            return None
        self.journal().append("kill", attempt=self.state.attempt, reason=reason, **report.to_json())
        log.info(
            "tree_killed",
            message=(
                f"{len(report.pids)} process(es) killed in {report.duration_s:.1f} s"
                + (f"; SIGKILL needed for {list(report.escalated)}" if report.escalated else "")
                + ("" if report.confirmed else f"; SURVIVORS: {[s['pid'] for s in report.survivors]}")
            ),
        )
        return report

    def _wait_gpu_release(self, report: KillReport) -> None:
        pids = set(report.pids)
        threshold = self.settings.gpu_release_mib
        started = self.clock()
        deadline = started + self.settings.gpu_release_timeout
        devices = None
        while True:
            devices = self.probe().sample()
            if devices is not None and gpu_released(devices, pids, threshold):
                released = True
                break
            if self.clock() >= deadline or not self.pause(0.2):  # a stop: the run ends, nothing to wait for
                released = False
                break
        waited = self.clock() - started
        self.journal().append(
            "gpu_released",
            attempt=self.state.attempt,
            released=released,
            waited_s=round(waited, 3),
            devices=[d.to_json() for d in devices] if devices else None,
        )
        if not released and not self.stopping():
            log.warning("gpu_not_released", message=(
                f"GPU memory still held {waited:.0f} s after the kill (--gpu-release-timeout); restarting anyway"))

