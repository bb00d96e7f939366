"""Level 1, engine-only recovery: kill the wedged rollout engine's worker, the trainer lives on.

Which level a verdict gets is decided by ``attempt.recovery_level``; this carries level 1
out and remembers what the run needs about it (docs/generator.md, docs/journal.md)::

    write the control file (the policy the trainer's generator restarts its engine with,
    and which worker it is for) -> SIGKILL the worker's process group, no grace
    -> ``engine_restart``; later, at the first heartbeat past the wedged step of the
       same attempt, ``engine_recovered``

The control file goes first so that the generator, woken by its worker's death, already
finds its instruction. The kill has no grace: the worker holds nothing worth saving (the
trainer keeps the weights and retries the batch) and the wedge it is killed for ignores
SIGTERM, so a grace would only add the quiet rule's second to every engine restart. With a
GPU probe the kill is then verified on the device too: no killed pid may still hold one
(``gpu_release.engine_gpu_released``, bounded by ``--gpu-release-timeout``); a worker whose
memory the driver never freed would fail the retry for lack of it, so the job is restarted
instead. The generator does not wait for this: a process confirmed dead has normally had
its memory freed as it exited, and the check journals that it was. A stuck worker already
gone (the generator's own timeout killed it first) leaves nothing to kill: the restart is
the generator's, and it is journaled as such.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any, Callable

import structlog

from hangwatch.contract.control import write_control
from hangwatch.contract.heartbeat import GENERATOR_PHASES, Heartbeat
from hangwatch.contract.journal import Journal
from hangwatch.contract.redact import redact_value
from hangwatch.contract.samples import DeviceSample, Sample
from hangwatch.contract.verdict import Verdict
from hangwatch.supervisor.decide.attempt import GraphPolicy, RecoveryLevel
from hangwatch.supervisor.decide.detector import WORKER_CALLS
from hangwatch.supervisor.decide.gpu_release import engine_gpu_released
from hangwatch.supervisor.contain.tree_ops import TreeOps

log = structlog.get_logger("hangwatch.run")

# What of the trainer's beat info shows the engine the retry ran on (the generator beats it).
_ENGINE_INFO = ("cudagraphs", "enforce_eager", "engine_restarts", "engine_worker")


class EngineLevel:
    """The run's engine restarts: how many (the control file's seq), when the last one was
    (for the retry window) and the one still waiting for the trainer to progress."""

    def __init__(self, tree: TreeOps, journal: Callable[[], Journal], clock: Callable[[], float], *,
                 kill_timeout: float, devices: Callable[[], Sequence[DeviceSample] | None] | None = None,
                 sleep: Callable[[float], bool] | None = None, release_timeout: float = 60.0) -> None:
        """``devices``: the GPU probe's sample (None without a probe: nothing to verify);
        ``sleep``: False when a stop came meanwhile (the wait ends, unverified)."""
        self.tree = tree
        self.journal = journal
        self.clock = clock
        self.kill_timeout = kill_timeout
        self.devices = devices
        self.sleep = sleep
        self.release_timeout = release_timeout
        self.restarts = 0
        self.last_restart: float | None = None
        self._pending: dict[str, Any] | None = None
        # The generators' own engine restarts already journaled: (attempt, trainer pid, which of
        # the process's generators, its count).
        self._backstops: set[tuple[int, int, Any, int]] = set()
        # (attempt, engines that had a request in flight under the old policy at the last engine
        # restart and were not killed by it): with several ranks, another stuck one among them
        # is the same wedge, not the retry failing.
        self._old_policy: tuple[int, frozenset[int]] | None = None
        # The attempt whose last restart was journaled as the generator's own (the stuck worker
        # was gone already): the backstop beat that follows is that restart, not another.
        self._claimed: int | None = None
        # (trainer pid, the generator's restart count) of the last beat seen that had one.
        self._restarts_seen: tuple[int, int] | None = None

    def ran_old_policy(self, attempt: int, engine_pid: Any) -> bool:
        """Whether ``engine_pid`` (``stuck_engine``) was in a request, a weight load or a sleep under
        the old policy at this attempt's last engine restart (and survived it): stuck now, it is that
        wedge on another rank."""
        return self._old_policy is not None and self._old_policy[0] == attempt and engine_pid in self._old_policy[1]

    def restart(self, attempt: int, policy: GraphPolicy, level: RecoveryLevel, verdict: Verdict,
                control: Path, evidence: Path | None, *, in_flight: frozenset[int] = frozenset()) -> bool:
        """Tell the trainer the policy, kill only the engine worker's group; True if that worked
        (False: the caller restarts the job, level 2). ``in_flight``: the engines in a call at the
        verdict (``engines_in_a_call``)."""
        journal = self.journal()
        # Engines still on the old policy after this restart: the ones left of an earlier restart's
        # (a second rank's stuck engine, restarted now), else the other in-flight ones at this verdict.
        stuck = stuck_engine(verdict.evidence)
        old = self._old_policy[1] if self.ran_old_policy(attempt, stuck) else in_flight
        self._old_policy = (attempt, frozenset(old) - {stuck})
        if not level.engine_pgids:
            return self._restarted_by_generator(attempt, level, verdict, evidence)
        self.restarts += 1
        # ``pgids``: the workers it is for (a worker leads its own group), so that another rank's
        # generator, failing later for another reason, does not take it for its own.
        try:
            write_control(control, {"seq": self.restarts, "action": "restart_engine", "attempt": attempt,
                                    "cudagraphs": "off" if policy.cudagraphs_off else "on",
                                    "enforce_eager": policy.enforce_eager, "reason": verdict.reason,
                                    "pgids": sorted(level.engine_pgids)})
        except OSError as exc:  # a full disk: without the instruction the trainer cannot retry alone
            return self._failed(attempt, level, f"the control file could not be written: {exc}")
        started = self.clock()
        report = self.tree.kill_groups(level.engine_pgids, grace=0.0, kill_timeout=self.kill_timeout)
        if report is None:
            # Gone between the decision and the kill: the generator, waiting on our instruction
            # (written above), killed it itself and restarts it with that policy.
            return self._restarted_by_generator(attempt, level, verdict, evidence)
        journal.append("kill", attempt=attempt, reason=f"{verdict.kind.value} (engine only)", scope="engine",
                       **report.to_json())
        if not report.confirmed:
            return self._failed(attempt, level, "the engine worker could not be killed")
        killed_at = self.clock()
        if self._await_release(attempt, report.pids) is False:
            return self._failed(attempt, level, f"the killed engine worker still held GPU memory "
                                                f"{self.release_timeout:g} s later (--gpu-release-timeout)")
        self._restarted(attempt, verdict, killed_at, seq=self.restarts)
        journal.append("engine_restart", attempt=attempt, ok=True, pgids=sorted(level.engine_pgids),
                       pids=list(report.pids), reason=level.reason,
                       cudagraphs="off" if policy.cudagraphs_off else "on", enforce_eager=policy.enforce_eager,
                       onset_to_killed_s=round(killed_at - verdict.onset, 3), kill_s=round(killed_at - started, 3),
                       evidence_path=str(evidence) if evidence else None)
        log.warning("engine_restart", message=(
            f"only the rollout engine was wedged: killed its worker ({list(report.pids)}); the trainer "
            f"restarts it with {policy.describe()} and retries the batch"))
        return True

    def _restarted(self, attempt: int, verdict: Verdict, killed_at: float | None = None,
                   seq: int | None = None) -> float:
        """Start the retry window and wait for the trainer's progress; the time of it. ``seq``: the
        control instruction's, which the generator that acts on it beats (``engine_restart_seq``)."""
        now = self.last_restart = self.clock() if killed_at is None else killed_at
        self._pending = {"attempt": attempt, "onset": verdict.onset, "killed_at": now,
                         "step": verdict.evidence.get("step"),
                         # The generator's count before this restart: its beats keep saying an earlier
                         # retry came back (rollouts_ok == engine_restarts) until it acts on this one.
                         # (None when the generator restarted alone first: its count is this restart's.)
                         "baseline": self._restarts_seen if killed_at is not None else None,
                         "seq": seq}
        return now

    def ended(self, attempt: int, hb: Heartbeat | None, t: float, *, hang: bool = False) -> None:
        """The attempt ended without a hang (the trainer exited, crashed or was stopped), or
        ``hang``: a new hang came, while an engine restart of it waited for progress: the last beat
        it left decides. Its retried rollouts came back (or its step moved past the wedged one):
        the engine was recovered, whatever ended the trainer or stalled it after (a trainer whose
        last rollout was the retried one exits before any sample sees it go on; one whose own
        threads stall in the retried step never moves past it: both once read 'not recovered' in
        status and the report, though the engine had given the rollouts back)."""
        pending = self._pending
        if pending is None or pending["attempt"] != attempt or hb is None:
            return
        self.note_beat(hb)
        if pending.get("retried") or self._progressed(pending, hb):
            if hang:
                # Timed at the first sample that saw the retried rollouts back, not at the new hang.
                self._journal_recovered(attempt, hb, pending.get("retried_t", t), before_hang=True)
            else:
                self._journal_recovered(attempt, hb, t, at_exit=True)

    def unrecovered(self, attempt: int) -> bool:
        """An engine restart of ``attempt`` whose retry has not yet come back: its rollouts not
        returned (the generator's ``rollouts_ok``) and the trainer not past the wedged step."""
        pending = self._pending
        return pending is not None and pending["attempt"] == attempt and not pending.get("retried")

    def note_beat(self, hb: Heartbeat | None) -> None:
        """A trainer beat (each tick's, and the last one left when the trainer exits): the
        generator says ``rollouts_ok == engine_restarts`` once the retried call's rollouts came
        back on the restarted engine."""
        info = (hb.info or {}) if hb is not None else {}
        restarts = info.get("engine_restarts")
        if not isinstance(restarts, int) or restarts < 1:
            return
        self._restarts_seen = (hb.pid, restarts) if hb is not None else None
        if self._pending is None:
            return
        baseline = self._pending.get("baseline")
        if baseline is not None and hb is not None and hb.pid == baseline[0] and restarts <= baseline[1]:
            return  # an earlier restart's beat: the generator has not acted on this one yet
        told, wanted = info.get("engine_restart_seq"), self._pending.get("seq")
        if isinstance(told, int) and wanted is not None and told != wanted:
            # Another instruction's restart: another rank's generator (ranks share the heartbeat
            # file; its own retry came back long ago), or this one's before it acted on this one.
            return
        # What the restarted engine runs, for ``engine_recovered``: the beat that shows the trainer
        # past the wedged step may carry none of it (a checkpoint's beat, a callback's plain one).
        self._pending["engine"] = _engine_info(info)
        if info.get("rollouts_ok") == restarts:
            self._pending["retried"] = True

    def retry_failed(self, attempt: int, why: str) -> None:
        """The retry after the engine restart failed (the trainer crashed, or wedged again):
        journal it as a failed engine restart, escalated to the job (level 2)."""
        self._pending = None
        self.journal().append("engine_restart", attempt=attempt, ok=False, pgids=[], reason=why, escalated_to="job")
        log.error("engine_restart", message=f"{why}; restarting the job")

    def _await_release(self, attempt: int, pids: Collection[int]) -> bool | None:
        """Poll the GPU probe until no killed pid holds a device (bounded); journal the answer:
        True, False (still held at the deadline) or None (the probe lists no processes, or
        gave no sample). Nothing without a probe."""
        if self.devices is None or not pids:
            return None
        started = self.clock()
        answer: bool | None = None
        devices: Sequence[DeviceSample] | None = None
        while True:
            devices = self.devices()
            answer = engine_gpu_released(devices, pids) if devices is not None else None
            if answer is not False:  # released, or nothing to tell (only a listed holder is waited for)
                break
            if self.clock() - started >= self.release_timeout or self.sleep is None:
                break
            if not self.sleep(0.2):
                answer = None  # a stop: the run ends, the release is not ours to judge any more
                break
        waited = self.clock() - started
        self.journal().append("gpu_released", attempt=attempt, scope="engine", released=answer,
                              waited_s=round(waited, 3), devices=[d.to_json() for d in devices] if devices else None)
        if answer is False:
            log.warning("gpu_not_released", message=(
                f"the killed engine worker {sorted(pids)} still held GPU memory {waited:.0f} s after the kill"))
        return answer

    def _failed(self, attempt: int, level: RecoveryLevel, why: str) -> bool:
        self.journal().append("engine_restart", attempt=attempt, ok=False, pgids=sorted(level.engine_pgids),
                              reason=why, escalated_to="job")
        log.error("engine_restart", message=f"{why}; restarting the job")
        return False

    def _restarted_by_generator(self, attempt: int, level: RecoveryLevel, verdict: Verdict,
                                evidence: Path | None) -> bool:
        self._claimed = attempt
        now = self._restarted(attempt, verdict)
        self.journal().append("engine_restart", attempt=attempt, ok=True, pgids=sorted(level.engine_pgids), pids=[],
                              reason=level.reason, by="generator", onset_to_killed_s=round(now - verdict.onset, 3), kill_s=0.0,
                              evidence_path=str(evidence) if evidence else None)
        log.warning("engine_restart", message=f"{level.reason}; nothing left to kill, watching the trainer")
        return True

    def observe(self, attempt: int, sample: Sample) -> GraphPolicy | None:
        """Journal ``engine_recovered`` at the first heartbeat past the step the engine wedged
        in, in the same attempt (a restart whose retry failed is never 'recovered' by the next
        attempt's progress). A restart the trainer's generator decided alone (its generate
        timeout fired and no verdict came: no GPU probe, the engine's first request) is
        journaled too, and its policy returned for the run to keep."""
        policy = self._backstop(attempt, sample)
        self.note_beat(sample.heartbeat)
        pending = self._pending
        if pending is not None and pending.get("retried") and "retried_t" not in pending:
            pending["retried_t"] = sample.t  # the retried rollouts seen back (a later hang is timed from it)
        self._recovered(attempt, sample)
        return policy

    def _backstop(self, attempt: int, sample: Sample) -> GraphPolicy | None:
        hb = sample.heartbeat
        info = (hb.info or {}) if hb is not None else {}
        count = info.get("engine_restarts")
        if hb is None or info.get("engine_restart_by") != "generator" or not isinstance(count, int):
            return None
        generator = info.get("engine_restart_generator")
        key = (attempt, hb.pid, generator if isinstance(generator, int) else None, count)
        if key in self._backstops:
            return None
        if len(self._backstops) >= 1024:
            self._backstops.clear()
        self._backstops.add(key)
        if self._claimed == attempt:
            # The supervisor had its verdict and journaled this restart as the generator's already.
            self._claimed = None
            return None
        # When it happened, as the generator beat it (the wall times its failed request began and its
        # worker died), on our clock; else this beat's time, the first that told of it.
        onset, killed = (sample.t - (sample.wall - w) if w is not None else sample.t
                         for w in _backstop_walls(info, sample.wall))
        self.last_restart = killed
        # The wedged step: the generator's failed call's; else this beat's while the retried call runs
        # (a beat past the rollout, the supervisor first seeing the restart on it, shows the trainer on).
        step = info.get("engine_restart_step")
        if not isinstance(step, int) or isinstance(step, bool):
            step = hb.step if hb.phase in GENERATOR_PHASES or not isinstance(hb.step, int) else hb.step - 1
        policy = GraphPolicy(info.get("cudagraphs") == "off", bool(info.get("enforce_eager")))
        self.journal().append("engine_restart", attempt=attempt, ok=True, pgids=[], pids=[], by="generator",
                              backstop=True, step=step, cudagraphs="off" if policy.cudagraphs_off else "on",
                              enforce_eager=policy.enforce_eager, onset_to_killed_s=round(killed - onset, 3),
                              reason="the trainer's generator restarted its engine on its own generate timeout: "
                                     "no hang verdict came first, so no evidence was taken")
        log.warning("engine_restart", message=f"the trainer (pid {hb.pid}) restarted its rollout engine itself "
                                              f"after its generate timeout, with {policy.describe()}")
        # Its retry is watched like any engine restart's: ``engine_recovered`` once the trainer goes on
        # (timed from the generator's failed request, or this beat), a job restart if it fails. Before, a
        # backstop restart was never recovered: status said 'no progress after it' all run long.
        self._pending = {"attempt": attempt, "onset": onset, "killed_at": killed, "step": step, "backstop": True}
        return policy

    def _recovered(self, attempt: int, sample: Sample) -> None:
        pending, hb = self._pending, sample.heartbeat
        if pending is not None and pending["attempt"] != attempt:
            self._pending = pending = None
        if pending is None or hb is None or not self._progressed(pending, hb):
            return
        self._journal_recovered(attempt, hb, sample.t)

    @staticmethod
    def _progressed(pending: dict[str, Any], hb: Heartbeat) -> bool:
        """Whether ``hb`` shows the trainer past the step the engine wedged in."""
        if pending["step"] is not None:
            return hb.step is not None and hb.step > pending["step"]
        # A trainer that beats no step: recovered at its first own beat after the rollout.
        return not (hb.phase in GENERATOR_PHASES or hb.token == pending.setdefault("token", hb.token))

    def _journal_recovered(self, attempt: int, hb: Heartbeat, t: float, **extra: Any) -> None:
        pending = self._pending
        assert pending is not None
        self._pending = None
        # What the fresh worker applied, so the journal shows the retry ran graphs off: this beat's,
        # else the last the generator beat since the restart.
        info = hb.info or {}
        engine = _engine_info(info) if isinstance(info.get("engine_restarts"), int) else pending.get("engine", {})
        if pending.get("backstop"):
            extra["backstop"] = True
        self.journal().append("engine_recovered", attempt=attempt, step=hb.step,
                              onset_to_progress_s=round(t - pending["onset"], 3),
                              kill_to_progress_s=round(t - pending["killed_at"], 3), engine=redact_value(engine),
                              **extra)
        log.info("engine_recovered", message=(
            f"the trainer progressed (step {hb.step}) {t - pending['killed_at']:.1f} s after the engine restart"
            if not (extra.get("at_exit") or extra.get("before_hang")) else
            f"the trainer's retried rollouts came back after the engine restart; it then "
            f"{'exited' if extra.get('at_exit') else 'hung itself'} (step {hb.step})"))


