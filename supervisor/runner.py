"""The supervisor's main loop: attempts, detection, recovery, restarts.

One run is a sequence of attempts. Each attempt::

    launch -> sample every interval -> verdict
      stall / silent hang: capture (bounded) -> kill tree -> wait GPU release
      crash / done:        kill what the trainer left behind
    -> attempt_ended -> restart policy -> backoff -> next attempt, or finish

Every decision goes to the journal before it is acted on where that matters
(the incident before the kill), after it otherwise. Decisions themselves are
made by pure parts (``Detector``, ``RestartPolicy``, ``checkpoints``); this
module only sequences them and owns the side effects' order.
"""

from __future__ import annotations

import collections
import os
import shlex
import signal
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import structlog

from diagnostics.redact import redact_argv
from supervisor.capture import CaptureHook, CaptureRequest, SamplesOnlyCapture
from supervisor.checkpoints import newest_complete
from supervisor.config import RunConfig
from supervisor.detector import Detector, Verdict, VerdictKind, classify_exit
from supervisor.heartbeat import HEARTBEAT_ENV
from supervisor.journal import Journal, read_journal
from supervisor.killer import KillReport, TreeKiller
from supervisor.launcher import Reaper, TrainerProcess, launch
from supervisor.policy import EXIT_UNKILLABLE, AttemptOutcome, Decision
from supervisor.probes import FileProbe, GpuProbe, NoProbe
from supervisor.proctree import ProcessTree, describe
from supervisor.sampler import Sampler
from supervisor.samples import Sample
from supervisor.simgpu import SIM_GPU_ENV
from supervisor.treefile import TreeFile

log = structlog.get_logger("hangwatch.run")


@dataclass
class RunState:
    """What carries from one attempt to the next (and across ``--resume``)."""

    run_id: str
    attempt: int = 0
    history: list[AttemptOutcome] = field(default_factory=list)
    stalls: int = 0
    cudagraphs_off: bool = False
    enforce_eager: bool = False

    @classmethod
    def from_journal(cls, records: list[dict[str, Any]]) -> "RunState":
        state = cls(run_id=records[0]["run_id"])
        for r in records:
            if r["event"] == "attempt_started":
                state.attempt = max(state.attempt, int(r["attempt"]))
                state.cudagraphs_off = r["env"].get("HANGWATCH_CUDAGRAPHS") == "0"
                state.enforce_eager = r["env"].get("HANGWATCH_ENFORCE_EAGER") == "1"
            elif r["event"] == "incident" and r["kind"] == VerdictKind.STALL.value:
                state.stalls += 1
            elif r["event"] == "attempt_ended":
                state.history.append(
                    AttemptOutcome(
                        attempt=int(r["attempt"]),
                        kind=VerdictKind(r["kind"]),
                        ended_at=float(r["ts"]),
                        start_step=r.get("start_step"),
                        end_step=r.get("end_step"),
                    )
                )
        return state


