"""The supervisor's main loop: one attempt after another, until the restart policy says stop.

Each attempt walks the lifecycle in ``attempt.py`` (PREPARING, WATCHING,
CAPTURING, KILLING, RELEASING, ENDED)::

    launch -> sample every interval -> verdict
      stall / silent hang: capture (bounded) -> kill tree -> wait GPU release
      crash / done / stop: kill what the trainer left behind
    -> attempt_ended -> restart policy -> backoff -> next attempt, or finish

The runner sequences attempts: it launches, watches (the ``Detector`` on every
sample) and ends them; what happens between a verdict and a killed tree (the
incident, its evidence, the recovery level, a level-1 engine restart, the kill
and the GPU release) is the incident path, ``recover/incident.py``.

Every decision goes to the journal before it is acted on where that matters
(the incident before the kill), after it otherwise. The decisions themselves
are pure (``Detector``, ``attempt.escalate``, ``attempt.attempt_environment``,
``RestartPolicy.decide``, ``checkpoints``); the side effects come in through
small injected interfaces (``TreeOps``, the probe, the capture hook, the
journal, a clock and a sleep), so a test can drive whole attempts with fakes.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import structlog

from hangwatch.contract.capture import CaptureHook
from hangwatch.contract.exitcodes import EXIT_CHECKPOINTS, EXIT_COHORT, EXIT_UNKILLABLE
from hangwatch.contract.journal import Journal, read_journal
from hangwatch.contract.redact import redact_argv, redact_value
from hangwatch.contract.verdict import Verdict, VerdictKind, classify_exit, stopped
from hangwatch.contract.samples import Sample
from hangwatch.contract.startup_hook import write_hook
from hangwatch.supervisor.cohort.link import CohortLink
from hangwatch.supervisor.cohort.agreement import REPORTED_STEPS
from hangwatch.supervisor.cohort.node import Cohort
from hangwatch.supervisor.config import RunConfig
from hangwatch.supervisor.contain.killer import KillReport
from hangwatch.supervisor.contain.tree_ops import LocalTree, Trainer, TreeOps
from hangwatch.supervisor.decide.attempt import (AttemptLifecycle, AttemptState, RunState, attempt_argv,
                                                 attempt_environment, engine_detect_within, escalate)
from hangwatch.supervisor.decide.checkpoints import (CheckpointsUnreadable, complete_at, complete_steps,
                                                     newest_complete)
from hangwatch.supervisor.decide.detector import Detector, DetectorConfig
from hangwatch.supervisor.decide.learned_timeout import carried_timeout
from hangwatch.supervisor.decide.observe_only import StallEpisode
from hangwatch.supervisor.decide.restart import AttemptOutcome, Decision
from hangwatch.supervisor.operate.longrun import LOW_DISK_LOG_BYTES, DiskWatch, HeapTrim, RecordBudget, prune_incidents
from hangwatch.supervisor.operate.observe import NullObserver, RunObserver, Tick
from hangwatch.supervisor.recover.capture import BoundedCapture
from hangwatch.supervisor.recover.engine_level import EngineLevel
from hangwatch.supervisor.recover.incident import AttemptFiles, IncidentPath, IncidentSettings
from hangwatch.supervisor.watch.probes import FileProbe, GpuProbe, NoProbe
from hangwatch.supervisor.watch.sampler import SampleWindow

log = structlog.get_logger("hangwatch.run")

__all__ = ["RunState", "Supervisor", "load_state"]


class Supervisor:
    def __init__(
        self,
        config: RunConfig,
        probe: GpuProbe,
        capture: CaptureHook,
        *,
        state: RunState | None = None,
        tree: TreeOps | None = None,
        journal: Journal | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        wall: Callable[[], float] = time.time,
        observer: RunObserver | None = None,
        cohort: Cohort | None = None,
    ) -> None:
        self.config = config
        self.probe = probe
        self.clock = clock
        self.sleep = sleep
        self.wall = wall
        self._anchor = (wall(), clock())
        self.run_dir = config.run_dir
        self.state = state or RunState(run_id=uuid.uuid4().hex[:12])
        self.journal = journal or Journal(self.run_dir / "journal.jsonl", self.state.run_id)
        self.disk = DiskWatch(self.run_dir, config.min_free_mb, clock)
        self._heap = HeapTrim(clock)
        self.tree = tree or LocalTree(self.run_dir, probe, echo=config.echo, clock=clock, sleep=sleep,
                                      log_limit=self._log_limit)
        self.lifecycle: AttemptLifecycle | None = None
        # The incident's evidence, bounded by --capture-timeout, and its early round.
        self.evidence_capture = BoundedCapture(capture, journal=lambda: self.journal, clock=clock,
                                               sleep=lambda seconds: self.sleep(seconds), stopping=self._stopping,
                                               timeout=config.capture_timeout)
        # Multi-node: the other nodes' supervisors (docs/multinode.md).
        self.cohort = CohortLink(cohort, lambda: self.journal) if cohort is not None else None
        # Level 1: engine-only recoveries (docs/generator.md).
        self.engine_level = EngineLevel(
            self.tree, lambda: self.journal, clock, kill_timeout=config.kill.kill_timeout,
            devices=None if isinstance(probe, NoProbe) else probe.sample, sleep=self._sleep,
            release_timeout=config.kill.gpu_release_timeout)
        ago = wall() - self.state.last_engine_restart_wall if self.state.last_engine_restart_wall is not None else None
        if ago is not None and ago > -60.0:
            # A --resume: the retry window counts from the previous supervisor's last engine
            # restart (journaled in wall time), or a second wedge right after a resume would be
            # taken for a first one and retried at the engine level again. (A time well in the
            # future is a clock that was wrong, or is: no window, not one that starts now.)
            self.engine_level.last_restart = clock() - max(0.0, ago)
        # From a verdict to a killed tree or a restarted engine (recover/incident.py).
        self.incidents = IncidentPath(
            _incident_settings(config), run_dir=self.run_dir, state=self.state, tree=self.tree,
            probe=lambda: self.probe, capture=self.evidence_capture, engine_level=self.engine_level,
            journal=lambda: self.journal, clock=clock, wall=wall, pause=self._sleep, stopping=self._stopping,
            enter=self._enter, retention=self._prune_incidents, cohort=self.cohort)
        # --progress-timeout auto: the value learned so far (journaled; carried from a resumed run's journal).
        self._learned = carried_timeout(self.state.learned_timeout, config.detector.auto_progress)
        self._beat_pids: set[int] = set()  # the processes that sent heartbeats, this attempt
        self._first_beat_seen = False  # this attempt's first_heartbeat is journaled
        self._engines_beat = False  # a rollout engine has beaten its steps in this attempt
        self._agreed_step: int | None = None
        self._stop_signal: int | None = None
        # When we were last continued (SIGCONT) and no sample has accounted for it yet.
        self._continued_at: float | None = None
        # Status file, metrics, alerts: told about phases and ticks here, journal records by the journal.
        self.observer: RunObserver = observer or NullObserver()

    @property
    def capture_hook(self) -> CaptureHook:
        """The injected capture hook (it may be swapped before the run)."""
        return self.evidence_capture.hook

    @capture_hook.setter
    def capture_hook(self, hook: CaptureHook) -> None:
        self.evidence_capture.hook = hook

    # -- signals -----------------------------------------------------------

    def request_stop(self, signum: int, _frame: Any = None) -> None:
        """Signal handler: only records; the loop acts at its next poll."""
        if self._stop_signal is None:
            self._stop_signal = signum

    def note_continued(self, _signum: int = signal.SIGCONT, _frame: Any = None) -> None:
        """SIGCONT handler: we were stopped and continued (a suspended job). A stop inside
        our sleep shows as its overrun; this tells of one that landed inside a tick."""
        self._continued_at = self.clock()

    def _stopping(self) -> bool:
        return self._stop_signal is not None

    def _sleep(self, seconds: float, wake: Callable[[], bool] | None = None) -> bool:
        """Sleep in small steps; False if a stop was requested meanwhile, or ``wake`` said so
        (the trainer exited: seen within 50 ms, not at the next tick, a whole interval later)."""
        deadline = self.clock() + seconds
        while self._stop_signal is None:
            left = deadline - self.clock()
            if left <= 0:
                return True
            self.sleep(min(0.05, left))
            if wake is not None and wake():
                return False
        return False

    def _enter(self, state: AttemptState) -> None:
        assert self.lifecycle is not None
        self.lifecycle.advance(state, self.clock())
        self.observer.phase(self.lifecycle.attempt, state)

    # -- the run -------------------------------------------------------------

    def run(self, resumed: bool = False, guardian: str = "armed", containment: str | None = None) -> int:
        """Attempts until the restart policy stops; returns the exit code.

        ``guardian`` is what the CLI found when it started the guardian
        ("armed", or why not); it is journaled with the run.
        """
        if resumed:
            unanswered = self.state.unanswered_stall
            if unanswered:
                # The previous supervisor died between a stall's incident and its recovery (during the
                # capture, mostly): decide the policy it would have, or the wedge comes back with graphs on.
                self.state.policy = escalate(self.state.policy, VerdictKind.STALL,
                                             after_stall=self.config.cudagraphs_after_stall,
                                             eager_escalation=self.config.eager_escalation)
                self.state.unanswered_stall = False
            self.journal.append("run_resumed", attempts_so_far=self.state.attempt, pid=os.getpid(), guardian=guardian,
                                containment=containment,
                                **({"unanswered_stall": True, "cudagraphs": "off" if self.state.policy.cudagraphs_off else "on",
                                   "enforce_eager": self.state.policy.enforce_eager} if unanswered else {}))
        else:
            self.journal.append(
                "run_started",
                pid=os.getpid(),
                command=redact_argv(self.config.command),
                run_dir=str(self.run_dir),
                gpu_probe=self.probe.name,
                guardian=guardian,
                containment=containment,
                config={**self.config.to_json(), "command": redact_argv(self.config.command)},
            )
        if self.cohort is not None:
            self.cohort.joined()
            if resumed and (code := self._cohort_resume()) is not None:
                return code
        while True:
            try:
                outcome, code = self._attempt(resumed_run=resumed)
            except CheckpointsUnreadable as exc:
                return self._checkpoints_unreadable(exc)
            if code is not None:
                return code
            decision = self.config.restart.decide(self.state.history, self._policy_time())
            if self.cohort is not None:  # every node takes the same decision (docs/multinode.md)
                decision = self.cohort.settle(outcome, decision)
            if not decision.restart:
                if self.cohort is not None and self._stop_signal is not None:
                    return self._finish_interrupted(None)  # stopped while the nodes settled: a stop, not a give-up
                return self._finish(decision)
            policy = self.state.policy
            self.journal.append(
                "restart_scheduled",
                after_attempt=outcome.attempt,
                reason=decision.reason,
                delay_s=round(decision.delay_s, 3),
                cudagraphs="off" if policy.cudagraphs_off else "on",
                enforce_eager=policy.enforce_eager,
            )
            log.info("restart_scheduled", message=f"{decision.reason}; next attempt in {decision.delay_s:.1f} s")
            if not self._sleep(decision.delay_s):
                return self._finish_interrupted(None)

    def _finish(self, decision: Decision) -> int:
        code = decision.exit_code if decision.exit_code is not None else 0
        outcome = "success" if code == 0 else "gave_up"
        self.journal.append("run_finished", outcome=outcome, exit_code=code, reason=decision.reason,
                            attempts=self.state.attempt)
        if code == 0:
            log.info("run_finished", message=f"{decision.reason} after {self.state.attempt} attempt(s)")
        else:
            log.error("run_finished", message=f"giving up: {decision.reason} (exit {code})")
        return code

    def _checkpoints_unreadable(self, exc: CheckpointsUnreadable) -> int:
        """No relaunch when the checkpoints cannot be read: from scratch, the trainer would save
        over them (nothing of the run may be lost). The user fixes access, then ``--resume``."""
        reason = f"{exc}; not relaunching from scratch over checkpoints that may be there"
        if self.cohort is not None:
            self.cohort.gave_up(reason)
        self.journal.append("run_finished", outcome="gave_up", exit_code=EXIT_CHECKPOINTS, reason=reason,
                            attempts=self.state.attempt)
        log.error("run_finished", message=f"giving up: {reason}: make it readable, then hangwatch run --resume "
                                          f"{self.run_dir} (exit {EXIT_CHECKPOINTS})")
        return EXIT_CHECKPOINTS

    def _finish_interrupted(self, trainer_code: int | None) -> int:
        sig = self._stop_signal or signal.SIGTERM
        why = f"supervisor received {signal.Signals(sig).name}"
        if self.cohort is not None:  # the job's first stop, whichever node it reached (docs/multinode.md)
            sig, why = self.cohort.job_stop(sig)
        if trainer_code is None or self.cohort is not None:
            # In a cohort every node exits the same way: 128 + the signal the stop began with.
            # A launcher's own status on a forwarded signal is not: torchrun answers SIGTERM
            # with 1 or 143 depending on where the signal finds it (its status is journaled).
            code = 128 + sig
        elif trainer_code < 0:
            code = 128 - trainer_code
        else:
            code = trainer_code
        self.journal.append("run_finished", outcome="interrupted", exit_code=code, reason=why, attempts=self.state.attempt,
                            **({"trainer_exit_code": trainer_code} if trainer_code is not None else {}))
        log.warning("run_finished", message=f"interrupted by {signal.Signals(sig).name}; exit {code}")
        return code

    # -- one attempt -----------------------------------------------------------

    def _attempt(self, resumed_run: bool) -> tuple[AttemptOutcome, int | None]:
        """Launch, watch, answer each verdict (``IncidentPath``; a level-1 engine restart watches
        the same trainer again), kill what is left, end the attempt; the exit code if the run ends."""
        st = self.state
        st.attempt += 1
        self.lifecycle = AttemptLifecycle(st.attempt)
        launched = self._launch(resumed_run)
        trainer = launched.trainer
        evidence: Path | None = None
        self._beat_pids = set()
        self._first_beat_seen = False
        self._engines_beat = False
        episode: StallEpisode | None = None
        while True:
            verdict, samples, trainer_code = self._watch(trainer, launched.files.heartbeat, episode)
            if verdict.kind.is_hang and self.config.on_hang == "observe":
                # Observe-only: the incident, its bundle and what would have been done; then the
                # same trainer is watched on, with no new incident until this episode ends.
                evidence = self.incidents.observe_only(verdict, samples, trainer, launched.files, evidence=evidence,
                                                       engines_beat=self._engines_beat)
                last = samples[-1] if samples else None
                episode = StallEpisode(self.state.stalls, verdict.detected_at, last.heartbeat if last else None,
                                       verdict.evidence, last.engine if last else ())
                continue
            answer = self.incidents.answer(verdict, samples, trainer, launched.files, evidence=evidence,
                                           engines_beat=self._engines_beat)
            verdict, evidence = answer.verdict, answer.evidence
            if not answer.watch_again:
                break
        # The root is only a launcher (torchrun's agent) when others beat and it never did:
        # once its workers are gone it is SIGKILLed without waiting out its own teardown.
        launcher = trainer.pid if self._beat_pids and trainer.pid not in self._beat_pids else None
        report, trainer_code = self.incidents.contain(verdict, trainer, launcher=launcher, trainer_code=trainer_code)
        outcome, cohort_code = self._attempt_ended(launched, verdict, trainer_code, evidence)
        return outcome, self._run_ends_after(outcome, verdict, report, trainer_code, cohort_code)

    def _launch(self, resumed_run: bool) -> _Launched:
        """The attempt's folder, checkpoint, environment and argv; the trainer started, and journaled."""
        st = self.state
        attempt_dir = self.run_dir / "attempts" / f"attempt-{st.attempt:03d}"
        attempt_dir.parent.mkdir(exist_ok=True, mode=0o700)
        attempt_dir.mkdir(exist_ok=True, mode=0o700)

        resume_from, start_step = self._choose_checkpoint(resume=st.attempt > 1 or resumed_run)
        env, ours = attempt_environment(
            os.environ, run_dir=self.run_dir, attempt=st.attempt, attempt_dir=attempt_dir, policy=st.policy,
            resume_from=resume_from, sim_gpu=self.probe.path if isinstance(self.probe, FileProbe) else None,
            # In a cohort the capture waits for every node's: one more capture timeout.
            detect_within=engine_detect_within(self.config.detector, self.config.capture_timeout)
            + (self.config.capture_timeout if self.cohort is not None else 0.0),
            engine_recovery="job" if self.config.recovery == "job" or self.cohort is not None else "engine",
            # The evidence a trainer process arms (contract.stackdump): the supervisor as its
            # ptracer, its stacks on this signal; with "all", through the start-up hook.
            supervisor_pid=os.getpid(), stacks_signal=self.config.stacks_signal,
            in_process_stacks=self.config.in_process_stacks,
            startup_hook=write_hook(self.run_dir) if self.config.in_process_stacks == "all" else None,
        )
        argv = attempt_argv(self.config.command, self.config.resume_arg, resume_from)
        started = self.clock()
        trainer = self.tree.launch(argv, env, attempt_dir)
        self._enter(AttemptState.WATCHING)
        self.journal.append(
            "attempt_started",
            attempt=st.attempt,
            pid=trainer.pid,
            create_time=trainer.create_time,
            argv=redact_argv(argv),
            env=ours,
            resume_from=str(resume_from) if resume_from else None,
            logs={"stdout": str(trainer.stdout_path), "stderr": str(trainer.stderr_path)},
            launch=getattr(trainer, "launch", None),  # warm (--prewarm-launcher) or cold, and why
        )
        log.info("attempt_started", message=(
            f"attempt {st.attempt}: pid {trainer.pid}, {st.policy.describe()}"
            + (f", resuming from {resume_from}" if resume_from else "")))
        files = AttemptFiles(attempt_dir, Path(ours["HANGWATCH_HEARTBEAT"]), Path(ours["HANGWATCH_CONTROL"]))
        return _Launched(trainer, files, started, start_step)

    def _attempt_ended(self, launched: _Launched, verdict: Verdict, trainer_code: int | None,
                       evidence: Path | None) -> tuple[AttemptOutcome, int | None]:
        """Agree with the cohort, keep the outcome for the restart policy, journal ``attempt_ended``;
        the outcome, and the cohort's exit code if the job cannot go on."""
        st = self.state
        cohort_code = self._cohort_agree(verdict) if self.cohort is not None else None
        end_step = self._newest_step()
        outcome = AttemptOutcome(st.attempt, verdict.kind, self._policy_time(), launched.start_step, end_step)
        st.history.append(outcome)
        self.journal.append(
            "attempt_ended",
            attempt=st.attempt,
            kind=verdict.kind.value,
            exit_code=trainer_code,
            signal=verdict.signal,
            reason=verdict.reason,
            duration_s=round(self.clock() - launched.started, 3),
            start_step=launched.start_step,
            end_step=end_step,
            evidence_path=str(evidence) if evidence else None,
        )
        self._enter(AttemptState.ENDED)
        return outcome, cohort_code

    def _run_ends_after(self, outcome: AttemptOutcome, verdict: Verdict, report: KillReport | None,
                        trainer_code: int | None, cohort_code: int | None) -> int | None:
        """The run's exit code when it cannot go on after this attempt (survivors of SIGKILL, a
        stop, a cohort that cannot continue); None: the restart policy decides."""
        st = self.state
        if report is not None and not report.confirmed:
            unkillable = Decision(False, f"{len(report.survivors)} process(es) survived SIGKILL", EXIT_UNKILLABLE)
            if self.cohort is not None and cohort_code is None:  # the other nodes stop with it, and say why
                unkillable = self.cohort.settle(outcome, unkillable)
            self.journal.append("run_finished", outcome="gave_up", exit_code=unkillable.exit_code,
                                reason=unkillable.reason, attempts=st.attempt)
            log.error("run_finished", message=f"processes survived SIGKILL; not restarting (exit {unkillable.exit_code})")
            return unkillable.exit_code
        if self._stop_signal is not None:
            # A hang's tree was killed by us: its status is our SIGKILL, not the trainer's answer to the stop.
            return self._finish_interrupted(None if verdict.kind.is_hang else trainer_code)
        if cohort_code is not None:
            self.journal.append("run_finished", outcome="gave_up", exit_code=cohort_code,
                                reason=f"multi-node cohort: {(self.cohort and self.cohort.why) or verdict.reason}",
                                attempts=st.attempt)
            log.error("run_finished", message=f"giving up: the cohort cannot continue (exit {cohort_code})")
            return cohort_code
        return None

    def _watch(self, trainer: Trainer, heartbeat: Path,
               episode: StallEpisode | None = None) -> tuple[Verdict, list[Sample], int | None]:
        """Sample until a verdict (an exit, a stop, a hang). ``episode``: an incident observed only
        (``--on-hang observe``) is open: no verdict of a hang until the trainer moves on."""
        cfg = self._detector_config()
        self.tree.watch(heartbeat)
        detector = Detector(cfg, start=self.clock())
        self.evidence_capture.forget_early_round()
        # Memory-bounded whatever the interval (a plain deque of the window grew ~1 KB a tick for minutes).
        samples = SampleWindow(max(cfg.stall_window, cfg.progress_timeout or 0, 60 * cfg.interval) + 30 * cfg.interval)
        last_info: dict[str, Any] | None = None
        info_budget = RecordBudget(self.clock)  # a trainer beating new info every step must not fill the journal
        launched = self.clock()
        next_tick = self.clock()
        self._continued_at = None
        last_t: float | None = None  # the previous sample's time
        early = False  # this tick is an extra one, at the progress deadline (``Detector.progress_due``)
        while True:
            code = self.tree.exit_code(trainer)
            if code is not None:
                verdict = classify_exit(code, self.clock())
                return (stopped(verdict) if self._stop_signal is not None else verdict), samples.snapshot(), code
            if self._stop_signal is not None:
                code = self._forward_stop(trainer)
                verdict = classify_exit(code if code is not None else -self._stop_signal, self.clock())
                if code is None:  # it did not exit in time: the tree is killed next, by us, not by the signal
                    name = signal.Signals(self._stop_signal).name
                    verdict = dataclasses.replace(verdict, reason=f"the trainer did not exit within --grace "
                                                                  f"{self.config.kill.grace:g} s of {name}; killed")
                return stopped(verdict), samples.snapshot(), code
            external = self.cohort.verdict(self.state.attempt, self.clock(), self.tree) if self.cohort is not None else None
            if external is not None:
                return external, samples.snapshot(), None
            sample = self.tree.sample()
            continued = self._continued_at
            if continued is not None and continued <= sample.t:
                # Stopped and continued inside a tick (no sleep overran): the time since the
                # previous sample, beyond one interval, was not observed and is not silence.
                self._continued_at = None
                gap = sample.t - last_t - cfg.interval if last_t is not None else 0.0
                if gap > cfg.effective_gap_tolerance:
                    detector.unobserved(gap)
                    next_tick = self.clock()
            last_t = sample.t
            samples.append(sample)
            decided = self.engine_level.observe(self.state.attempt, sample)
            if decided is not None:  # the generator restarted its engine alone: the run keeps its policy
                self.state.policy = decided
            self._upkeep()
            hb = sample.heartbeat
            self._engines_beat = self._engines_beat or bool(sample.engine)
            if hb is not None and len(self._beat_pids) < 64:
                self._beat_pids.add(hb.pid)
            if hb is not None and not self._first_beat_seen:  # once an attempt, not once a watch
                self._first_beat_seen = True
                self.journal.append("first_heartbeat", attempt=self.state.attempt, step=hb.step, phase=hb.phase,
                                    after_launch_s=round(sample.t - launched, 3))
            if hb is not None and hb.info and dict(hb.info) != last_info and info_budget.due():
                last_info = dict(hb.info)
                self.journal.append("trainer_info", attempt=self.state.attempt, step=hb.step, phase=hb.phase,
                                    info=redact_value(last_info))
            if episode is not None and self._episode_ended(episode, sample):
                episode, detector = None, Detector(self._detector_config(), start=sample.t)  # the next episode
            verdict = detector.observe(sample) if episode is None else None
            self._note_learned(detector)
            if verdict is None:
                self.evidence_capture.maybe_early_round(detector, sample.t, self.tree.describe)
                if self.cohort is not None:
                    self._cohort_heads_up(detector, sample.t)
            learned = (detector.progress_timeout_for(hb.phase) if hb is not None and detector.learned is not None
                       else None)  # what status shows as the timeout: the learned one where it is in force
            self.observer.tick(Tick(self.state.attempt, sample, detector.stall_onset, cfg.window_for(detector.phase),
                                    learned))
            if verdict is not None:
                return verdict, samples.snapshot(), None
            if not early:
                next_tick += cfg.interval
            # The progress timeout ends between two ticks: one extra sample when it ends, so a hang
            # is judged at its timeout, not up to an interval later (the next tick stays as it was).
            due = detector.progress_due() if episode is None else None
            early = due is not None and self.clock() < due < next_tick
            delay = (due if early and due is not None else next_tick) - self.clock()
            if delay < 0:
                next_tick = self.clock()  # we fell behind (a slow probe); do not burst
                continue
            slept_from = self.clock()
            if not self._sleep(delay, wake=lambda: self.tree.exit_code(trainer) is not None or (
                    self.cohort is not None and self.cohort.wake(self.state.attempt, self.clock()))):
                continue
            # A sleep that overran by more than the gap tolerance: we were not running (the
            # job was stopped and continued). None of that time was observed: it is not silence.
            overrun = self.clock() - slept_from - delay
            if overrun > cfg.effective_gap_tolerance:
                detector.unobserved(overrun)
                next_tick, early = self.clock(), False
                if self._continued_at is not None and self._continued_at >= slept_from:
                    self._continued_at = None  # that stop was this overrun, already discounted

    def _cohort_heads_up(self, detector: Detector, t: float) -> None:
        """A verdict building here is told to the other nodes; one building on another node starts
        this node's early round now, so that at its announcement this capture needs only the final
        round (``cohort.likely``)."""
        assert self.cohort is not None
        self.cohort.building(self.state.attempt, detector.building(t), t)
        until = self.cohort.heads_up(self.state.attempt, t)
        if until is not None:
            self.evidence_capture.early_round_now(t, self.tree.describe, until)

    def _detector_config(self) -> DetectorConfig:
        """The detector's settings, with the progress timeout learned so far in force from the start."""
        cfg = self.config.detector
        return dataclasses.replace(cfg, learned_progress=self._learned) if cfg.auto_progress is not None else cfg

    def _note_learned(self, detector: Detector) -> None:
        """Journal a progress timeout the detector learned (``timeout_learned``), and keep it for the
        next attempt (and, through the journal, for a ``--resume``)."""
        learned = detector.learned
        if learned is None or learned is self._learned:
            return
        self._learned = learned
        self.journal.append("timeout_learned", attempt=self.state.attempt, rule="progress", **learned.to_json())
        log.info("timeout_learned", message=(
            f"progress timeout learned: {learned.timeout:.1f} s (p{learned.settings.quantile * 100:g} "
            f"{learned.quantile_s:.1f} s x {learned.settings.factor:g} of {learned.intervals} intervals)"))

    def _episode_ended(self, episode: StallEpisode, sample: Sample) -> bool:
        """Observe-only: the trainer moved on by itself after the incident (journaled)."""
        recovered = episode.observe(sample)
        if recovered is None:
            return False
        self.journal.append("recovered_by_itself", attempt=self.state.attempt, after_s=round(recovered.after_s, 3),
                            step=recovered.step, how=recovered.how)
        log.info("recovered_by_itself", message=(
            f"observe-only: the trainer moved on by itself {recovered.after_s:.0f} s after the incident"
            + (f" (step {recovered.step})" if recovered.step is not None else "")))
        return True

    def _forward_stop(self, trainer: Trainer) -> int | None:
        """Pass SIGINT/SIGTERM to the trainer's group, give it the grace to exit."""
        sig = self._stop_signal or signal.SIGTERM
        log.warning("forwarding_signal", message=f"received {signal.Signals(sig).name}; forwarding to the trainer")
        self.tree.forward(sig, trainer)
        deadline = self.clock() + self.config.kill.grace
        while self.clock() < deadline:
            code = self.tree.exit_code(trainer)
            if code is not None:
                return code
            self.sleep(0.05)
        return None

    # -- a run of days: disk space and retention (hangwatch.supervisor.operate.longrun) ------

    def _policy_time(self) -> float:
        """Wall-clock seconds for the restart history, advanced by the monotonic clock.

        The per-hour cap must compare with times in the journal (``--resume``
        rebuilds the history from them), but a wall clock stepped by NTP
        during the run would move the window: +1 h forgets the last hour's
        crashes, -1 h keeps them for two. Read once, then moved by the
        monotonic clock, it cannot step.
        """
        return self._anchor[0] + (self.clock() - self._anchor[1])

    def _log_limit(self) -> int:
        """The trainer logs' cap: logs give way first when the disk runs low."""
        cap = self.config.log_max_bytes
        return min(cap, LOW_DISK_LOG_BYTES) if self.disk.low else cap

    def _upkeep(self) -> None:
        """Per tick, each at its own slower pace: the free-space check, the heap trim."""
        self._heap.maybe()
        reading = self.disk.check()
        if reading is None or not reading.newly_low:
            return
        self.journal.append("disk_low", attempt=self.state.attempt, free_mb=reading.free_mb,
                            min_free_mb=self.config.min_free_mb, path=str(self.run_dir))
        log.warning("disk_low", message=(
            f"only {reading.free_mb:.0f} MB free on the run dir's disk (--min-free-mb {self.config.min_free_mb:g}): "
            f"trainer logs are cut to {LOW_DISK_LOG_BYTES >> 20} MB; journal and bundles keep writing. Free some space"))

    def _prune_incidents(self) -> None:
        removed = prune_incidents(self.run_dir / "incidents", self.config.keep_incidents)
        if removed:
            self.journal.append("incidents_pruned", attempt=self.state.attempt, keep=self.config.keep_incidents,
                                removed=removed)
            log.info("incidents_pruned", message=(
                f"removed {len(removed)} old incident bundle(s) (--keep-incidents {self.config.keep_incidents})"))

    # -- multi-node cohort -------------------------------------------------------

    def _cohort_agree(self, verdict: Verdict) -> int | None:
        """Agree on checkpoint and graph policy before any node relaunches; an exit code if we must stop."""
        assert self.cohort is not None
        if verdict.kind is VerdictKind.DONE or (self._stop_signal is not None and verdict.kind is not VerdictKind.COHORT_LOST):
            return None
        try:
            steps = complete_steps(self.config.checkpoint, REPORTED_STEPS) if self.config.checkpoint else []
        except CheckpointsUnreadable as exc:
            # Reporting no steps would have every node relaunch from scratch over the checkpoints.
            self.cohort.gave_up(f"{exc}; not relaunching from scratch over checkpoints that may be there")
            log.error("checkpoints_unreadable", message=f"{exc}: this node cannot agree on a checkpoint; the job stops")
            return EXIT_CHECKPOINTS
        agreed, code = self.cohort.agree(self.state.attempt, verdict, steps, self.state.policy)
        if agreed is not None:
            self.state.policy = agreed.policy
            self._agreed_step = agreed.checkpoint_step
        return code

    def _cohort_resume(self) -> int | None:
        """A job resumed on every node: the attempt count, checkpoint and policy they all go on from."""
        assert self.cohort is not None
        try:
            steps = complete_steps(self.config.checkpoint, REPORTED_STEPS) if self.config.checkpoint else []
        except CheckpointsUnreadable as exc:
            return self._checkpoints_unreadable(exc)
        agreed, code = self.cohort.resume(self.state.attempt, steps, self.state.policy)
        if agreed is None:
            if self._stop_signal is not None:
                return self._finish_interrupted(None)  # stopped while the nodes agreed: a stop, not a give-up
            code = code if code is not None else EXIT_COHORT
            self.journal.append("run_finished", outcome="gave_up", exit_code=code,
                                reason=f"multi-node cohort: {self.cohort.why or 'no agreement on resuming the job'}",
                                attempts=self.state.attempt)
            return code
        self.state.attempt = max(self.state.attempt, agreed.attempts or 0)
        self.state.policy = agreed.policy
        self._agreed_step = agreed.checkpoint_step
        return None

    # -- checkpoints -----------------------------------------------------------

    def _choose_checkpoint(self, resume: bool) -> tuple[Path | None, int | None]:
        """The checkpoint to resume from (when ``resume``) and the newest complete step."""
        if not self.config.checkpoint:
            return None, None
        if resume and self.cohort is not None:  # the agreed step or, when no step is complete on every node, none
            agreed = complete_at(self.config.checkpoint, self._agreed_step)
            if agreed is None and self.cohort.needs_checkpoint:  # (a rollout server's node resumes nothing)
                log.warning("no_checkpoint", message=f"no checkpoint complete on every node of the cohort (agreed step "
                                                     f"{self._agreed_step}); restarting from scratch with them")
            return (agreed.path, agreed.step) if agreed is not None else (None, None)
        try:
            chosen, skipped = newest_complete(self.config.checkpoint)
        except CheckpointsUnreadable as exc:
            if resume:
                raise
            log.warning("checkpoints_unreadable", message=f"{exc}: a restart will need it readable")
            return None, None
        step = chosen.step if chosen else None
        if not resume:
            return None, step
        for c in skipped:
            log.warning("checkpoint_skipped", message=f"skipping {c.path}: {c.problem} (left untouched)")
        if chosen is None:
            log.warning("no_checkpoint", message=(
                f"no complete checkpoint in {self.config.checkpoint.directory}; restarting from scratch"))
            return None, None
        return chosen.path, step

    def _newest_step(self) -> int | None:
        """For the no-progress rule; an unreadable directory is judged when the next attempt
        would resume (``_choose_checkpoint``), not here."""
        if not self.config.checkpoint:
            return None
        try:
            chosen, _ = newest_complete(self.config.checkpoint)
        except CheckpointsUnreadable:
            return None
        return chosen.step if chosen else None


@dataclass(frozen=True)
class _Launched:
    """An attempt's trainer, its files, when it was launched, and the checkpoint step it resumed at."""

    trainer: Trainer
    files: AttemptFiles
    started: float
    start_step: int | None


def _incident_settings(config: RunConfig) -> IncidentSettings:
    return IncidentSettings(
        recovery=config.recovery, engine_retry_window=config.engine_retry_window,
        cudagraphs_after_stall=config.cudagraphs_after_stall, eager_escalation=config.eager_escalation,
        detector=config.detector, grace=config.kill.grace, kill_timeout=config.kill.kill_timeout,
        gpu_release_mib=config.kill.gpu_release_mib, gpu_release_timeout=config.kill.gpu_release_timeout)


def load_state(run_dir: Path) -> RunState:
    records = read_journal(run_dir / "journal.jsonl")
    if not records:
        raise ValueError(f"{run_dir / 'journal.jsonl'} holds no records")
    return RunState.from_journal(records)