def stuck_engine(evidence: Mapping[str, Any]) -> Any:
    """The engine worker a verdict names as stuck: the one silent in a request (``engine_pid``),
    else the one in a weight load or sleep (``waiting_on``); None if neither."""
    pid = evidence.get("engine_pid")
    return pid if pid is not None else evidence.get("waiting_on")


def engines_in_a_call(sample: Sample | None) -> frozenset[int]:
    """The engines a sample shows in a request, a weight load or a sleep: at an engine restart they
    run the old policy, and one of them stuck later is the same wedge on another rank (two ranks'
    workers wedged in the same load were taken for a second wedge: the job restarted, eager)."""
    return frozenset(e.pid for e in (sample.engine if sample is not None else ())
                     if e.phase == "generate" or e.phase in WORKER_CALLS)


def _backstop_walls(info: Mapping[str, Any], now_wall: float) -> tuple[float | None, float | None]:
    """The generator's wall times of its own engine restart (its failed request's start, its worker's
    death); both None unless each is a time no later than ``now_wall`` (a second of skew allowed) and
    within a week of it, the request's start no later than the death (an older generator beats none)."""
    def wall(key: str) -> float | None:
        value = info.get(key)
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and \
            now_wall - 7 * 86400 <= value <= now_wall + 1.0
        return min(float(value), now_wall) if ok else None

    began, killed = wall("engine_restart_onset_wall"), wall("engine_restart_killed_wall")
    if began is None or killed is None or began > killed:
        return None, None
    return began, killed


def _engine_info(info: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in info.items() if k in _ENGINE_INFO or k.startswith("applied_")}