class Supervisor:
    def __init__(
        self,
        config: RunConfig,
        probe: GpuProbe,
        capture: CaptureHook,
        *,
        state: RunState | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self.probe = probe
        self.capture_hook = capture
        self.clock = clock
        self.run_dir = config.run_dir
        self.state = state or RunState(run_id=uuid.uuid4().hex[:12])
        self.journal = Journal(self.run_dir / "journal.jsonl", self.state.run_id)
        self.tree = ProcessTree()
        self.reaper = Reaper(self.tree)
        self.killer = TreeKiller(self.tree, self.reaper.reap, clock=clock)
        self.treefile = TreeFile(self.run_dir / "tree.json")
        self._stop_signal: int | None = None

    # -- signals -----------------------------------------------------------

    def request_stop(self, signum: int, _frame: Any = None) -> None:
        """Signal handler: only records; the loop acts at its next poll."""
        if self._stop_signal is None:
            self._stop_signal = signum

    def _sleep(self, seconds: float) -> bool:
        """Sleep in small steps; False if a stop was requested meanwhile."""
        deadline = self.clock() + seconds
        while self._stop_signal is None:
            left = deadline - self.clock()
            if left <= 0:
                return True
            time.sleep(min(0.05, left))
        return False

    # -- the run -------------------------------------------------------------

    def run(self, resumed: bool = False) -> int:
        if resumed:
            self.journal.append("run_resumed", attempts_so_far=self.state.attempt, pid=os.getpid())
        else:
            self.journal.append(
                "run_started",
                pid=os.getpid(),
                command=redact_argv(self.config.command),
                run_dir=str(self.run_dir),
                gpu_probe=self.probe.name,
                config={**self.config.to_json(), "command": redact_argv(self.config.command)},
            )
        while True:
            outcome, code = self._attempt(resumed_run=resumed)
            if code is not None:
                return code
            decision = self.config.restart.decide(self.state.history, time.time())
            if not decision.restart:
                return self._finish(decision)
            self.journal.append(
                "restart_scheduled",
                after_attempt=outcome.attempt,
                reason=decision.reason,
                delay_s=round(decision.delay_s, 3),
                cudagraphs="off" if self.state.cudagraphs_off else "on",
                enforce_eager=self.state.enforce_eager,
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

    def _finish_interrupted(self, trainer_code: int | None) -> int:
        sig = self._stop_signal or signal.SIGTERM
        if trainer_code is None:
            code = 128 + sig
        elif trainer_code < 0:
            code = 128 - trainer_code
        else:
            code = trainer_code
        self.journal.append("run_finished", outcome="interrupted", exit_code=code,
                            reason=f"supervisor received {signal.Signals(sig).name}", attempts=self.state.attempt)
        log.warning("run_finished", message=f"interrupted by {signal.Signals(sig).name}; exit {code}")
        return code

    # -- one attempt -----------------------------------------------------------

    def _attempt(self, resumed_run: bool) -> tuple[AttemptOutcome, int | None]:
        st = self.state
        st.attempt += 1
        attempt_dir = self.run_dir / "attempts" / f"attempt-{st.attempt:03d}"
        attempt_dir.mkdir(parents=True, exist_ok=True)
        heartbeat = attempt_dir / "heartbeat.json"

        resume_from, start_step = self._choose_checkpoint(resume=st.attempt > 1 or resumed_run)

        env_overrides = {
            "HANGWATCH_RUN_DIR": str(self.run_dir),
            "HANGWATCH_ATTEMPT": str(st.attempt),
            "HANGWATCH_ATTEMPT_DIR": str(attempt_dir),
            HEARTBEAT_ENV: str(heartbeat),
            "HANGWATCH_CUDAGRAPHS": "0" if st.cudagraphs_off else "1",
        }
        if st.enforce_eager:
            env_overrides["HANGWATCH_ENFORCE_EAGER"] = "1"
        if resume_from is not None:
            env_overrides["HANGWATCH_RESUME_FROM"] = str(resume_from)
        if isinstance(self.probe, FileProbe):
            env_overrides[SIM_GPU_ENV] = str(self.probe.path)
        argv = list(self.config.command)
        if resume_from is not None and self.config.resume_arg:
            argv += shlex.split(self.config.resume_arg.replace("{checkpoint}", shlex.quote(str(resume_from))))

        env = {k: v for k, v in os.environ.items() if not k.startswith("HANGWATCH_") or k == "HANGWATCH_CONFIG"}
        env.update(env_overrides)
        started = self.clock()
        trainer = launch(argv, env, attempt_dir, echo=self.config.echo)
        self.journal.append(
            "attempt_started",
            attempt=st.attempt,
            pid=trainer.pid,
            create_time=trainer.create_time,
            argv=redact_argv(argv),
            env=env_overrides,
            resume_from=str(resume_from) if resume_from else None,
            logs={"stdout": str(trainer.stdout_path), "stderr": str(trainer.stderr_path)},
        )
        log.info(
            "attempt_started",
            message=(
                f"attempt {st.attempt}: pid {trainer.pid}, cuda graphs "
                f"{'off' if st.cudagraphs_off else 'on'}"
                + (", enforce_eager" if st.enforce_eager else "")
                + (f", resuming from {resume_from}" if resume_from else "")
            ),
        )

        verdict, samples, trainer_code = self._watch(trainer, heartbeat)
        evidence = None
        if verdict.kind.is_hang:
            self.journal.append(
                "incident",
                attempt=st.attempt,
                kind=verdict.kind.value,
                onset=verdict.onset,
                detected_at=verdict.detected_at,
                onset_wall=time.time() - (self.clock() - verdict.onset),
                latency_s=round(verdict.detected_at - verdict.onset, 3),
                reason=verdict.reason,
                evidence=dict(verdict.evidence),
                phase=verdict.phase,
            )
            log.error("incident", message=f"{verdict.kind.value} in attempt {st.attempt}: {verdict.reason}")
            evidence = self._capture(verdict, samples, trainer, attempt_dir)
            if verdict.kind is VerdictKind.STALL:
                self._escalate_graph_policy()

        report = self._kill(reason=verdict.kind.value)
        trainer.join_output(timeout=2.0)
        if trainer_code is None:
            self.reaper.reap(also=[trainer.pid])
            trainer_code = self.reaper.exit_code(trainer.pid)
        if trainer_code is not None:
            trainer.popen.returncode = trainer_code  # we reaped it; keep Popen consistent
        if report is not None and report.pids:
            self._wait_gpu_release(report)

        end_step = self._newest_step()
        outcome = AttemptOutcome(st.attempt, verdict.kind, time.time(), start_step, end_step)
        st.history.append(outcome)
        self.journal.append(
            "attempt_ended",
            attempt=st.attempt,
            kind=verdict.kind.value,
            exit_code=trainer_code,
            signal=verdict.signal,
            reason=verdict.reason,
            duration_s=round(self.clock() - started, 3),
            start_step=start_step,
            end_step=end_step,
            evidence_path=str(evidence) if evidence else None,
        )
        if report is not None and not report.confirmed:
            self.journal.append(
                "run_finished", outcome="gave_up", exit_code=EXIT_UNKILLABLE,
                reason=f"{len(report.survivors)} process(es) survived SIGKILL", attempts=st.attempt,
            )
            log.error("run_finished", message="processes survived SIGKILL; not restarting (exit 74)")
            return outcome, EXIT_UNKILLABLE
        if self._stop_signal is not None:
            return outcome, self._finish_interrupted(trainer_code)
        return outcome, None

    def _watch(self, trainer: TrainerProcess, heartbeat: Path) -> tuple[Verdict, list[Sample], int | None]:
        cfg = self.config.detector
        sampler = Sampler(self.tree, self.probe, heartbeat, self.clock)
        detector = Detector(cfg, start=self.clock())
        keep = int(max(cfg.stall_window, cfg.progress_timeout or 0) / cfg.interval) + 30
        samples: collections.deque[Sample] = collections.deque(maxlen=max(keep, 60))
        last_info: dict[str, Any] | None = None
        launched = self.clock()
        first_beat_seen = False
        next_tick = self.clock()
        while True:
            self.reaper.reap(also=[trainer.pid])
            code = self.reaper.exit_code(trainer.pid)
            if code is not None:
                return classify_exit(code, self.clock()), list(samples), code
            if self._stop_signal is not None:
                code = self._forward_stop(trainer)
                return classify_exit(code if code is not None else -self._stop_signal, self.clock()), list(samples), code
            sample = sampler.tick()
            samples.append(sample)
            self.treefile.update(sampler.last_members)
            hb = sample.heartbeat
            if hb is not None and not first_beat_seen:
                first_beat_seen = True
                self.journal.append("first_heartbeat", attempt=self.state.attempt, step=hb.step, phase=hb.phase,
                                    after_launch_s=round(sample.t - launched, 3))
            if hb is not None and hb.info and dict(hb.info) != last_info:
                last_info = dict(hb.info)
                self.journal.append("trainer_info", attempt=self.state.attempt, step=hb.step, phase=hb.phase,
                                    info=last_info)
            verdict = detector.observe(sample)
            if verdict is not None:
                return verdict, list(samples), None
            next_tick += cfg.interval
            delay = next_tick - self.clock()
            if delay < 0:
                next_tick = self.clock()  # we fell behind (a slow probe); do not burst
            elif not self._sleep(delay):
                continue

    def _forward_stop(self, trainer: TrainerProcess) -> int | None:
        """Pass SIGINT/SIGTERM to the trainer's group, give it the grace to exit."""
        sig = self._stop_signal or signal.SIGTERM
        log.warning("forwarding_signal", message=f"received {signal.Signals(sig).name}; forwarding to the trainer")
        proc = next((p for p in self.tree.members() if p.pid == trainer.pid), None)
        if proc is not None:
            try:
                if abs(proc.create_time() - trainer.create_time) < 0.01:
                    os.killpg(trainer.pid, sig)
            except (ProcessLookupError, OSError):
                pass  # exited meanwhile
        deadline = self.clock() + self.config.kill.grace
        while self.clock() < deadline:
            self.reaper.reap(also=[trainer.pid])
            code = self.reaper.exit_code(trainer.pid)
            if code is not None:
                return code
            time.sleep(0.05)
        return None

    # -- recovery steps ----------------------------------------------------------

    def _capture(self, verdict: Verdict, samples: list[Sample], trainer: TrainerProcess, attempt_dir: Path) -> Path | None:
        timeout = self.config.capture_timeout
        tree = [d for d in (describe(p) for p in self.tree.members()) if d is not None]
        request = CaptureRequest(
            run_dir=self.run_dir,
            run_id=self.state.run_id,
            attempt=self.state.attempt,
            verdict=verdict,
            samples=samples,
            tree=tree,
            log_paths={"stdout": trainer.stdout_path, "stderr": trainer.stderr_path, "attempt_dir": attempt_dir},
            detector_config=self.config.detector,
            deadline=time.monotonic() + timeout,
            gpu_probe=self.probe.name,
        )
        result: dict[str, Any] = {}

        def work() -> None:
            try:
                result["path"] = self.capture_hook(request)
            except Exception as exc:  # noqa: BLE001  (a failed capture must not stop recovery)
                result["error"] = f"{type(exc).__name__}: {exc}"
                try:
                    # Keep at least the verdict and the samples that triggered it.
                    result["path"] = SamplesOnlyCapture()(request)
                except Exception as fallback_exc:  # noqa: BLE001
                    result["error"] += f"; samples-only fallback failed too: {fallback_exc}"

        started = self.clock()
        thread = threading.Thread(target=work, name="capture", daemon=True)
        thread.start()
        # Small slack beyond the hook's own deadline for it to finish its rename.
        hard_deadline = started + timeout + 2.0
        while thread.is_alive() and self.clock() < hard_deadline and self._stop_signal is None:
            thread.join(timeout=0.05)
        duration = self.clock() - started
        if thread.is_alive():
            why = "interrupted by a signal" if self._stop_signal is not None else f"deadline of {timeout:.0f} s passed"
            self.journal.append("capture", attempt=self.state.attempt, ok=False, abandoned=True,
                                error=f"capture abandoned: {why}", duration_s=round(duration, 3))
            log.warning("capture_abandoned", message=f"evidence capture abandoned ({why}); killing anyway")
            return None
        path = result.get("path")
        self.journal.append("capture", attempt=self.state.attempt, ok="error" not in result,
                            error=result.get("error"), evidence_path=str(path) if path else None,
                            duration_s=round(duration, 3))
        if path:
            log.info("evidence_captured", message=f"evidence in {path} ({duration:.1f} s)")
        return path

    def _kill(self, reason: str) -> KillReport | None:
        members = self.tree.members()
        if not members:
            self.treefile.update([])
            return None
        report = self.killer.kill(grace=self.config.kill.grace, kill_timeout=self.config.kill.kill_timeout)
        self.treefile.update(self.tree.members())
        self.journal.append("kill", attempt=self.state.attempt, reason=reason, **report.to_json())
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
        if isinstance(self.probe, NoProbe):
            return
        pids = set(report.pids)
        threshold = self.config.kill.gpu_release_mib
        started = self.clock()
        deadline = started + self.config.kill.gpu_release_timeout
        devices = None
        while True:
            devices = self.probe.sample()
            if devices is not None and all(
                (not pids.intersection(d.pids)) if d.pids else d.mem_used_mib <= threshold for d in devices
            ):
                released = True
                break
            if self.clock() >= deadline:
                released = False
                break
            time.sleep(0.2)
        waited = self.clock() - started
        self.journal.append(
            "gpu_released",
            attempt=self.state.attempt,
            released=released,
            waited_s=round(waited, 3),
            devices=[d.to_json() for d in devices] if devices else None,
        )
        if not released:
            log.warning("gpu_not_released", message=(
                f"GPU memory still held {waited:.0f} s after the kill (--gpu-release-timeout); restarting anyway"))

    def _escalate_graph_policy(self) -> None:
        st = self.state
        st.stalls += 1
        if self.config.cudagraphs_after_stall != "off":
            return
        if st.cudagraphs_off and self.config.eager_escalation:
            st.enforce_eager = True
        st.cudagraphs_off = True

    # -- checkpoints -----------------------------------------------------------

    def _choose_checkpoint(self, resume: bool) -> tuple[Path | None, int | None]:
        """The checkpoint to resume from (when ``resume``) and the newest complete step."""
        if not self.config.checkpoint:
            return None, None
        chosen, skipped = newest_complete(self.config.checkpoint)
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
        if not self.config.checkpoint:
            return None
        chosen, _ = newest_complete(self.config.checkpoint)
        return chosen.step if chosen else None


def load_state(run_dir: Path) -> RunState:
    records = read_journal(run_dir / "journal.jsonl")
    if not records:
        raise ValueError(f"{run_dir / 'journal.jsonl'} holds no records")
    return RunState.from_journal(records)
