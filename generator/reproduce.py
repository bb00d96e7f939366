"""Run a kept batch again against a fresh engine: does it wedge?

``hangwatch reproduce`` (``hangwatch.cli.commands.reproduce``) reads a bundle's ``batch.json``
and hands it here. Each run starts a fresh engine in the generator's isolated worker
(``WorkerProcess``: its own session, so a wedged engine is killed as a process group), with
the recorded engine arguments under the chosen graph policy, loads the model's own weights
(``reload_weights``: a reproduction has no trainer to send them), sends the recorded
prompts, ``n``, seed and sampling parameters, and watches the worker's engine step beacon:

* the request returns: ``completed``, with each engine step's time;
* no engine step for ``step_timeout`` seconds while the request is in flight (the deadline the
  supervisor's engine step rule uses): ``wedged``. ``on_wedge`` takes the evidence from the
  still-wedged worker (the CLI's capture), then the worker's group is SIGKILLed;
* the engine could not start, or the request failed: ``failed`` (the runs stop there: the
  next would fail alike).

Policies: ``recorded`` (the arguments as recorded), ``graphs-off``
(``compilation_config.cudagraph_mode = NONE``), ``eager`` (``enforce_eager``); see
``engine_kwargs_for``. Nothing here imports torch: the worker does.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from hangwatch.contract import env as names
from hangwatch.contract.batch import Batch
from hangwatch.contract.heartbeat import engine_beacon_file, read_heartbeat
from hangwatch.generator.applied import AppliedSettings, check_applied
from hangwatch.generator.errors import GeneratorError
from hangwatch.generator.policy import RolloutPolicy, cudagraphs_enabled_in, with_policy
from hangwatch.generator.process import WorkerProcess

POLICIES = ("recorded", "graphs-off", "eager")
#: Engine arguments a reproduction cannot use as recorded, and why (dropped, said so).
_DROPPED = {"distributed_executor_backend": "external_launcher"}
_POLL_S = 0.1
_EXIT_WAIT_S = 3.0  # how long a worker whose start failed may take to exit and say why


def engine_kwargs_for(batch: Batch, policy: str, model: str | None = None) -> tuple[dict[str, Any], list[str]]:
    """The fresh engine's arguments for ``policy`` (one of ``POLICIES``), and notes on what changed.

    The real engine reads its weights from the model (``load_format`` ``auto`` where the
    recorded run had ``dummy``: its weights came from the trainer); ``model`` replaces the
    recorded model path."""
    if policy not in POLICIES:
        raise ValueError(f"unknown policy {policy!r}; choose one of {', '.join(POLICIES)}")
    kwargs, notes = dict(batch.engine_kwargs), []
    if policy == "graphs-off":
        kwargs = with_policy(kwargs, RolloutPolicy(cudagraphs=False, enforce_eager=False))
    elif policy == "eager":
        kwargs = with_policy(kwargs, RolloutPolicy(cudagraphs=False, enforce_eager=True))
    if model is not None:
        kwargs["model"] = model
    for key, value in _DROPPED.items():
        if kwargs.get(key) == value:
            del kwargs[key]
            notes.append(f"dropped {key}={value!r} (the reproduction runs one engine in its own worker)")
    if batch.engine == "vllm" and kwargs.get("load_format", "dummy") == "dummy":
        kwargs["load_format"] = "auto"
        notes.append("load_format=auto: the weights come from the model path, not the trainer's")
    return kwargs, notes


@dataclass(frozen=True)
class Settings:
    """One reproduction: the engine, its final arguments and the request, and the deadlines."""

    engine: str
    engine_kwargs: Mapping[str, Any]
    prompts: list[Any]
    n: int
    seed: int | None
    sampling: Mapping[str, Any]
    work_dir: Path
    step_timeout: float = 60.0
    start_timeout: float = 600.0
    load_timeout: float = 600.0
    recorded_applied: Mapping[str, Any] | None = None


@dataclass
class RunResult:
    """One run's outcome (``completed``, ``wedged``, ``failed``) and its times."""

    index: int
    outcome: str = "failed"
    seconds: dict[str, float] = field(default_factory=dict)
    steps: int = 0
    step_times_s: list[float] = field(default_factory=list)
    stuck_for_s: float | None = None  # a wedge: how long no step had come when it was declared
    applied: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)
    error: str | None = None
    bundle: str | None = None
    worker_pid: int | None = None
    log: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items()}


OnWedge = Callable[[WorkerProcess, Path, RunResult], "str | None"]


def run_all(settings: Settings, times: int, on_wedge: OnWedge | None = None,
            progress: Callable[[RunResult], None] | None = None) -> list[RunResult]:
    """``times`` runs, each on a fresh engine; stops early after a run that could not run."""
    results = []
    for index in range(1, times + 1):
        result = run_once(settings, index, on_wedge)
        results.append(result)
        if progress is not None:
            progress(result)
        if result.outcome == "failed":
            break
    return results


