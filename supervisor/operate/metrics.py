"""Prometheus metrics: ``--metrics-port`` (HTTP ``/metrics``) and ``--metrics-textfile``
(node-exporter's textfile collector).

A ``RunObserver``. Counters come from journal records; gauges (phase, heartbeat,
GPU, CPU) from the ``LiveStatus`` it is given, which runs first, so the two
views never disagree about the phase. Its own registry: nothing global.

Seconds lost to incidents (``hangwatch_seconds_lost_total``): from an incident's
onset (the last heartbeat progress, or the start of the stall) to the first
heartbeat of the next attempt, i.e. detection + capture + kill + backoff +
relaunch + warm-up. Work lost since the last checkpoint comes on top.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import math
import os
import socket
import tempfile
import threading
import time
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable, Mapping

import structlog
from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.exposition import MetricsHandler

from hangwatch.contract.redact import redact_text
from hangwatch.supervisor.operate.livestatus import LiveStatus

log = structlog.get_logger("hangwatch.metrics")

#: /metrics: connections served at once, and how long one may take to send its request
_MAX_CONNECTIONS = 8
_REQUEST_TIMEOUT_S = 10.0


class _BoundedHTTPServer(ThreadingHTTPServer):
    """``/metrics`` with a bounded number of handler threads, each with a socket timeout.

    prometheus-client's server starts a thread per connection and waits on it without a
    timeout: 600 idle connections to the port (all interfaces by default) were 600 threads
    in the supervisor, whose own launches and captures then hit the thread/pid limit. A
    connection past the limit is closed at once; a scraper retries at its next interval."""

    daemon_threads = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._slots = threading.BoundedSemaphore(_MAX_CONNECTIONS)
        super().__init__(*args, **kwargs)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()  # no thread was started to release it
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()


#: a trainer-chosen phase is cut to this many characters in the label
PHASE_LABEL_MAX = 64

class TextfileInUse(RuntimeError):
    """Another live supervisor writes the same ``--metrics-textfile``."""


PHASES = ("starting", "watching", "stall_building", "capturing", "killing", "releasing", "restarting_engine", "ended",
          "backing_off", "finished")


class MetricsExporter:
    def __init__(
        self,
        status: LiveStatus,
        *,
        textfile: Path | None = None,
        textfile_interval: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.status = status
        self.textfile = textfile
        self.textfile_interval = textfile_interval
        self.clock = clock
        self.wall = wall
        self.registry = r = CollectorRegistry(auto_describe=True)
        self.server: Any = None
        self._lock = threading.Lock()
        self._last_textfile = -1e18
        self._textfile_failed = False
        self._lost_onset: float | None = None  # wall time of the incident onset not yet recovered from
        self._claim: int | None = None  # the fd holding the textfile's lock while this run writes it
        self._gpus: set[str] = set()
        self._hb_phase: str | None = None

        self.phase_g = Gauge("hangwatch_phase", "1 for the supervisor's current phase", ["phase"], registry=r)
        self.outcome_g = Gauge("hangwatch_run_outcome", "1 for the run's outcome once it finished "
                               "(success, gave_up, interrupted, internal_error, launch_failed)", ["outcome"], registry=r)
        self.up_g = Gauge("hangwatch_supervisor_running", "1 while the supervisor runs the training command", registry=r)
        self.attempt_g = Gauge("hangwatch_attempt", "current attempt number, 1-based", registry=r)
        self.restarts_c = Counter("hangwatch_restarts", "restarts scheduled", registry=r)
        self.engine_restarts_c = Counter("hangwatch_engine_restarts", "engine-level restarts (only the rollout "
                                         "engine's worker killed; ok=false: it escalated to a job restart)", ["ok"],
                                         registry=r)
        self.incidents_c = Counter("hangwatch_incidents", "hang verdicts by kind", ["kind"], registry=r)
        self.exits_c = Counter("hangwatch_attempts_ended", "ended attempts by verdict kind", ["kind"], registry=r)
        self.lost_c = Counter("hangwatch_seconds_lost", "seconds from incident onset to the next attempt's first "
                              "heartbeat, or to the trainer's progress after an engine-level restart", registry=r)
        self.would_act_c = Counter("hangwatch_would_act", "hang verdicts not acted on (--on-hang observe), by the "
                                   "recovery scope they would have had", ["scope"], registry=r)
        self.recovered_itself_c = Counter("hangwatch_recovered_by_itself", "incidents not acted on (--on-hang "
                                          "observe) after which the trainer moved on by itself", registry=r)
        self.notify_failed_c = Counter("hangwatch_notify_failures", "alerts that could not be delivered", registry=r)
        self.step_g = Gauge("hangwatch_last_heartbeat_step", "step of the last heartbeat (NaN before the first)",
                            registry=r)
        self.age_g = Gauge("hangwatch_last_heartbeat_age_seconds", "seconds since the last heartbeat (NaN before "
                           "the first in this attempt)", registry=r)
        self.age_g.set_function(self._heartbeat_age)
        # The age above is computed when the metrics are read: in a textfile that is the last write, so
        # once the supervisor is gone (OOM-killed, SIGKILL) it stays a few seconds forever and no
        # "no heartbeat" rule fires. A timestamp keeps aging in the rule: time() - this.
        self.hb_ts_g = Gauge("hangwatch_last_heartbeat_timestamp_seconds", "wall-clock time of the last heartbeat "
                             "(unix seconds; NaN before the first in this attempt)", registry=r)
        self.hb_phase_g = Gauge("hangwatch_heartbeat_phase", "1 for the phase the trainer last announced", ["phase"],
                                registry=r)
        self.stall_g = Gauge("hangwatch_stall_building_seconds", "how long a stall has built (0 when none)", registry=r)
        self.window_g = Gauge("hangwatch_stall_window_seconds", "the stall window in force", registry=r)
        self.gpu_util_g = Gauge("hangwatch_gpu_utilization_percent", "GPU utilisation", ["gpu"], registry=r)
        self.gpu_mem_g = Gauge("hangwatch_gpu_memory_used_bytes", "GPU memory used", ["gpu"], registry=r)
        self.cpu_g = Gauge("hangwatch_tree_cpu_percent", "CPU of the whole process tree, % of one core", registry=r)
        self.procs_g = Gauge("hangwatch_tree_processes", "processes in the tree", registry=r)
        self.step_g.set(math.nan)
        self.up_g.set(1)
        self._sync()

    # -- exposition --------------------------------------------------------------

    def serve(self, host: str, port: int) -> str:
        """Start ``/metrics`` on host:port (port 0: any free one); returns its URL."""
        addr = host or "0.0.0.0"
        family = socket.getaddrinfo(addr, port, type=socket.SOCK_STREAM)[0][0]
        server_class = type("MetricsServer", (_BoundedHTTPServer,), {"address_family": family})
        handler = type("MetricsRequest", (MetricsHandler.factory(self.registry),), {"timeout": _REQUEST_TIMEOUT_S})
        server = server_class((addr, port), handler)
        threading.Thread(target=server.serve_forever, name="metrics-http", daemon=True).start()
        self.server = server
        bound = server.server_address[1]
        shown = host if host and host not in ("0.0.0.0", "::") else "127.0.0.1"
        if ":" in shown:
            shown = f"[{shown}]"  # an IPv6 address in a URL
        return f"http://{shown}:{bound}/metrics"

    def close(self) -> None:
        self.up_g.set(0)
        self._write_textfile(force=True)
        if self._claim is not None:
            os.close(self._claim)  # the kernel drops the lock with it (and at a SIGKILL)
            self._claim = None
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()

    def claim_textfile(self, owner: str) -> None:
        """Hold ``.NAME.lock`` next to the textfile for the run: one writer per file.

        Two runs on one host given the same path (a shared config file) rewrote it in turn every
        5 s: each run's values, a finished run's outcome and ``supervisor_running 0`` came and
        went with the other's, and counters seemed to reset. Raises ``TextfileInUse`` naming
        the holder, or OSError where the lock cannot be made. The collector reads ``*.prom``
        only, so the hidden lock file is not mistaken for metrics."""
        assert self.textfile is not None
        path = self.textfile.with_name(f".{self.textfile.name}.lock")
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            holder = os.pread(fd, 512, 0).decode("utf-8", "replace").strip()
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise TextfileInUse(holder or "another hangwatch run") from None
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{owner} (supervisor pid {os.getpid()})\n".encode(), 0)
        self._claim = fd

    def write_textfile(self) -> None:
        """Write the textfile now; raises OSError (the wiring's first write: refused at start)."""
        assert self.textfile is not None
        # A new hidden temporary (O_EXCL) renamed over the file: the collector never sees half,
        # and a link planted at the name is replaced, never written through. Not fsynced: it is
        # rewritten at each journal record, inside the recovery path, and a crash may lose it.
        fd, tmp = tempfile.mkstemp(prefix=f".{self.textfile.name}.", dir=self.textfile.parent)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(generate_latest(self.registry))
                # The job owner's alone, as the journal is: its labels name the trainer's phases. A
                # collector running as another user is given access by the operator (docs/operations.md).
                os.fchmod(handle.fileno(), 0o600)
            os.replace(tmp, self.textfile)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

    def _write_textfile(self, force: bool = False) -> None:
        if self.textfile is None:
            return
        now = self.clock()
        if not force and now - self._last_textfile < self.textfile_interval:
            return
        self._last_textfile = now
        try:
            self.write_textfile()
        except OSError as exc:
            # Never into the run: a full disk or a removed directory costs the metrics, not the
            # run's exit status (at close it turned a finished run into an internal error).
            if not self._textfile_failed:
                self._textfile_failed = True
                log.warning("metrics_textfile_failed", message=f"cannot write {self.textfile}: {exc.strerror or exc}; "
                            f"retrying every {self.textfile_interval:g} s")
            return
        if self._textfile_failed:
            self._textfile_failed = False
            log.info("metrics_textfile_ok", message=f"{self.textfile} written again")

    # -- RunObserver ----------------------------------------------------------------

    def record(self, r: Mapping[str, Any]) -> None:
        event = r.get("event")
        with self._lock:
            if event == "incident":
                self.incidents_c.labels(kind=str(r.get("kind"))).inc()
                if self._lost_onset is None:
                    onset = r.get("onset_wall")
                    self._lost_onset = float(onset) if onset is not None else float(r.get("ts") or self.wall())
            elif event == "attempt_ended":
                self.exits_c.labels(kind=str(r.get("kind"))).inc()
            elif event == "restart_scheduled":
                self.restarts_c.inc()
            elif event == "engine_restart":
                self.engine_restarts_c.labels(ok="true" if r.get("ok") else "false").inc()
            elif event == "would_act":
                self.would_act_c.labels(scope=str(r.get("scope"))).inc()
            elif event == "recovered_by_itself":
                self.recovered_itself_c.inc()
            if event in ("first_heartbeat", "engine_recovered", "recovered_by_itself") and self._lost_onset is not None:
                self.lost_c.inc(max(0.0, float(r.get("ts") or self.wall()) - self._lost_onset))
                self._lost_onset = None
            elif event == "notify_failed":
                self.notify_failed_c.inc()
            elif event == "run_finished":
                if self._lost_onset is not None:
                    self.lost_c.inc(max(0.0, float(r.get("ts") or self.wall()) - self._lost_onset))
                    self._lost_onset = None
                self.outcome_g.labels(outcome=str(r.get("outcome"))).set(1)
            self._sync()
            self._write_textfile(force=True)

    def phase(self, attempt: int, state: Any) -> None:
        with self._lock:
            self._sync()

    def tick(self, tick: Any) -> None:
        with self._lock:
            self._sync()
            self._write_textfile()

    # -- internals ------------------------------------------------------------------

    def _heartbeat_age(self) -> float:
        hb = self.status.state.get("heartbeat")
        return max(0.0, self.wall() - float(hb["ts"])) if hb else math.nan

    def _sync(self) -> None:
        st = self.status.state
        current = st.get("phase")
        for name in PHASES:
            self.phase_g.labels(phase=name).set(1 if name == current else 0)
        self.attempt_g.set(st.get("attempt") or 0)
        hb = st.get("heartbeat")
        self.step_g.set(hb["step"] if hb and hb.get("step") is not None else math.nan)
        self.hb_ts_g.set(float(hb["ts"]) if hb and hb.get("ts") is not None else math.nan)
        # Redacted as alerts redact it (a phase naming a URL with a password, or a token, went out in
        # clear on /metrics and in the textfile), before the cut, which could leave half a secret.
        hb_phase = redact_text(str(hb["phase"]))[:PHASE_LABEL_MAX] if hb and hb.get("phase") is not None else None
        if hb_phase != self._hb_phase:
            # The trainer names its phases (any string, "epoch 3/step 1200" too): the old series is
            # removed, not set to 0, or every phase ever announced stayed in each scrape for good.
            if self._hb_phase is not None:
                self.hb_phase_g.remove(self._hb_phase)
            if hb_phase is not None:
                self.hb_phase_g.labels(phase=hb_phase).set(1)
            self._hb_phase = hb_phase
        stall = st.get("stall")
        self.stall_g.set(stall["held_s"] if stall else 0)
        self.window_g.set(stall["window_s"] if stall else self.status.detector.stall_window)
        seen = set()
        for d in st.get("gpu") or []:
            gpu = str(d["index"])
            seen.add(gpu)
            self.gpu_util_g.labels(gpu=gpu).set(d["util_pct"])
            self.gpu_mem_g.labels(gpu=gpu).set(float(d["mem_used_mib"]) * 1024 * 1024)
        self._gpus |= seen
        if st.get("tree_cpu_pct") is not None:
            self.cpu_g.set(st["tree_cpu_pct"])
        if st.get("tree_size") is not None:
            self.procs_g.set(st["tree_size"])
