"""The trainer's handle on one engine worker: spawn, authenticate, request, kill.

This is the only module that starts or signals the worker. The worker runs
in its own session, so it is its own process-group leader and everything it
starts (vLLM's engine-core and GPU worker processes) is in that group:
``killpg`` on it can never reach the trainer.

Kill protocol (``kill``): SIGTERM to the group (and to the worker's descendants that left
it: ``setpgid``/``setsid``), wait ``grace_s`` on a monotonic deadline, then SIGKILL, then
confirm: the leader reaped and no live (non-zombie) member left in the group or among those
descendants. A grace of 0 sends SIGKILL
first (a worker that timed out: the wedge ignores SIGTERM anyway). Only a confirmed-dead worker has
surely released its (GPU) memory; until then ``WorkerUnkillable``.

The worker keeps each generate request's record in ``inflight_dir`` (default: the attempt
dir, ``HANGWATCH_ATTEMPT_DIR``; none outside hangwatch) while it runs; a killed worker's
record is removed with its other files, so a later incident never shows a dead request.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import psutil

from hangwatch.contract import env as names
from hangwatch.contract.batch import inflight_path
from hangwatch.contract.heartbeat import engine_beacon_file
from hangwatch.contract.pyexec import module_command
from hangwatch.generator import protocol
from hangwatch.generator.errors import (AuthenticationFailed, GeneratorError, WeightMismatch, WorkerDied,
                              WorkerError, WorkerTimeout, WorkerUnkillable)


@dataclass(frozen=True)
class WorkerExit:
    """How a worker ended: failures as data."""

    pid: int
    returncode: int | None
    escalated_to_sigkill: bool

    def describe(self) -> str:
        if self.returncode is None:
            return f"worker {self.pid} state unknown"
        if self.returncode < 0:
            return f"worker {self.pid} ended by {signal.Signals(-self.returncode).name}"
        return f"worker {self.pid} exited with code {self.returncode}"


def worker_environment(base: Mapping[str, str], cuda_visible_devices: str) -> dict[str, str]:
    env = dict(base)
    env["CUDA_VISIBLE_DEVICES"] = cuda_visible_devices
    env["VLLM_WORKER_MULTIPROC_METHOD"] = "spawn"  # fork after CUDA init corrupts the child's context
    env["HF_HUB_OFFLINE"] = "1"  # a rollout engine must never stall on the network
    env["TOKENIZERS_PARALLELISM"] = "false"
    # PYTORCH_CUDA_ALLOC_CONF / PYTORCH_ALLOC_CONF pass through untouched: vLLM
    # turns expandable segments off around its own sleep-mode pool itself, and
    # the user's other allocator settings must reach the engine as written.
    return env


def visible_device_for(device: str, inherited: str | None) -> str:
    """``CUDA_VISIBLE_DEVICES`` for the worker: the trainer's device only, or none on CPU."""
    if not device.startswith("cuda"):
        return ""
    index = int(device.split(":")[1]) if ":" in device else 0
    if inherited:
        return inherited.split(",")[index].strip()
    return str(index)