def run_once(settings: Settings, index: int, on_wedge: OnWedge | None = None) -> RunResult:
    result = RunResult(index)
    run_dir = settings.work_dir / f"run-{index}"
    run_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    beacon_base = str(run_dir / "engine-heartbeat.json")
    worker = WorkerProcess(settings.engine, settings.engine_kwargs, log_dir=str(run_dir), grace_s=0.0,
                           connect_timeout=settings.start_timeout, inflight_dir=str(run_dir),
                           extra_env={names.ENGINE_HEARTBEAT: beacon_base, names.ATTEMPT_DIR: str(run_dir)})
    result.log = worker.log_path
    try:
        _start(worker, settings, result)
        _load(worker, settings, result)
        _generate(worker, settings, result, beacon_base, run_dir, on_wedge)
    except (GeneratorError, OSError) as error:
        result.outcome, result.error = "failed", f"{type(error).__name__}: {error}"
    finally:
        if worker.proc is not None:
            if result.outcome == "completed":
                worker.close(timeout=30)
            else:
                if result.outcome == "failed" and worker.alive():
                    # A failed start: the worker is exiting on its own, writing why; let it finish.
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        worker.proc.wait(timeout=_EXIT_WAIT_S)
                worker.kill(grace_s=0)
    if result.outcome == "failed":
        last = _last_log_line(worker.log_path)
        if last:
            result.error = f"{result.error}; the worker's log ends: {last}"
    return result


def _last_log_line(path: str, tail_bytes: int = 8192) -> str | None:
    """The worker log's last line (a failed start's exception), read from the end, bounded."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - tail_bytes))
            lines = handle.read().decode("utf-8", "replace").strip().splitlines()
    except OSError:
        return None
    return lines[-1][:500] if lines else None


def _timed(result: RunResult, name: str, run: Callable[[], Any]) -> Any:
    started = time.monotonic()
    try:
        return run()
    finally:
        result.seconds[name] = round(time.monotonic() - started, 3)


def _start(worker: WorkerProcess, settings: Settings, result: RunResult) -> None:
    def start() -> Any:
        # spawn and connect, not WorkerProcess.start: on a failed connect that kills the worker
        # at once, before it has written why it failed (run_once gives it a moment, then kills).
        worker.spawn()
        worker.connect(settings.start_timeout)
        return worker.request("start", settings.start_timeout)

    report = _timed(result, "start", start)
    result.worker_pid = worker.pid
    applied = AppliedSettings.from_json(report.get("applied") if isinstance(report, dict) else None)
    result.applied = applied.to_json()
    recorded = settings.recorded_applied or {}
    if recorded.get("cudagraph_mode") and recorded.get("cudagraph_mode") != applied.cudagraph_mode:
        result.notes.append(f"the engine applied cudagraph_mode={applied.cudagraph_mode}; the recorded run's "
                            f"applied {recorded.get('cudagraph_mode')}")
    # graphs off asked, graphs applied: not the reproduction that was asked for
    check_applied(cudagraphs_enabled_in(settings.engine_kwargs), applied, requested=settings.engine_kwargs,
                  log_path=worker.log_path)


def _load(worker: WorkerProcess, settings: Settings, result: RunResult) -> None:
    def load() -> None:
        worker.request("wake_weights", settings.load_timeout)
        worker.request("reload_weights", settings.load_timeout)
        worker.request("reset_prefix_cache", settings.load_timeout)
        worker.request("wake_kv", settings.load_timeout)

    _timed(result, "load", load)


def _generate(worker: WorkerProcess, settings: Settings, result: RunResult, beacon_base: str, run_dir: Path,
              on_wedge: OnWedge | None) -> None:
    """Send the request from a thread; watch the engine's step beacon here until it returns or wedges."""
    reply: dict[str, Any] = {}

    def send() -> None:
        try:
            reply["result"] = worker.request("generate", 7 * 24 * 3600.0, prompts=list(settings.prompts),
                                             n=settings.n, seed=settings.seed, sampling=dict(settings.sampling),
                                             step_times=True)
        except BaseException as error:  # noqa: BLE001 - handed to the watching thread
            reply["error"] = error

    started = time.monotonic()
    sender = threading.Thread(target=send, name="hangwatch-reproduce-request", daemon=True)
    sender.start()
    assert worker.pid is not None
    beacon = engine_beacon_file(beacon_base, worker.pid)
    last_token, last_progress = None, started
    while sender.is_alive():
        sender.join(_POLL_S)
        beat = read_heartbeat(beacon)
        now = time.monotonic()
        if beat is not None and beat.token != last_token:
            last_token, last_progress = beat.token, now
            result.steps = int(beat.step or 0)
        if sender.is_alive() and now - last_progress > settings.step_timeout:
            result.seconds["generate"] = round(now - started, 3)
            result.outcome, result.stuck_for_s = "wedged", round(now - last_progress, 3)
            result.error = (f"no engine step for {now - last_progress:.1f} s (step timeout "
                            f"{settings.step_timeout:g} s) after {result.steps} step(s)")
            if on_wedge is not None:
                result.bundle = on_wedge(worker, run_dir, result)
            worker.kill(grace_s=0)
            sender.join(10)
            return
    result.seconds["generate"] = round(time.monotonic() - started, 3)
    if "error" in reply:
        error = reply["error"]
        raise error if isinstance(error, (GeneratorError, OSError)) else GeneratorError(f"{error}")
    answer = reply.get("result") or {}
    result.step_times_s = list(answer.get("step_times_s") or [])
    result.steps = len(result.step_times_s)
    result.outcome = "completed"


def step_summary(times: list[float]) -> str:
    """``N steps, median X ms, slowest Y ms`` (or ``no steps``)."""
    if not times:
        return "no steps"
    ordered = sorted(times)
    median = ordered[len(ordered) // 2]
    return f"{len(times)} steps, median {median * 1000:.1f} ms, slowest {ordered[-1] * 1000:.1f} ms"


def default_work_dir(bundle_name: str) -> Path:
    """``./hangwatch-reproduce-<bundle>-<time>``: where runs' logs and wedge bundles go by default."""
    return Path(os.getcwd()) / f"hangwatch-reproduce-{bundle_name}-{time.strftime('%Y%m%dT%H%M%S')}"
