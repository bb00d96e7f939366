"""The engine worker process: ``python -m hangwatch.generator.worker`` (config as one JSON line on stdin).

Started by ``hangwatch.generator.process.WorkerProcess`` in its own session. It reads
its config (socket path, key, expected parent pid, engine name and kwargs)
from stdin, so the key is never on disk, in argv or in the environment.

Invariants:
* The parent-death signal is SIGKILL, armed first thing, then ``getppid()``
  is compared with the expected parent: if the parent died before prctl ran,
  the signal would never come, so we exit ourselves. SIGKILL because a wedged
  engine ignores SIGTERM (its thread is stuck where no Python handler runs).
* A connection is served only after it passes the HMAC handshake; a failed
  one is logged and dropped and the worker keeps listening.
* One authenticated controller; when it goes away (EOF) the worker closes
  the engine and exits: a worker without its trainer has no reason to live.
* An operation that raises is answered with ``ok: false`` and the exception's
  type name; the worker stays up and the trainer decides.
* Its evidence is armed as a trainer process's is (``contract.stackdump.arm``): stacks
  on the attempt's signal, the supervisor as its ptracer.
* Each ``generate`` request is kept as ``inflight-<pid>.json`` in the config's ``inflight_dir``
  (the attempt dir) while it runs (``hangwatch.contract.batch``): a wedged request's record is
  there for the incident capture, which copies it into the bundle as ``batch.json``.
"""

from __future__ import annotations

import ctypes
import json
import os
import select
import signal
import socket
import sys
import time
import traceback
from typing import Any

from hangwatch.contract import stackdump
from hangwatch.contract.batch import InflightFile, make_record
from hangwatch.contract.versions import installed
from hangwatch.generator import protocol
from hangwatch.generator.beacon import EngineBeacon
from hangwatch.generator.engines import make_engine
from hangwatch.generator.errors import AuthenticationFailed, GeneratorError, WorkerDied, WorkerTimeout
from hangwatch.generator.policy import cudagraphs_enabled_in

PR_SET_PDEATHSIG = 1
#: The packages whose versions a kept batch records.
BATCH_VERSIONS = ("hangwatch", "torch", "vllm", "transformers", "trl")


def log(message: str) -> None:
    print(f"[generator-worker pid={os.getpid()} {time.strftime('%H:%M:%S')}] {message}", flush=True)