class WorkerProcess:
    def __init__(self, engine: str, engine_kwargs: Mapping[str, Any], *, log_dir: str,
                 device: str = "cpu", python: str = sys.executable, parent_death_signal: bool = True,
                 grace_s: float = 5.0, connect_timeout: float = 60.0, name: str = "generator-worker",
                 inflight_dir: str | None = None, extra_env: Mapping[str, str] | None = None):
        self.engine = engine
        self.engine_kwargs = dict(engine_kwargs)
        self.log_dir = Path(log_dir)
        self.device = device
        self.python = python
        self.parent_death_signal = parent_death_signal
        self.grace_s = grace_s
        self.connect_timeout = connect_timeout
        self.inflight_dir = inflight_dir if inflight_dir is not None else os.environ.get(names.ATTEMPT_DIR)
        self.extra_env = dict(extra_env or {})
        # One log and one record per worker: a standby beside the active worker has its own.
        self.name = name
        self.log_path = str(self.log_dir / f"{name}.log")
        self.proc: subprocess.Popen[bytes] | None = None
        self.client: protocol.ControlClient | None = None
        self.runtime_dir: str | None = None
        self.socket_path: str | None = None
        self.key = protocol.new_authkey()
        self.exit: WorkerExit | None = None
        self.info: dict[str, Any] = {}

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def spawn(self) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.runtime_dir = protocol.private_runtime_dir()
        self.socket_path = os.path.join(self.runtime_dir, "control.sock")
        config = {
            "socket": self.socket_path, "authkey": self.key.hex(), "parent_pid": os.getpid(),
            "engine": self.engine, "engine_kwargs": self.engine_kwargs,
            "parent_death_signal": self.parent_death_signal, "connect_timeout": self.connect_timeout,
            "inflight_dir": self.inflight_dir or None,
        }
        env = worker_environment({**os.environ, **self.extra_env},
                                 visible_device_for(self.device, os.environ.get("CUDA_VISIBLE_DEVICES")))
        # 0600, never through a symlink: the worker's log can hold what the engine prints (tokens too).
        with open(self.log_path, "ab", buffering=0, opener=lambda p, f: os.open(p, f | os.O_NOFOLLOW, 0o600)) as log:
            self.proc = subprocess.Popen(
                module_command("hangwatch.generator.worker", self.python, "-u"), env=env,
                stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps(config) + "\n").encode())
        self.proc.stdin.close()
        self.info = {"pid": self.proc.pid, "pgid": self.proc.pid, "log": self.log_path, "engine": self.engine,
                     "trainer_pid": os.getpid(), "started": time.time()}
        self._write_info()

    def note_info(self, **fields: Any) -> None:
        """Add fields to ``generator-worker.json`` (e.g. what the engine applied): a record that stays
        in the attempt's directory, where a heartbeat may be overwritten before anyone reads it."""
        self.info.update(fields)
        self._write_info()

    def _write_info(self) -> None:
        with contextlib.suppress(OSError):
            fd = os.open(self.log_dir / f"{self.name}.json", os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "w") as handle:
                handle.write(json.dumps(self.info) + "\n")

    def connect(self, timeout: float, key: bytes | None = None) -> None:
        """Connect and authenticate (retrying until the socket exists) before ``timeout``."""
        assert self.socket_path is not None
        deadline = time.monotonic() + timeout
        while True:
            if not self.alive():
                raise WorkerDied(f"worker exited during startup ({self._exit_text()})", log_path=self.log_path)
            try:
                self.client = protocol.ControlClient(self.socket_path, key or self.key,
                                                     timeout=max(0.1, deadline - time.monotonic()),
                                                     alive=self.alive)
                return
            except (FileNotFoundError, ConnectionRefusedError):
                if time.monotonic() >= deadline:
                    raise WorkerTimeout(f"worker socket did not appear within {timeout:.1f} s",
                                        log_path=self.log_path) from None
                time.sleep(0.05)
            except AuthenticationFailed as error:
                raise AuthenticationFailed(str(error), log_path=self.log_path) from None

    def start(self, timeout: float) -> None:
        self.spawn()
        try:
            self.connect(timeout)
        except BaseException:
            self.kill()
            raise

    def request(self, op: str, timeout: float, **args: Any) -> Any:
        if self.client is None:
            raise WorkerDied("worker is not connected", log_path=self.log_path)
        try:
            reply = self.client.request(op, timeout, **args)
        except (WorkerTimeout, WorkerDied) as error:
            raise type(error)(f"{error} ({self._exit_text()})", log_path=self.log_path) from None
        if not reply.ok:
            error = reply.error or {}
            kind = WeightMismatch if error.get("type") == "WeightMismatch" else WorkerError
            raise kind(f"worker {op!r} failed: {error.get('type')}: {error.get('message')}",
                       remote_type=str(error.get("type")), log_path=self.log_path)
        return reply.result

    def _exit_text(self) -> str:
        if self.proc is None:
            return "not started"
        code = self.proc.poll()
        if code is None:
            return f"pid {self.proc.pid} still running"
        return WorkerExit(self.proc.pid, code, False).describe()

    def close(self, timeout: float = 30.0) -> WorkerExit | None:
        """Graceful: ask the engine to close, wait for exit; kill if that fails."""
        if self.proc is None:
            return None
        if self.alive() and self.client is not None:
            with contextlib.suppress(GeneratorError, OSError):
                self.request("close", timeout)
                self.proc.wait(timeout=timeout)
        return self.kill()

    def kill(self, grace_s: float | None = None, confirm_s: float = 10.0) -> WorkerExit:
        """SIGTERM the group, SIGKILL after the grace, confirm every member is gone."""
        assert self.proc is not None
        grace = self.grace_s if grace_s is None else grace_s
        pgid = self.proc.pid  # start_new_session: the worker leads its own group
        # Its descendants that left its group (setpgid, setsid) would outlive a group kill,
        # holding GPU memory: found now, while the worker still is their ancestor.
        escaped = self._escaped(pgid)
        escalated = False
        if grace <= 0 and self._group_alive(pgid, escaped):
            self._signal_group(pgid, signal.SIGKILL, escaped)
            escalated = True
        elif self._group_alive(pgid, escaped):
            self._signal_group(pgid, signal.SIGTERM, escaped)
            deadline = time.monotonic() + grace
            while time.monotonic() < deadline and self._group_alive(pgid, escaped):
                time.sleep(0.05)
            if self._group_alive(pgid, escaped):
                print(f"hangwatch generator: worker (pgid {pgid}) ignored SIGTERM for {grace:.1f} s; "
                      f"sending SIGKILL", file=sys.stderr, flush=True)
                self._signal_group(pgid, signal.SIGKILL, escaped)
                escalated = True
        deadline = time.monotonic() + confirm_s
        while self._group_alive(pgid, escaped):
            if time.monotonic() >= deadline:
                raise WorkerUnkillable(f"worker group {pgid} still alive {confirm_s:.0f} s after SIGKILL",
                                       log_path=self.log_path)
            time.sleep(0.05)
        self._cleanup()
        self.exit = WorkerExit(self.proc.pid, self.proc.returncode, escalated)
        return self.exit

    def _escaped(self, pgid: int) -> list[psutil.Process]:
        """The worker's live descendants outside its process group (psutil objects keep their
        start time, so a signal never reaches a process that reused one of their pids)."""
        assert self.proc is not None
        if self.proc.poll() is not None:
            return []  # already gone: its children were re-parented, no longer provably its
        try:
            found = psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.Error:
            return []
        escaped = []
        for child in found:
            try:
                if os.getpgid(child.pid) != pgid:
                    escaped.append(child)
            except (ProcessLookupError, PermissionError):
                continue
        return escaped

    def _group_alive(self, pgid: int, escaped: list[psutil.Process] = ()) -> bool:
        assert self.proc is not None
        if self.proc.poll() is None:  # also reaps the leader so it does not linger as our zombie
            return True
        for child in escaped:
            try:
                if child.is_running() and child.status() != psutil.STATUS_ZOMBIE:
                    return True
            except psutil.Error:
                continue  # gone
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            pass
        # killpg(0) also succeeds for zombies waiting to be reaped by init or a
        # subreaper; those hold no memory, so only live members count.
        for proc in psutil.process_iter(["pid", "status"]):
            try:
                if proc.info["status"] != psutil.STATUS_ZOMBIE and os.getpgid(proc.info["pid"]) == pgid:
                    return True
            except (ProcessLookupError, psutil.Error):
                continue  # it exited while we looked
        return False

    @staticmethod
    def _signal_group(pgid: int, sig: signal.Signals, escaped: list[psutil.Process] = ()) -> None:
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            pass  # the group emptied between the check and the signal: that is the goal
        for child in escaped:
            with contextlib.suppress(psutil.Error):
                child.send_signal(sig)  # checks it is still the same process first

    def _cleanup(self) -> None:
        if self.inflight_dir and self.proc is not None:
            with contextlib.suppress(OSError):  # its request died with it
                os.unlink(inflight_path(self.inflight_dir, self.proc.pid))
        base = self.extra_env.get(names.ENGINE_HEARTBEAT) or os.environ.get(names.ENGINE_HEARTBEAT)
        if base and self.proc is not None:
            # A dead worker's last beat may say "in flight"; were its pid reused by another
            # process of the tree, that stale beat would read as a stuck engine.
            with contextlib.suppress(OSError):
                os.unlink(engine_beacon_file(base, self.proc.pid))
        if self.client is not None:
            self.client.close()
            self.client = None
        if self.runtime_dir is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(self.runtime_dir, "control.sock"))
            with contextlib.suppress(OSError):
                os.rmdir(self.runtime_dir)
            self.runtime_dir = None
