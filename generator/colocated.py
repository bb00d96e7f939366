"""The trainer-side generator: time-share one device between the trainer and a sleeping engine.

``ColocatedGenerator.generate(prompts, n, seed)`` runs, in order (each a
heartbeat phase and a timing)::

    offload -> stage -> [start, first call only] -> load -> generate -> sleep -> restore

Invariants:
* On any failure or timeout the worker's process group is killed and
  confirmed dead BEFORE the trainer's tensors go back to the device: a wedged
  engine may still hold most of the GPU. If the group cannot be confirmed
  dead, the tensors stay on CPU and ``WorkerUnkillable`` is raised.
* A failed worker is never asked for anything more (not even ``sleep``, which
  on a wedged engine would only burn another timeout). The next call starts
  a fresh worker.
* The engine proves the weights: it fingerprints what it loaded and checks
  full coverage against the manifest; we check it echoes this call's
  manifest digest.
* The engine's GPU worker says what it applied: on start the generator reads
  the cuda-graph and compile mode back from the worker, beats them
  (``applied_cudagraph_mode``, ``applied_compile_mode``; the supervisor journals
  them as ``trainer_info`` for the attempt) and refuses (kills the worker,
  raises ``CudagraphPolicyViolation``) when the policy said graphs off and the
  worker runs them anyway.
* Tensor/pipeline parallelism > 1 is refused before anything is spawned
  (``UnsupportedEngineConfig``): the verified weight sync cannot match shards.
* Errors reach the caller with the worker log's path.
* Engine-level recovery (the supervisor's level 1): when the worker dies under
  a call and the supervisor's control file (``HANGWATCH_CONTROL``) holds a new
  ``restart_engine`` instruction, the generator takes the instruction's policy
  (graphs off), starts a fresh worker and retries the call once, with the same
  prompts and seed. The trainer never notices beyond the time it took.
* Standby worker (``standby=True``): right after the first worker starts (and
  sleeps), a second one is started with the next safer policy (graphs off; eager
  if graphs are already off) and put to sleep at once (level 2: weights and KV
  cache dropped, so it holds little more than its CUDA context). When an engine
  restart asks for exactly that policy, the standby takes over: the retry pays a
  wake and a weight load instead of an engine start (a minute with a real model).
  A standby is spent once; a standby that fails to start or died is only a lost
  shortcut (a warning, then cold starts), never an error of the call. It is
  never asked for anything but ``start`` until it takes over, so it cannot wedge
  while it waits, and the supervisor's engine step rule names the stuck worker,
  so an engine-level kill spares it.
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
import logging
import os
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

import torch

from hangwatch.generator.applied import AppliedSettings, check_applied
from hangwatch.generator.compat import warn_unsupported_versions
from hangwatch.generator.engines.vllm_engine import tensor_parallel_refusal
from hangwatch.generator.errors import (GeneratorError, UnsupportedEngineConfig, WeightMismatch, WorkerTimeout,
                                        WorkerUnkillable)
from hangwatch.generator.offload import TrainerOffload
from hangwatch.generator.policy import RolloutPolicy, cudagraphs_enabled_in, rollout_policy, with_policy
from hangwatch.generator.process import WorkerProcess
from hangwatch.generator.staging import StagedWeights, Stager
from hangwatch.contract import env as names
from hangwatch.contract.control import read_control
from hangwatch.contract.heartbeat import GENERATOR_PHASES, beat, set_context

logger = logging.getLogger(__name__)

PHASES = GENERATOR_PHASES

# Which generator of this trainer process beat an engine restart (a process may hold several:
# the supervisor tells their restarts apart by it, since each counts its own from 1).
_GENERATOR_INDEX = itertools.count()
# What the beats say of an engine restart the generator decided alone (no verdict: the supervisor's
# journal has only these): the failed call's step, and the wall times its request began and its worker died.
_BACKSTOP_INFO = ("engine_restart_step", "engine_restart_onset_wall", "engine_restart_killed_wall")
# The phases whose wedged worker the supervisor restarts alone (level 1): a timeout of ours in one
# of them waits for it, then takes the same path (a wedged weight load once crashed the trainer).
RESTARTABLE_PHASES = ("load", "generate", "sleep")
# How long the supervisor may take from writing its instruction to killing the worker (milliseconds
# normally; a loaded host, a slow kill confirmation) before we kill it ourselves.
_SUPERVISOR_KILL_S = 5.0


@dataclass(frozen=True)
class Timeouts:
    """Seconds per operation. ``generate`` is the backstop: under hangwatch it is raised to
    at least ``HANGWATCH_DETECT_WITHIN`` (the supervisor's engine detection plus capture), so
    that the supervisor, which captures stacks first, acts on a wedge before we do."""

    start: float = 120.0
    op: float = 60.0
    load: float = 120.0
    generate: float = 300.0
    grace: float = 5.0


@dataclass(frozen=True)
class Completion:
    prompt_index: int
    index: int
    text: str
    token_ids: tuple[int, ...]


@dataclass
class CallTimings:
    """Seconds spent in each phase of one ``generate`` call (absent phase: not reached)."""

    seconds: dict[str, float] = field(default_factory=dict)
    ok: bool = False
    error: str | None = None
    worker_pid: int | None = None


def default_log_dir() -> str:
    return (os.environ.get("HANGWATCH_ATTEMPT_DIR") or os.environ.get("HANGWATCH_RUN_DIR")
            or tempfile.mkdtemp(prefix="hangwatch-generator-"))


class ColocatedGenerator:
    def __init__(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer | None,
        *,
        engine: str = "fake",
        engine_kwargs: Mapping[str, Any] | None = None,
        sampling: Mapping[str, Any] | None = None,
        log_dir: str | None = None,
        device: str | None = None,
        staging_dir: str | None = None,
        timeouts: Timeouts = Timeouts(),
        weights: Callable[[], Iterable[tuple[str, torch.Tensor]]] | None = None,
        parent_death_signal: bool = True,
        reuse_staging: bool = True,
        policy: RolloutPolicy | None = None,
        standby: bool = False,
    ):
        refusal = tensor_parallel_refusal(engine_kwargs or {})
        if refusal:
            raise UnsupportedEngineConfig(refusal)
        if engine == "vllm":
            warn_unsupported_versions()
        self.model = model
        self.optimizer = optimizer
        self.engine = engine
        # The attempt's cuda-graph policy (default: the supervisor's HANGWATCH_* variables)
        # is applied under the caller's kwargs, which win; graphs are expected on only if
        # both the policy and the final kwargs leave them on, and the worker must agree.
        self.policy = policy if policy is not None else rollout_policy(os.environ)
        self.engine_kwargs = {"enable_sleep_mode": True, "load_format": "dummy", **self.policy.engine_kwargs(),
                              **(engine_kwargs or {})}
        self.sampling = dict(sampling or {"max_tokens": 8, "temperature": 1.0, "top_p": 1.0})
        self.log_dir = log_dir or default_log_dir()
        self.device = device or str(next(model.parameters()).device)
        self.staging_dir = staging_dir
        self._stager = Stager(staging_dir, reuse=reuse_staging)
        self._detect_within = _seconds(os.environ.get(names.DETECT_WITHIN))  # None: no supervisor to wait for
        self.timeouts = _at_least_detection(timeouts, self._detect_within)
        # Trainer-side names, tied weights once (named_parameters dedups aliases).
        self._weights = weights or (lambda: ((n, p.detach()) for n, p in model.named_parameters()))
        self.parent_death_signal = parent_death_signal
        self.worker: WorkerProcess | None = None
        self.timings: collections.deque[CallTimings] = collections.deque(maxlen=1000)
        self.start_report: dict[str, Any] | None = None
        self.applied: AppliedSettings | None = None
        graphs = self.policy.cudagraphs and cudagraphs_enabled_in(self.engine_kwargs)
        self.beat_info = {"cudagraphs": "on" if graphs else "off",
                          "enforce_eager": bool(self.engine_kwargs.get("enforce_eager"))}
        self._closed = False
        self.control_path = os.environ.get(names.CONTROL)
        seen = read_control(self.control_path)
        self._control_seq = int(seen["seq"]) if seen else 0  # instructions before we started are not ours
        self.engine_restarts = 0
        # The standby: its worker, its policy, what it applied; None once spent or refused.
        self.standby: WorkerProcess | None = None
        if standby and os.environ.get(names.ENGINE_RECOVERY) == "job":
            # --recovery job, or a multi-node cohort: nothing ever restarts the engine alone, so a
            # standby could never take over; it would only cost an engine start and a CUDA context.
            logger.info("no standby engine worker: %s=job (hangwatch restarts the whole job on a wedge)",
                        names.ENGINE_RECOVERY)
            standby = False
        self._standby_policy: RolloutPolicy | None = safer_policy(self.policy) if standby else None
        self._standby_applied: AppliedSettings | None = None
        self._failed_at: str | None = None  # the phase the last call failed in
        self._failed_pid: int | None = None  # the worker the last call failed on
        self._backstop_used = False
        self._request_began: float | None = None  # wall time the failing call's last worker phase began
        self._killed_at: float | None = None  # wall time its worker was confirmed dead
        self._index = next(_GENERATOR_INDEX)

    @property
    def worker_pid(self) -> int | None:
        return self.worker.pid if self.worker else None

    def generate(self, prompts: list[str], n: int, seed: int, *, step: int | None = None) -> list[list[Completion]]:
        """``n`` completions per prompt, in index order; see the module docstring for the protocol."""
        try:
            return self._generate_once(prompts, n, seed, step=step)
        except (GeneratorError, OSError) as first:
            instruction = self._new_instruction() or self._backstop_instruction(first)
            if instruction is None:
                raise
            self._apply_instruction(instruction, first, step)
            return self._generate_once(prompts, n, seed, step=step)

    def _backstop_instruction(self, cause: BaseException) -> dict[str, Any] | None:
        """Our own timeout fired in a phase the supervisor restarts the engine for (generate, or
        the worker's weight load or sleep) and the supervisor gave no instruction (it runs without
        an engine rule, without a GPU probe, or not at all): the same engine restart as level 1,
        decided here, once per generator. The worker is already killed; the policy is the next
        safer one. Any other failure, or a second timeout, reaches the caller."""
        if not isinstance(cause, WorkerTimeout) or self._failed_at not in RESTARTABLE_PHASES \
                or self._backstop_used:
            return None
        if os.environ.get(names.ENGINE_RECOVERY) == "job":
            # --recovery job, or a multi-node cohort: no engine restart alone; hangwatch restarts the job.
            logger.warning("the engine did not answer in its %s phase in time; not restarting it alone (%s=job): "
                           "the error goes to the trainer and hangwatch restarts the job", self._failed_at,
                           names.ENGINE_RECOVERY)
            return None
        policy = safer_policy(self.policy)
        if policy is None:
            return None
        self._backstop_used = True
        logger.warning("the engine did not answer in its %s phase in time and the supervisor gave no instruction: "
                       "restarting the engine from the generator (its %s timeout is the backstop)", self._failed_at,
                       self._failed_at)
        return {"action": "restart_engine", "cudagraphs": "on" if policy.cudagraphs else "off",
                "enforce_eager": policy.enforce_eager, "by": "generator"}

    def _new_instruction(self) -> dict[str, Any] | None:
        """A ``restart_engine`` instruction from the supervisor for our failed worker that we
        have not acted on yet."""
        record = self._pending_instruction()
        if record is not None:
            self._control_seq = int(record["seq"])
        return record

    def _pending_instruction(self) -> dict[str, Any] | None:
        record = read_control(self.control_path)
        if record is None or int(record["seq"]) <= self._control_seq or record.get("action") != "restart_engine":
            return None
        targets = record.get("pgids")
        if isinstance(targets, list) and self._failed_pid not in targets:
            return None  # another rank's worker (a worker leads its own process group)
        return record

    def _await_supervisor(self) -> None:
        """Our generate timeout counts from the request's start, the supervisor's engine rule
        from the engine's last step: a wedge late in a long request reaches our timeout first
        (and a weight load's or sleep's timeout may be shorter than the supervisor's stall window).
        Under hangwatch, give the supervisor its ``HANGWATCH_DETECT_WITHIN`` to take the
        evidence and act (it kills the worker and leaves an instruction) before we kill the
        worker ourselves and lose the evidence. Once its instruction is there, the supervisor kills
        the worker right after (and journals the kill and checks the device): a few seconds more for
        that, or our kill would leave it nothing to kill (journaled as our own restart, unverified)."""
        worker, within = self.worker, self._detect_within
        if worker is None or within is None:
            return
        deadline = time.monotonic() + within
        logger.warning("the engine did not answer in its %s phase in time; waiting up to %.0f s for hangwatch to "
                       "take the evidence and restart it", self._failed_at, within)
        instructed = False
        while time.monotonic() < deadline and worker.alive():
            if not instructed and self._pending_instruction() is not None:
                instructed = True
                deadline = min(deadline, time.monotonic() + _SUPERVISOR_KILL_S)
            time.sleep(0.05 if instructed else 0.2)

    def _apply_instruction(self, instruction: Mapping[str, Any], cause: BaseException, step: int | None = None) -> None:
        """Take the supervisor's policy for the next worker (the dead one is already gone):
        the standby if it runs exactly that policy and is alive, else a cold start. ``step``: the
        failed call's."""
        eager = bool(instruction.get("enforce_eager"))
        graphs = instruction.get("cudagraphs") != "off" and not eager
        self.policy = RolloutPolicy(cudagraphs=graphs, enforce_eager=eager)
        self.engine_kwargs = with_policy(self.engine_kwargs, self.policy)
        self.beat_info.update({"cudagraphs": "on" if graphs else "off", "enforce_eager": eager})
        self.engine_restarts += 1
        self.beat_info["engine_restarts"] = self.engine_restarts
        self.beat_info["engine_restart_generator"] = self._index
        # Who decided this restart: the supervisor journals one the generator decided alone.
        self.beat_info["engine_restart_by"] = "generator" if instruction.get("by") == "generator" else "supervisor"
        # Which of the supervisor's instructions this restart follows: with several ranks beating into
        # one file, the supervisor tells this rank's retry from another's by it.
        seq = instruction.get("seq")
        if isinstance(seq, int) and instruction.get("by") != "generator":
            self.beat_info["engine_restart_seq"] = seq
        else:
            self.beat_info.pop("engine_restart_seq", None)
        for key in _BACKSTOP_INFO:
            self.beat_info.pop(key, None)
        if instruction.get("by") == "generator":
            # No verdict came, so our beats are all the supervisor learns of this restart: which step's
            # rollout wedged, when its request began and when we killed the worker (its journal timed
            # the restart from the first beat it saw, often steps later: 0.25 s lost for ~2 timeouts).
            now = time.time()
            self.beat_info.update({"engine_restart_onset_wall": round(self._request_began or now, 3),
                                   "engine_restart_killed_wall": round(self._killed_at or now, 3)})
            if isinstance(step, int):
                self.beat_info["engine_restart_step"] = step
        standby, self.standby = self.standby, None
        self._standby_policy = None  # spent (or useless) either way
        takes_over = (standby is not None and standby.alive() and self._standby_applied is not None
                      and standby.engine_kwargs == self.engine_kwargs)
        if takes_over:
            assert standby is not None and self._standby_applied is not None
            self.worker, self.applied = standby, self._standby_applied
            self.beat_info.update(self.applied.beat_info())
            standby.note_info(role="active", took_over_at=time.time())
            how = f"the standby worker (pid {standby.pid}, already started)"
        else:
            if standby is not None:
                standby.kill()
            how = "a fresh worker"
        self.beat_info["engine_worker"] = "standby" if takes_over else "cold"
        who = "the generator's backstop" if instruction.get("by") == "generator" else "the supervisor"
        logger.warning("engine worker failed under the call (%s: %s); %s asked for an engine restart with "
                       "cudagraphs %s: retrying the batch on %s", type(cause).__name__, cause, who,
                       self.beat_info["cudagraphs"], how)

    def _generate_once(self, prompts: list[str], n: int, seed: int, *, step: int | None = None) -> list[list[Completion]]:
        if self._closed:
            raise GeneratorError("generate() on a closed ColocatedGenerator")
        if n <= 0:
            raise ValueError(f"n must be positive, got {n}")
        timing = CallTimings()
        self.timings.append(timing)
        self._failed_at = None
        self._request_began = self._killed_at = None  # wall times, for a restart of our own
        current: str | None = None  # the phase running now
        started = time.perf_counter()
        offload = TrainerOffload(self.model, self.optimizer)
        staged: StagedWeights | None = None
        error: BaseException | None = None
        result: list[list[Completion]] = []

        def phase(name: str) -> Callable[[], None]:
            nonlocal current
            current = name
            # Which worker this phase waits on: a stall in load or sleep is that worker's, and the
            # supervisor restarts it alone (a standby beside it is spared to take over).
            waits_on = {"engine_worker_pid": self.worker.pid} if self.worker is not None and self.worker.pid else {}
            set_context(self.beat_info)  # the trainer's own beats carry it too (an engine restart's outcome)
            beat(step=step, phase=name, **self.beat_info, **waits_on)
            if name in RESTARTABLE_PHASES:
                self._request_began = time.time()  # a restart of our own is timed from it
            t0 = time.perf_counter()
            return lambda: timing.seconds.__setitem__(name, time.perf_counter() - t0)

        try:
            done = phase("offload")
            offload.offload()
            done()
            done = phase("stage")
            staged = self._stager.stage(self._weights())
            done()
            if self.worker is None:
                done = phase("start")
                self._start_worker(step)
                done()
            if self._standby_policy is not None and self.standby is None:
                done = phase("standby")
                self._start_standby()
                done()
            worker = self.worker
            assert worker is not None
            timing.worker_pid = worker.pid
            done = phase("load")
            worker.request("wake_weights", self.timeouts.op)
            report = worker.request("load_weights", self.timeouts.load, path=staged.path, manifest=staged.manifest)
            if not isinstance(report, dict) or report.get("digest") != staged.digest:
                raise WeightMismatch(f"worker confirmed digest {report!r}, expected {staged.digest}",
                                     remote_type="", log_path=worker.log_path)
            worker.request("reset_prefix_cache", self.timeouts.op)
            worker.request("wake_kv", self.timeouts.op)
            done()
            done = phase("generate")
            raw = worker.request("generate", self.timeouts.generate, prompts=list(prompts), n=n,
                                 seed=seed, sampling=self.sampling)
            result = _completions(raw, len(prompts), n, worker.log_path)
            done()
            # The rollouts came back on the engine of this many restarts: every later beat says so,
            # so the supervisor tells a retry that worked (a crash after it is the trainer's own)
            # from one that failed.
            self.beat_info["rollouts_ok"] = self.engine_restarts
            done = phase("sleep")  # its beat carries it, and sets it for the trainer's own beats
            worker.request("sleep", self.timeouts.op)
            done()
        except BaseException as caught:
            error = caught
            self._failed_at = current
        finally:
            if staged is not None:
                self._stager.done(staged)
            if error is not None:
                timing.error = f"{type(error).__name__}: {error}"
                self._failed_pid = self.worker.pid if self.worker is not None else None
                if isinstance(error, WorkerTimeout) and current in RESTARTABLE_PHASES:
                    self._await_supervisor()  # a wedge the supervisor restarts the engine for: its evidence first
                try:
                    # A worker that did not answer in time is wedged: it would ignore SIGTERM too.
                    self._kill_worker(at_once=isinstance(error, WorkerTimeout))
                    self._killed_at = time.time()
                except WorkerUnkillable as unkillable:
                    # Never put trainer tensors back next to an engine that may still hold the device.
                    raise unkillable from error
            done = phase("restore")
            offload.restore()
            done()
            timing.seconds["total"] = time.perf_counter() - started
        if error is not None:
            raise error
        timing.ok = True
        return result

    def _new_worker(self, engine_kwargs: Mapping[str, Any], name: str = "generator-worker") -> WorkerProcess:
        return WorkerProcess(self.engine, engine_kwargs, log_dir=self.log_dir, device=self.device,
                             parent_death_signal=self.parent_death_signal, grace_s=self.timeouts.grace,
                             connect_timeout=self.timeouts.start, name=name)

    def _boot(self, worker: WorkerProcess) -> tuple[Any, AppliedSettings]:
        """Spawn and connect ``worker``, start its engine (it ends asleep); its report and what it applied."""
        worker.start(self.timeouts.start)
        report = worker.request("start", self.timeouts.start)
        return report, AppliedSettings.from_json(report.get("applied") if isinstance(report, dict) else None)

    def _start_worker(self, step: int | None) -> None:
        worker = self.worker = self._new_worker(self.engine_kwargs)  # set first: a failed start is killed
        self.start_report, self.applied = self._boot(worker)
        # Every later beat of this attempt carries what the worker applied, so the
        # supervisor's journal has it even if it misses this one.
        self.beat_info.update(self.applied.beat_info())
        self._note_sleep_mode(self.start_report)
        worker.note_info(applied=self.applied.to_json(), cudagraphs_expected=self.beat_info["cudagraphs"])
        set_context(self.beat_info)
        beat(step=step, phase="start", **self.beat_info)
        logger.info("engine worker %s applied cudagraph_mode=%s compile_mode=%s (policy: cudagraphs %s)",
                    worker.pid, self.applied.cudagraph_mode, self.applied.compile_mode, self.beat_info["cudagraphs"])
        check_applied(self.beat_info["cudagraphs"] == "on", self.applied, requested=self.engine_kwargs,
                      log_path=worker.log_path)

    def _note_sleep_mode(self, report: Any) -> None:
        """An engine without sleep mode (vLLM's CPU platform) stays awake between rollouts: said once,
        in the log and in the beats (the supervisor journals ``engine_sleep_mode`` as trainer info)."""
        if not isinstance(report, dict) or report.get("sleep_mode", True) is not False:
            return
        if "engine_sleep_mode" not in self.beat_info:
            logger.warning("the engine's platform (%s) has no sleep mode: the engine stays awake between "
                           "rollouts (its weights and KV cache stay in memory; nothing is freed for training)",
                           report.get("platform", "unknown"))
        self.beat_info["engine_sleep_mode"] = f"unavailable ({report.get('platform', 'unknown')} platform)"

    def _start_standby(self) -> None:
        """Start the standby (asleep after ``start``, like every worker); on any failure
        give up on it for good: it is a shortcut, and must never fail or slow every call."""
        policy = self._standby_policy
        assert policy is not None
        kwargs = with_policy(self.engine_kwargs, policy)
        standby = self._new_worker(kwargs, name="generator-standby")
        try:
            _, applied = self._boot(standby)
            check_applied(policy.cudagraphs and cudagraphs_enabled_in(kwargs), applied, requested=kwargs,
                          log_path=standby.log_path)
        except (GeneratorError, OSError) as error:
            logger.warning("the standby engine worker did not start (%s); engine restarts will start a worker "
                           "cold", error)
            self._standby_policy = None
            if standby.proc is not None:
                standby.kill()
            return
        standby.note_info(role="standby", applied=applied.to_json(), cudagraphs_expected=policy.beat_info()["cudagraphs"])
        self.standby, self._standby_applied = standby, applied
        logger.info("standby engine worker %s ready, asleep (cudagraphs %s, enforce_eager %s)", standby.pid,
                    policy.beat_info()["cudagraphs"], policy.enforce_eager)

    def _kill_worker(self, at_once: bool = False) -> None:
        """``at_once``: SIGKILL without the SIGTERM grace (a worker that timed out)."""
        worker, self.worker = self.worker, None
        # What a dead worker applied must not be reported next to the next worker's policy
        # ("cudagraphs off" beside a stale FULL_AND_PIECEWISE reads as a violation).
        self.applied = None
        for key in AppliedSettings("NONE", None, 0).beat_info():
            self.beat_info.pop(key, None)
        if worker is not None and worker.proc is not None:
            worker.kill(grace_s=0.0 if at_once else None)

    def close(self) -> None:
        """Close the engine gracefully (kill if it does not answer); idempotent."""
        self._closed = True
        set_context({})  # the engine is gone: later beats no longer speak for it
        self._stager.discard()
        for worker in (self.worker, self.standby):
            if worker is not None and worker.proc is not None:
                worker.close(self.timeouts.op)
        self.worker = self.standby = None

    def __enter__(self) -> "ColocatedGenerator":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _seconds(value: str | None) -> float | None:
    """``HANGWATCH_DETECT_WITHIN`` as seconds; None when unset or not a sane number (said so)."""
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        seconds = float("nan")
    if not 0 < seconds <= 7 * 24 * 3600:
        logger.warning("ignoring %s=%r: not a number of seconds", names.DETECT_WITHIN, value)
        return None
    return seconds


def _at_least_detection(timeouts: Timeouts, floor: float | None) -> Timeouts:
    """Our generate timeout is the backstop: under hangwatch it must not fire before the
    supervisor could have caught a wedge at the request's start and taken the evidence
    (``HANGWATCH_DETECT_WITHIN``). A shorter one is raised, and said so. (A wedge later in
    the request is covered by ``_await_supervisor``.)"""
    if floor is None or timeouts.generate >= floor:
        return timeouts
    logger.warning("generate timeout %.0f s is shorter than hangwatch's engine detection and capture (%.0f s): "
                   "raised to %.0f s so that the supervisor takes the evidence first", timeouts.generate, floor, floor)
    return dataclasses.replace(timeouts, generate=floor)


def _completions(raw: Any, prompts: int, n: int, log_path: str) -> list[list[Completion]]:
    per_prompt = raw.get("completions") if isinstance(raw, dict) else None
    if not isinstance(per_prompt, list) or len(per_prompt) != prompts:
        raise GeneratorError(f"engine returned {raw!r:.200} for {prompts} prompts", log_path=log_path)
    out = []
    for p, completions in enumerate(per_prompt):
        if [c.get("index") for c in completions] != list(range(n)):
            raise GeneratorError(f"prompt {p}: incomplete completions {[c.get('index') for c in completions]}",
                                 log_path=log_path)
        out.append([Completion(p, c["index"], c["text"], tuple(c["token_ids"])) for c in completions])
    return out


def safer_policy(policy: RolloutPolicy) -> RolloutPolicy | None:
    """The policy an engine restart after a stall asks for: graphs off, then eager; None past eager."""
    if policy.enforce_eager:
        return None
    if policy.cudagraphs:
        return RolloutPolicy(cudagraphs=False, enforce_eager=False)
    return RolloutPolicy(cudagraphs=False, enforce_eager=True)