def arm_parent_death_signal(expected_parent: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    # Note: the signal follows the parent *thread* that forked us; the
    # trainer-side spawn therefore runs on a thread that outlives the worker.
    if os.getppid() != expected_parent:
        log(f"parent {expected_parent} died before the parent-death signal was armed; exiting")
        os._exit(1)


def _on_sigterm(signum: int, _frame: Any) -> None:
    # Unwinds to the engine close in main(). Installing a handler also matters
    # for the wedge: with the default disposition a SIGTERM delivered to any
    # other thread would kill the process, which a real wedged engine does not do.
    raise SystemExit(128 + signum)


def check_completions(per_prompt: list[list[dict[str, Any]]], prompts: int, n: int) -> list[list[dict[str, Any]]]:
    """Completions in index order, exactly ``n`` per prompt, or ``ValueError``."""
    if len(per_prompt) != prompts:
        raise ValueError(f"engine returned outputs for {len(per_prompt)} prompts, expected {prompts}")
    ordered = []
    for i, completions in enumerate(per_prompt):
        completions = sorted(completions, key=lambda c: c["index"])
        indices = [c["index"] for c in completions]
        if indices != list(range(n)):
            raise ValueError(f"prompt {i}: completion indices {indices}, expected 0..{n - 1}")
        ordered.append([{"index": c["index"], "text": c["text"], "token_ids": list(c["token_ids"])}
                        for c in completions])
    return ordered


class Worker:
    def __init__(self, config: dict[str, Any]):
        self.config = config
        self.engine = make_engine(config["engine"], config.get("engine_kwargs") or {})
        self.beacon = EngineBeacon()
        self.closing = False
        self.inflight = InflightFile(config.get("inflight_dir"))
        self.applied: Any = None  # what the engine's start reported it applied
        self.weights: dict[str, Any] | None = None  # the fingerprint of the weights last loaded
        self.generate_calls = 0
        self._versions: dict[str, str] | None = None

    def dispatch(self, op: str, args: dict[str, Any]) -> Any:
        engine = self.engine
        if op == "ping":
            time.sleep(float(args.get("delay_s", 0)))
            return {"pid": os.getpid(), "token": args.get("token")}
        if op == "start":
            report = engine.start()
            self.applied = report.get("applied") if isinstance(report, dict) else None
            return report
        if op == "wake_weights":
            return self._call("load", engine.wake_weights)
        if op == "load_weights":
            report = self._call("load", lambda: engine.load_weights(args["path"], args["manifest"]))
            self.weights = _fingerprint(report, "trainer")
            return report
        if op == "reload_weights":  # the engine's own weights (its model path), for a reproduction
            report = self._call("load", engine.reload_weights)
            self.weights = _fingerprint(report, "model")
            return report
        if op == "reset_prefix_cache":
            return self._call("load", engine.reset_prefix_cache)
        if op == "wake_kv":
            return self._call("load", engine.wake_kv)
        if op == "generate":
            return self._generate(args)
        if op == "sleep":
            return self._call("sleep", engine.sleep)
        if op == "close":
            self.closing = True
            return engine.close()
        raise ValueError(f"unknown operation {op!r}")

    def _generate(self, args: dict[str, Any]) -> dict[str, Any]:
        """One request, kept in flight while it runs; ``step_times``: each engine step's seconds too."""
        n, seed = int(args["n"]), (None if args.get("seed") is None else int(args["seed"]))
        prompts, sampling = args["prompts"], args.get("sampling") or {}
        self.generate_calls += 1
        if self.inflight.path is not None and not self.inflight.write(self._record(prompts, n, seed, sampling)):
            log(f"could not keep the batch in flight: {self.inflight.failed}")
        steps: list[float] = []
        last = [time.monotonic()]

        def timed_step() -> None:
            now = time.monotonic()
            steps.append(round(now - last[0], 6))
            last[0] = now
            self.beacon.step()

        on_step = timed_step if args.get("step_times") else self.beacon.step
        self.beacon.begin()
        try:
            outputs = self.engine.generate(prompts, n, seed, sampling, on_step=on_step,
                                           before_step=self.beacon.step_started)
        finally:
            self.beacon.end()
            self.inflight.clear()
        result: dict[str, Any] = {"completions": check_completions(outputs, len(prompts), n)}
        if args.get("step_times"):
            result["step_times_s"] = steps
        return result

    def _record(self, prompts: list[Any], n: int, seed: int | None, sampling: dict[str, Any]) -> dict[str, Any]:
        if self._versions is None:
            self._versions = {"python": sys.version.split()[0], **installed(BATCH_VERSIONS)}
        kwargs = self.config.get("engine_kwargs") or {}
        return make_record(engine=self.config["engine"], engine_kwargs=kwargs, prompts=prompts, n=n, seed=seed,
                           sampling=sampling, source="worker", applied=self.applied, weights=self.weights,
                           engine_call=self.generate_calls, versions=self._versions,
                           policy={"cudagraphs": "on" if cudagraphs_enabled_in(kwargs) else "off",
                                   "enforce_eager": bool(kwargs.get("enforce_eager"))})

    def _call(self, phase: str, run: Any) -> Any:
        """A request without engine steps, beaten as ``phase`` while it runs (``EngineBeacon.call``)."""
        self.beacon.call(phase)
        try:
            return run()
        finally:
            self.beacon.call_done()

    def serve(self, conn: socket.socket) -> None:
        while not self.closing:
            select.select([conn], [], [])  # idle wait; no deadline: the trainer owns the timeouts
            try:
                message = protocol.recv_message(conn, time.monotonic() + 60)
            except WorkerDied:
                log("controller closed the connection; shutting down")
                return
            request_id, op = message.get("id"), str(message.get("op"))
            started = time.monotonic()
            try:
                reply = {"id": request_id, "ok": True, "result": self.dispatch(op, message.get("args") or {})}
            except Exception as error:  # failures are data for the trainer
                traceback.print_exc()
                reply = {"id": request_id, "ok": False,
                         "error": {"type": type(error).__name__, "message": str(error)}}
            log(f"op={op} id={request_id} ok={reply['ok']} took={time.monotonic() - started:.3f}s")
            protocol.send_message(conn, reply, time.monotonic() + 60)


def _fingerprint(report: Any, source: str) -> dict[str, Any] | None:
    """What a kept batch says of the weights: the load report's manifest digest (sha256 over the
    per-tensor xxh3_128 manifest) and where the weights came from (the trainer, or the model)."""
    if not isinstance(report, dict):
        return {"source": source}
    return {"source": source, "digest": report.get("digest"), "tensors": report.get("tensors"),
            "bytes": report.get("bytes")}


def accept_controller(listener: socket.socket, key: bytes, deadline: float, handshake_s: float) -> socket.socket:
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise WorkerTimeout("no authenticated controller connected in time")
        listener.settimeout(remaining)
        try:
            conn, _ = listener.accept()
        except socket.timeout:
            raise WorkerTimeout("no authenticated controller connected in time") from None
        try:
            protocol.server_handshake(conn, key, handshake_s)
        except (AuthenticationFailed, WorkerTimeout, WorkerDied, OSError) as error:
            log(f"rejected a peer on the control socket: {error}")
            conn.close()
            continue
        conn.settimeout(None)
        return conn


def main() -> int:
    config = json.loads(sys.stdin.readline())
    sys.stdin.close()
    if config.get("parent_death_signal", True):
        arm_parent_death_signal(int(config["parent_pid"]))
    signal.signal(signal.SIGTERM, _on_sigterm)
    # Its stacks on the attempt's signal, and the supervisor as its ptracer: a wedged engine is
    # the process whose stacks matter most (contract.stackdump).
    stackdump.arm()
    log(f"engine={config['engine']} pgid={os.getpgid(0)} sid={os.getsid(0)} "
        f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')!r}")
    key = bytes.fromhex(config["authkey"])
    listener = protocol.bind_listener(config["socket"])
    worker = None
    try:
        worker = Worker(config)
        conn = accept_controller(listener, key, time.monotonic() + float(config.get("connect_timeout", 60)),
                                 float(config.get("handshake_timeout", 5)))
        listener.close()
        with conn:
            worker.serve(conn)
    except GeneratorError as error:
        log(f"exiting: {error}")
        return 1
    finally:
        if worker is not None and not worker.closing:
            try:
                worker.engine.close()
            except Exception:
                traceback.print_exc()
        listener.close()
        try:
            os.unlink(config["socket"])
        except FileNotFoundError:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
