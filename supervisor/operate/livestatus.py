"""``RUN_DIR/status.json``: what the supervisor is doing right now.

The journal records decisions (it grows with events); this file is the live
view (it changes with ticks), so it is small and rewritten in place: written
to a temporary sibling and renamed, so a reader sees the old or the new
content, never half. It is not fsynced: after a crash it is stale by design,
and ``hangwatch status`` trusts it only while the supervisor holds the run
directory's lock.

Phases (``phase``)::

    starting -> watching <-> stall_building -> capturing -> killing
             -> releasing (waiting for GPU memory) -> ended -> backing_off -> watching ...
             -> finished

The same observer warns when no hang can be detected: no GPU probe and no
heartbeat yet at the start of an attempt, and no heartbeat within
``heartbeat_warning`` seconds of a launch.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any, Callable, Mapping

import structlog

from hangwatch.contract.capped import read_capped
from hangwatch.supervisor.decide.attempt import AttemptState
from hangwatch.supervisor.decide.detector import DetectorConfig
from hangwatch.supervisor.operate.observe import Tick

log = structlog.get_logger("hangwatch.status")

SCHEMA = 1
FILE_NAME = "status.json"

_PHASE_OF_STATE = {
    AttemptState.WATCHING: "watching",
    AttemptState.CAPTURING: "capturing",
    AttemptState.KILLING: "killing",
    AttemptState.RELEASING: "releasing",
    AttemptState.RESTARTING_ENGINE: "restarting_engine",
    AttemptState.ENDED: "ended",
}


class LiveStatus:
    """A ``RunObserver`` keeping ``status.json`` current (at most every ``min_interval`` s on ticks)."""

    def __init__(
        self,
        path: Path,
        *,
        detector: DetectorConfig,
        gpu_probe: str,
        heartbeat_warning: float | None = 300.0,
        min_interval: float = 0.5,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        warn: Callable[[str, str], None] | None = None,
    ) -> None:
        self.path = path
        self.detector = detector
        self.gpu_probe = gpu_probe
        self.heartbeat_warning = heartbeat_warning
        self.min_interval = min_interval
        self.clock = clock
        self.wall = wall
        self.warn = warn or (lambda event, message: log.warning(event, message=message))
        self._lock = threading.Lock()
        self._last_write = -1e18
        self._attempt_launched: float | None = None  # monotonic
        self._warned_attempt: int | None = None
        self._write_failed = False
        self.state: dict[str, Any] = {
            "schema": SCHEMA,
            "run_id": None,
            "supervisor_pid": os.getpid(),
            "phase": "starting",
            "phase_since": wall(),
            "attempt": 0,
            "stall": None,
            "progress": None,
            "backoff": None,
            "heartbeat": None,
            "heartbeat_seen": False,
            "gpu": None,
            "tree_cpu_pct": None,
            "tree_size": None,
            "last_exit": None,
            "incident": None,
            "recovered_by_itself": 0,  # --on-hang observe
            "finished": None,
            "warnings": [],
            "links": {},
        }

    # -- what the wiring adds -------------------------------------------------

    def link(self, name: str, value: str) -> None:
        """A place to look (the metrics URL, the log), shown by ``hangwatch status``."""
        with self._lock:
            self.state["links"][name] = value
            self._write()

    @property
    def heartbeat_seen(self) -> bool:
        return bool(self.state["heartbeat_seen"])

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return json.loads(json.dumps(self.state, default=str))

    # -- RunObserver -------------------------------------------------------------

    def record(self, r: Mapping[str, Any]) -> None:
        event = r.get("event")
        with self._lock:
            st = self.state
            st["run_id"] = r.get("run_id") or st["run_id"]
            if event in ("run_started", "run_resumed"):
                self._set_phase("starting")
            elif event == "attempt_started":
                st.update(attempt=r.get("attempt"), heartbeat=None, heartbeat_seen=False, stall=None, progress=None,
                          backoff=None, attempt_started=r.get("ts"), pid=r.get("pid"))
            elif event == "first_heartbeat":
                st["heartbeat_seen"] = True
            elif event == "incident":
                st["incident"] = {k: r.get(k) for k in ("attempt", "kind", "reason", "ts")}
            elif event == "would_act" and st["incident"] is not None:
                st["incident"]["would_act"] = {k: r.get(k) for k in ("level", "scope", "cudagraphs")}
            elif event == "recovered_by_itself":
                st["recovered_by_itself"] = int(st.get("recovered_by_itself") or 0) + 1
                if st["incident"] is not None:
                    st["incident"]["recovered_after_s"] = r.get("after_s")
            elif event == "capture" and st["incident"] is not None:
                st["incident"]["evidence_path"] = r.get("evidence_path")
            elif event == "attempt_ended":
                st["last_exit"] = {k: r.get(k) for k in ("attempt", "kind", "exit_code", "signal", "reason")}
            elif event == "restart_scheduled":
                delay = float(r.get("delay_s") or 0.0)
                st["backoff"] = {"delay_s": delay, "until": float(r.get("ts") or self.wall()) + delay,
                                 "next_attempt": int(r.get("after_attempt") or 0) + 1}
                self._set_phase("backing_off")
            elif event == "run_finished":
                st["finished"] = {k: r.get(k) for k in ("outcome", "exit_code", "reason")}
                self._set_phase("finished")
            else:
                return
            self._write()

    def phase(self, attempt: int, state: AttemptState) -> None:
        name = _PHASE_OF_STATE.get(state)
        if name is None:
            return
        with self._lock:
            self.state["attempt"] = attempt
            if state is AttemptState.WATCHING:
                self._attempt_launched = self.clock()
                self.state["backoff"] = None
                self._warn_undetectable(attempt)
            self.state["stall"] = None
            self._set_phase(name)
            self._write()

    def tick(self, tick: Tick) -> None:
        s = tick.sample
        with self._lock:
            st = self.state
            hb = s.heartbeat
            now = self.wall()
            first_beat = hb is not None and st["heartbeat"] is None
            if hb is not None:
                st["heartbeat"] = {"step": hb.step, "phase": hb.phase, "ts": hb.ts, "age_s": round(max(0.0, now - hb.ts), 1)}
                st["heartbeat_seen"] = True
                timeout = (tick.progress_timeout if tick.progress_timeout is not None
                           else self.detector.progress_timeout_for(hb.phase))
                st["progress"] = ({"silent_s": round(max(0.0, now - hb.ts), 1), "timeout_s": timeout}
                                  if timeout is not None else None)
            if s.gpu is not None:
                st["gpu"] = [{"index": d.index, "util_pct": d.util_pct, "mem_used_mib": d.mem_used_mib} for d in s.gpu]
            st["tree_cpu_pct"] = round(sum(s.cpu_pct.values()), 1)
            st["tree_size"] = s.tree_size
            building = tick.stall_onset is not None
            st["stall"] = ({"held_s": round(tick.stall_held, 1), "window_s": tick.stall_window} if building else None)
            changed = first_beat
            if st["phase"] in ("watching", "stall_building"):
                want = "stall_building" if building else "watching"
                if want != st["phase"]:
                    changed = True
                    self._set_phase(want)
            self._check_heartbeat_deadline(tick.attempt)
            if changed or self.clock() - self._last_write >= self.min_interval:
                self._write()

    # -- internals (called with the lock held) --------------------------------------

    def _set_phase(self, name: str) -> None:
        if self.state["phase"] != name:
            self.state["phase"] = name
            self.state["phase_since"] = self.wall()

    def _warn_undetectable(self, attempt: int) -> None:
        if self.gpu_probe == "none" and not self.state["heartbeat_seen"]:
            message = (
                f"attempt {attempt}: NO HANG CAN BE DETECTED yet: there is no GPU probe, and the trainer has sent "
                "no heartbeat; until it does, only crashes are noticed. Add hangwatch.trainer.beat(step=...) or "
                "HangwatchCallback to the training loop, or run where NVML works (--gpu-probe nvml)")
            self._add_warning("no_detection", message)

    def _check_heartbeat_deadline(self, attempt: int) -> None:
        if (self.heartbeat_warning is None or self.state["heartbeat_seen"] or self._attempt_launched is None
                or self._warned_attempt == attempt):
            return
        waited = self.clock() - self._attempt_launched
        if waited < self.heartbeat_warning:
            return
        self._warned_attempt = attempt
        if self.gpu_probe == "none":
            what = "with no GPU probe, no hang of this attempt can be detected (only crashes)"
        else:
            what = "silent hangs (everything idle) cannot be detected, only GPU stalls"
        self._add_warning("no_heartbeat", (
            f"attempt {attempt}: no heartbeat {waited:.0f} s after launch (--heartbeat-warning "
            f"{self.heartbeat_warning:g}): {what}. Is the trainer calling hangwatch.trainer.beat() or using "
            "HangwatchCallback, with HANGWATCH_HEARTBEAT passed through?"))

    def _add_warning(self, event: str, message: str) -> None:
        self.state["warnings"] = (self.state["warnings"] + [{"ts": self.wall(), "event": event, "message": message}])[-10:]
        self.warn(event, message)

    def _write(self) -> None:
        self._last_write = self.clock()
        self.state["updated"] = self.wall()
        data = json.dumps(self.state, default=str, separators=(",", ":")).encode()
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                os.write(fd, data)
            finally:
                os.close(fd)
            os.replace(tmp, self.path)
        except OSError as exc:
            if not self._write_failed:
                self._write_failed = True
                log.warning("status_write_failed", message=f"cannot write {self.path}: {exc}; `hangwatch status` "
                                                           "will show less until it can")


MAX_STATUS_BYTES = 1 << 20  # the file is a few KiB


def read_status(run_dir: Path) -> dict[str, Any] | None:
    """The last status the supervisor wrote, or None (none yet, or unreadable)."""
    try:
        # Capped and without blocking: `hangwatch status` may be pointed at any directory.
        data = json.loads(read_capped(run_dir / FILE_NAME, MAX_STATUS_BYTES, follow_symlinks=False))
    except (OSError, ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) and data.get("schema") == SCHEMA else None
