"""Alerts: tell a person when a run has an incident, gives up, or finishes.

A ``Notifier`` is a ``RunObserver`` on journal records. It turns them into at
most three kinds of message:

* ``incident``: sent once the supervisor has acted on a hang (evidence taken,
  tree killed, restart decided; or, at the engine level, the rollout engine's
  worker restarted alone), so the message says what happened, where,
  which signature, what hangwatch did and where the report is;
* ``gave_up``: the run stopped with a non-zero outcome;
* ``run_finished``: the run ended successfully.

Targets: apprise URLs (``--notify``: Slack, Discord, Teams, email, ntfy,
PagerDuty, ``json://`` webhooks, ...) and a command (``--notify-command``) that
gets the event as JSON on stdin.

Invariants:
* ``record`` only builds a dict and puts it on a bounded queue: a slow or dead
  target never delays detection, capture, kill or restart;
* every delivery try is bounded (``timeout``), retried a few times with
  tenacity, and a final failure is journaled (``notify_failed``);
* a target's URL is never written anywhere in clear: webhook URLs carry their
  secret in the path, so only ``redact_url``'s form appears in logs and journal.
"""

from __future__ import annotations

import json
import logging
import os
import collections
import re
import signal
import socket
import subprocess
import threading
import time
from typing import Any, Callable, Mapping, Protocol, Sequence

import structlog
from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, stop_after_delay, wait_exponential

from hangwatch.contract.errors import ConfigError
from hangwatch.contract.pyexec import module_command
from hangwatch.contract.redact import MARK, redact_text
from hangwatch.contract.terminal import one_line
from hangwatch.contract.tools import add_helper, forget_helper
from hangwatch.supervisor.operate.evidence import bundle_summary
from hangwatch.supervisor.operate.notify_exec import PAYLOAD_ENV

log = structlog.get_logger("hangwatch.notify")

NOTIFIED = ("incident", "gave_up", "run_finished")
_HOSTLIKE = re.compile(r"^(localhost|\[[0-9a-fA-F:]+\]|[A-Za-z0-9\-]+(\.[A-Za-z0-9\-]+)+)(:\d+)?$")


def redact_url(url: str) -> str:
    """``scheme://host/[REDACTED]``: the scheme, and the host only when it looks like one.

    Apprise URLs keep their secret anywhere: ``slack://TokenA/TokenB/TokenC``
    (no host at all), ``json://user:pass@host/path``, ``ntfy://topic``. So all
    but the scheme and a dotted host (or ``localhost``) goes.
    """
    scheme, sep, rest = url.partition("://")
    if not sep or not re.fullmatch(r"[A-Za-z][A-Za-z0-9+.\-]*", scheme):
        return MARK
    host = re.split(r"[/?#]", rest.rsplit("@", 1)[-1], maxsplit=1)[0]
    shown = f"{scheme}://{host}/{MARK}" if _HOSTLIKE.match(host) else f"{scheme}://{MARK}"
    return redact_text(shown)


class DeliveryError(RuntimeError):
    """One try at one target failed; the message is already redacted."""


class Target(Protocol):
    name: str  # redacted, for logs and the journal

    def send(self, payload: Mapping[str, Any], title: str, body: str, timeout: float) -> None: ...


#: the most of a receiver's answer the supervisor holds: apprise only needs its status line and a
#: short body, and a receiver whose answer never ended (a 4 GB Content-Length, an endless chunked
#: body) grew the supervisor by ~400 MB a second until the kernel killed it, leaving the run unwatched
MAX_ANSWER_BYTES = 1 << 20


#: answers cut at the cap so far: apprise logs the cut only at DEBUG, so a try compares this
#: before and after to say why it failed (rather than apprise's "a connection error occurred")
_ANSWERS_CUT = [0]


def _cap_http_answers() -> None:
    """Make every HTTP answer read in this process stop at ``MAX_ANSWER_BYTES``.

    Apprise's plugins call ``requests`` without streaming, which reads the whole answer
    into memory (a redirect's body too); their socket timeouts bound each read, not the
    answer. In the supervisor only apprise speaks HTTP, so the cap goes on
    ``Response.iter_content``, the one path every body (``.content``, ``.text``, a
    redirect's drained body) is read through. The error is a ``RequestException``, which
    apprise reports as a failed send; requests' redirect loop does not catch it (it does
    catch ``ContentDecodingError``, then reads the rest raw and unbounded)."""
    import requests  # noqa: PLC0415  (apprise's dependency; only when --notify is used)

    if getattr(requests.models.Response.iter_content, "_hangwatch_capped", False):
        return

    class _TooLarge(requests.RequestException):
        """Raised inside a delivery try when the receiver's answer passes ``MAX_ANSWER_BYTES``."""

    original = requests.models.Response.iter_content

    def iter_content(self: Any, chunk_size: Any = 1, decode_unicode: bool = False) -> Any:
        seen = 0
        for chunk in original(self, chunk_size, decode_unicode):
            seen += len(chunk)
            if seen > MAX_ANSWER_BYTES:
                _ANSWERS_CUT[0] += 1
                self.close()
                raise _TooLarge(f"the receiver's answer is over {MAX_ANSWER_BYTES >> 20} MiB; not read further")
            yield chunk

    iter_content._hangwatch_capped = True  # type: ignore[attr-defined]
    requests.models.Response.iter_content = iter_content  # type: ignore[method-assign]


def _inline_asset(apprise: Any) -> Any:
    """Apprise settings under which a send runs in the thread that calls it.

    By default apprise sends from its own thread pool, whose threads the interpreter joins at
    exit: a receiver that dribbles its answer (a byte a second never trips a socket timeout)
    held that thread, and with it the supervisor, alive after the run had finished and every
    alert was given up on (its exit status never reached the scheduler; reproduced for 10+
    minutes). Run inline, the send is in the try's own daemon thread, which exit abandons.
    (A newer apprise's per-service deadline would put it back in the pool: off, the try has its own.)"""
    try:
        return apprise.AppriseAsset(async_mode=False, service_timeout=0)
    except Exception:  # noqa: BLE001  (an apprise without service_timeout refuses the key)
        return apprise.AppriseAsset(async_mode=False)


class AppriseTarget:
    """One ``--notify`` URL. Apprise bounds its own sockets (4 s connect, 4 s read);
    the try is also abandoned after ``timeout`` in case a plugin blocks elsewhere, and
    no answer is held past ``MAX_ANSWER_BYTES``."""

    def __init__(self, url: str) -> None:
        import apprise  # noqa: PLC0415  (only when --notify is used)

        _cap_http_answers()
        # Apprise logs through the logging module; its messages can quote URL parts.
        logging.getLogger("apprise").propagate = False
        self._url = url
        self.name = redact_url(url)
        self._abandoned: threading.Thread | None = None
        if not apprise.Apprise().add(url):
            raise ConfigError(f"--notify {self.name}: apprise does not understand this URL; see apprise's list of "
                              "services (e.g. slack://..., ntfy://topic, json://host:port/path)")

    def send(self, payload: Mapping[str, Any], title: str, body: str, timeout: float) -> None:
        import apprise  # noqa: PLC0415

        result: dict[str, Any] = {}

        def attempt() -> None:
            cut = _ANSWERS_CUT[0]
            try:
                with apprise.LogCapture(level=logging.WARNING) as captured:
                    notifier = apprise.Apprise(asset=_inline_asset(apprise))
                    notifier.add(self._url)
                    result["ok"] = bool(notifier.notify(title=title, body=body))
                    result["log"] = captured.getvalue()
                    result["cut"] = _ANSWERS_CUT[0] != cut
            except Exception as exc:  # noqa: BLE001  (reported as a failed try)
                result["ok"] = False
                result["log"] = f"{type(exc).__name__}: {exc}"

        abandoned = self._abandoned
        if abandoned is not None and abandoned.is_alive():
            # A receiver that dribbles its answer never trips apprise's socket timeouts, so an
            # abandoned try can live on; one per target at most, or each retry of each alert
            # would leave one more thread and connection behind. It is waited for within this
            # try's own bound, not refused at once: a slow receiver's abandoned try (an incident
            # alert cut short at the end of the run) usually ends in seconds, and refusing made
            # the run's last alert spend its three quick tries on it and be lost with time left.
            started = time.monotonic()
            abandoned.join(timeout)
            if abandoned.is_alive():
                raise DeliveryError(f"{self.name}: an earlier try, abandoned after its deadline, is still waiting "
                                    f"on the receiver after {timeout:g} s more; not opening another connection")
            timeout -= time.monotonic() - started
            if timeout < 0.5:
                raise DeliveryError(f"{self.name}: an earlier, abandoned try held the receiver for this try's "
                                    "time; not tried")
        thread = _bounded(attempt, timeout, self.name)
        if thread is not None:
            self._abandoned = thread
            raise DeliveryError(f"{self.name}: no answer within {timeout:g} s")
        if not result.get("ok"):
            if result.get("cut"):
                raise DeliveryError(f"{self.name}: the receiver's answer is over {MAX_ANSWER_BYTES >> 20} MiB; "
                                    "not read further")
            reason = (result.get("log") or "").strip().splitlines()
            raise DeliveryError(f"{self.name}: {self._clean(reason[-1]) if reason else 'apprise reported a failure'}")

    def _clean(self, text: str) -> str:
        text = re.sub(r"^\S+ \S+ - \w+ - ", "", text)  # apprise's "date time - LEVEL - " prefix
        return redact_text(text.replace(self._url, self.name))[:300]


class CommandTarget:
    """``--notify-command``: run through ``/bin/sh -c`` with the event JSON on stdin, under
    its own reaper (``notify_exec``): nothing it starts joins the trainer's tree (the
    supervisor treats its own descendants as the trainer's), and nothing it starts,
    ``setsid`` daemons included, outlives the try's deadline."""

    STDERR_TAIL = 2048  # bytes of the command's stderr kept for the error message (it may flood)

    def __init__(self, command: str) -> None:
        self.command = command
        shown = redact_text(command)
        self.name = "command " + (shown if len(shown) <= 80 else shown[:77] + "...")

    def send(self, payload: Mapping[str, Any], title: str, body: str, timeout: float) -> None:
        env = dict(os.environ, HANGWATCH_EVENT=str(payload.get("event")))
        env[PAYLOAD_ENV] = json.dumps(_held(payload), default=str) + "\n"  # one line on stdin
        try:
            proc = subprocess.Popen([*module_command("hangwatch.supervisor.operate.notify_exec"), f"{timeout:g}", self.command],
                                    stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                                    start_new_session=True)
        except OSError as exc:
            raise DeliveryError(f"{self.name}: cannot start it: {exc.strerror or exc}") from None
        add_helper(proc.pid)  # the tree scanner leaves the runner, and all below it, out of the trainer's tree
        try:
            err = _Tail(proc.stderr, self.STDERR_TAIL)
            try:
                proc.wait(timeout + _RUNNER_GRACE_S)  # the runner keeps its own deadline; this is the backstop
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass  # it exited in between
                proc.wait()
            assert proc.stdout is not None
            line = proc.stdout.read(4096)
            err.thread.join(1.0)
        finally:
            forget_helper(proc.pid)
            proc.stdout.close()  # type: ignore[union-attr]
        tail = " ".join(err.text().split())[-300:]
        tail = f": {redact_text(tail)}" if tail else ""
        try:
            result = json.loads(line)
        except ValueError:
            raise DeliveryError(f"{self.name}: the alert runner failed (exit {proc.returncode}){tail}") from None
        if result.get("timed_out"):
            raise DeliveryError(f"{self.name}: no exit within {timeout:g} s; killed {result.get('killed')} "
                                "process(es): the command and what it started")
        if result.get("status") != 0:
            raise DeliveryError(f"{self.name}: exit status {result.get('status')}{tail}")
        if result.get("lingered"):
            log.warning("notify_lingered", message=f"{self.name} exited 0 but left {result.get('killed')} process(es) "
                                                   f"running; killed at its {timeout:g} s deadline")


#: the least time a try is started with at the end of a run: half a second of try, a second of margin
_LAST_TRY_S = 1.5

#: how long past its own deadline the runner may take to kill and reap what the command left
_RUNNER_GRACE_S = 5.0

#: The most characters of one string field a --notify-command's event carries.
MAX_COMMAND_FIELD = 2000


# Where the run and its evidence are, which hangwatch names from --run-dir: a command acts on them
# (copies the bundle), and redacting them as text broke the path (a run under "sk-2026-runs/" became
# "[REDACTED]/...") while they carry nothing of the trainer's.
_OWN_FIELDS = frozenset({"run_dir", "bundle", "report", "run_id", "host"})


def _redacted(key: str, value: Any) -> Any:
    """An event's field as it may leave the machine: the trainer's text redacted, our own paths as they are."""
    return redact_text(value) if isinstance(value, str) and key not in _OWN_FIELDS else value


def _held(payload: Mapping[str, Any]) -> dict[str, Any]:
    """The event for a command, each string at most ``MAX_COMMAND_FIELD`` characters. It
    travels in one environment variable, which the kernel caps at 128 KiB: a heartbeat phase
    of 30 000 "é" (60 KB, within the beat file's cap; 180 KB as JSON escapes) made every
    command alert fail to start ("Argument list too long")."""
    held = {k: _redacted(k, v) for k, v in payload.items()}  # as the text targets get it
    return {k: (v[:MAX_COMMAND_FIELD] + "...[cut]" if isinstance(v, str) and len(v) > MAX_COMMAND_FIELD else v)
            for k, v in held.items()}


class _Tail:
    """Reads a pipe to its end in a thread, keeping only its last ``cap`` bytes."""

    def __init__(self, stream: Any, cap: int) -> None:
        self._data = b""
        self._cap = cap
        self.thread = threading.Thread(target=self._run, args=(stream,), name="notify-stderr", daemon=True)
        self.thread.start()

    def _run(self, stream: Any) -> None:
        with stream:
            while True:
                chunk = stream.read1(1 << 16)
                if not chunk:
                    return
                self._data = (self._data + chunk)[-self._cap:]

    def text(self) -> str:
        return self._data.decode("utf-8", "replace")


def _bounded(fn: Callable[[], None], timeout: float, name: str) -> threading.Thread | None:
    """Run ``fn`` in a thread for at most ``timeout`` s; the thread if it is still running.

    Abandoned, not killed (threads cannot be): apprise's socket timeouts usually end it."""
    thread = threading.Thread(target=fn, name=f"notify-try {name}", daemon=True)
    thread.start()
    thread.join(timeout)
    return thread if thread.is_alive() else None


class Notifier:
    """A ``RunObserver`` that sends alerts from its own thread."""

    def __init__(
        self,
        targets: Sequence[Target],
        *,
        run_dir: str,
        journal_append: Callable[..., Any] | None = None,
        describe: Callable[[str | None], Mapping[str, Any]] = bundle_summary,
        host: str | None = None,
        timeout: float = 10.0,
        tries: int = 3,
        max_wait: float = 60.0,
        queue_size: int = 64,
        sleep: Callable[[float], None] = time.sleep,
        incidents_so_far: int = 0,
    ) -> None:
        self.targets = list(targets)
        self.run_dir = run_dir
        self.journal_append = journal_append
        self.describe = describe
        self.host = host or socket.gethostname()
        self.timeout = timeout
        self.tries = tries
        self.max_wait = max_wait
        self.sleep = sleep
        self.queue_size = queue_size
        self._pending: collections.deque[dict[str, Any]] = collections.deque()
        self._cv = threading.Condition()
        self._closing_by: float | None = None  # monotonic deadline once close() was called
        self._reserve = 0.0  # seconds of it kept for the run's last alert
        self._incident: dict[str, Any] | None = None
        self._incidents = incidents_so_far  # a resumed run's earlier supervisors had these
        self._thread = threading.Thread(target=self._work, name="notify", daemon=True)
        self._thread.start()

    # -- RunObserver: build the story, queue the messages (cheap, never blocks) ---

    def record(self, r: Mapping[str, Any]) -> None:
        event = r.get("event")
        base = {"run_id": r.get("run_id"), "run_dir": self.run_dir, "host": self.host}
        if event == "incident":
            self._incidents += 1
            evidence = r.get("evidence") or {}
            self._incident = {**base, "event": "incident", "ts": r.get("ts"), "attempt": r.get("attempt"),
                              "kind": r.get("kind"), "reason": r.get("reason"), "latency_s": r.get("latency_s"),
                              "step": evidence.get("step"), "phase": r.get("phase"), "bundle": None, "killed": None}
        elif self._incident is not None and event == "capture":
            self._incident["bundle"] = r.get("evidence_path")
            self._incident["capture_error"] = r.get("error")
        elif self._incident is not None and event == "kill":
            self._incident["killed"] = len(r.get("pids") or [])
            self._incident["survivors"] = len(r.get("survivors") or [])
        elif self._incident is not None and event == "engine_restart" and r.get("ok"):
            # Level 1: the run goes on in the same attempt, so no restart_scheduled will follow.
            graphs = "cuda graphs off" if r.get("cudagraphs") == "off" else "cuda graphs on"
            if r.get("enforce_eager"):
                graphs += ", enforce_eager"
            who = "its generator restarts" if r.get("by") == "generator" else "restarted"
            self._emit_incident(f"{who} only the rollout engine's worker ({graphs}); the trainer lives on "
                                f"and retries the batch")
        elif self._incident is not None and event == "would_act":
            # Observe-only (--on-hang observe): nothing is done; the alert says what would have been.
            what = "the rollout engine's worker" if r.get("level") == 1 else "the job"
            self._incident["observe_only"] = True
            self._emit_incident(f"nothing (observe-only): would have killed {len(r.get('would_kill') or [])} "
                                f"process(es) and restarted {what} with cuda graphs {r.get('cudagraphs')}; "
                                f"the trainer is watched on")
        elif self._incident is not None and event == "restart_scheduled":
            graphs = "cuda graphs off" if r.get("cudagraphs") == "off" else "cuda graphs on"
            if r.get("enforce_eager"):
                graphs += ", enforce_eager"
            self._emit_incident(f"restarting as attempt {int(r.get('after_attempt') or 0) + 1} in "
                                f"{float(r.get('delay_s') or 0):.0f} s with {graphs}")
        elif event == "run_finished":
            if self._incident is not None:
                self._emit_incident(f"not restarting: {r.get('reason')}")
            ok = r.get("exit_code") == 0
            self._put({**base, "event": "run_finished" if ok else "gave_up", "ts": r.get("ts"),
                       "outcome": r.get("outcome"), "exit_code": r.get("exit_code"), "reason": r.get("reason"),
                       "attempts": r.get("attempts"), "incidents": self._incidents})

    def phase(self, attempt: int, state: Any) -> None:
        pass

    def tick(self, tick: Any) -> None:
        pass

    def _emit_incident(self, action: str) -> None:
        assert self._incident is not None
        killed = self._incident.get("killed")
        done = f"killed {killed} process(es); " if killed else ""
        self._put({**self._incident, "action": done + action})
        self._incident = None

    def _put(self, payload: dict[str, Any]) -> None:
        dropped = payload
        with self._cv:
            if len(self._pending) >= self.queue_size and payload.get("event") != "incident":
                # The run's last word makes room: behind a full queue of incident alerts (a target
                # that hangs, many hangs) it was the one dropped. The oldest incident alert goes.
                oldest = next((p for p in self._pending if p.get("event") == "incident"), None)
                if oldest is not None:
                    self._pending.remove(oldest)
                    dropped = oldest
            if len(self._pending) < self.queue_size:
                self._pending.append(payload)
                self._cv.notify()
                if dropped is payload:
                    return
        self._failed(dropped, "(all)", f"the notification queue is full ({self.queue_size}); dropped", 0)

    # -- the worker ----------------------------------------------------------------

    def close(self, timeout: float = 30.0) -> bool:
        """Deliver what is queued, for at most ``timeout`` s in all; False if some was left.

        The run's last word (``gave_up``, ``run_finished``) is kept time for: behind incident
        alerts that a hanging target holds for 3 tries each, it was the one never sent. From
        now on an incident alert gets one try, cut short so that the last word keeps its share
        (one try per target, half the time at most). What is left at the deadline is journaled."""
        deadline = time.monotonic() + timeout
        with self._cv:
            self._reserve = min(self.timeout * len(self.targets), timeout / 2)
            self._closing_by = deadline
            self._cv.notify()
        self._thread.join(max(0.0, deadline - time.monotonic()))
        if not self._thread.is_alive():
            return True
        with self._cv:
            left = list(self._pending)
            self._pending.clear()
        log.warning("notify_unfinished", message=f"{len(left)} notification(s) not sent, one still being tried, "
                                                 f"after {timeout:g} s; giving up on them")
        for payload in left:
            self._failed(payload, "(all)", f"not sent: the run ended and its {timeout:g} s for alerts ran out", 0)
        return False

    def _work(self) -> None:
        while True:
            with self._cv:
                while not self._pending and self._closing_by is None:
                    self._cv.wait()
                if not self._pending:
                    return  # closing, and all delivered
                payload = self._pending.popleft()
                if self._no_time_for(payload):
                    skipped, payload = payload, None
            if payload is None:
                self._failed(skipped, "(all)", "not sent: the run ended, and its time for alerts ran out"
                             + (" (what was left is kept for its last alert)" if skipped.get("event") == "incident" else ""), 0)
                continue
            try:
                self._deliver(payload)
            except Exception as exc:  # noqa: BLE001  (the worker must outlive any one bug)
                log.warning("notify_error", message=f"notification failed: {type(exc).__name__}: {redact_text(str(exc))}")

    def _deliver(self, payload: dict[str, Any]) -> None:
        if payload.get("event") == "incident":
            info = self.describe(payload.get("bundle"))
            payload.update(signature=info.get("signature"), title=info.get("title"), report=info.get("report"))
        title, body = render(payload)
        for target in self.targets:
            tries = 0

            def one_try(target: Target = target) -> None:
                nonlocal tries
                limit = self._try_timeout(payload)
                if limit < 0.5:
                    raise DeliveryError(f"{target.name}: not tried: the run ended, and its time for alerts ran out"
                                        + (" (what was left is kept for its last alert)"
                                           if payload.get("event") == "incident" else ""))
                tries += 1
                target.send(payload, title, body, limit)

            try:
                for attempt in Retrying(stop=stop_after_attempt(self.tries) | stop_after_delay(self.max_wait)
                                        | self._closing_stop(payload),
                                        wait=self._closing_wait(wait_exponential(multiplier=0.5, max=5.0)),
                                        retry=retry_if_exception_type(DeliveryError), sleep=self.sleep, reraise=True):
                    with attempt:
                        one_try()
                log.info("notified", message=f"{payload['event']} sent to {target.name}")
            except DeliveryError as exc:
                self._failed(payload, target.name, str(exc), tries)

    def _try_timeout(self, payload: Mapping[str, Any]) -> float:
        """A try's bound: ``timeout``, or, closing, what is left of the time for alerts (for an
        incident alert, less the last alert's share), so every try ends, and is journaled, in time."""
        by = self._closing_by
        if by is None:
            return self.timeout
        # A second for the try's own end (a command's reaper kills and reaps) and its journal line.
        keep = (self._reserve if payload.get("event") == "incident" else 0.0) + 1.0
        return round(min(self.timeout, by - time.monotonic() - keep), 1)

    def _no_time_for(self, payload: Mapping[str, Any]) -> bool:
        return self._try_timeout(payload) < 0.5

    def _closing_stop(self, payload: Mapping[str, Any]) -> Callable[[Any], bool]:
        """Once the run ended: an incident alert is not retried, and no try is started that
        could not end (and be journaled) before the deadline."""
        final = payload.get("event") != "incident"

        def stop(retry_state: Any) -> bool:
            by = self._closing_by
            return by is not None and (not final or by - time.monotonic() < _LAST_TRY_S)

        return stop

    def _closing_wait(self, wait: Callable[[Any], float]) -> Callable[[Any], float]:
        """The retry wait, cut so that a last try still fits before the deadline."""
        def cut(retry_state: Any) -> float:
            by = self._closing_by
            planned = wait(retry_state)
            return planned if by is None else max(0.0, min(planned, by - time.monotonic() - _LAST_TRY_S))

        return cut

    def _failed(self, payload: Mapping[str, Any], target: str, error: str, tries: int) -> None:
        log.warning("notify_failed", message=f"{payload.get('event')} notification to {target} failed after "
                                             f"{tries} tries: {error}")
        if self.journal_append is None:
            return
        try:
            self.journal_append("notify_failed", notification=payload.get("event"), attempt=payload.get("attempt"),
                                target=target, tries=tries, error=error)
        except Exception as exc:  # noqa: BLE001  (a full disk: already logged above)
            log.warning("notify_journal_failed", message=f"could not journal the failed notification: {exc}")


def render(p: Mapping[str, Any]) -> tuple[str, str]:
    """The title and body people read, from an event payload.

    Each field is shown on one line, a lone surrogate as ``\\udcXX`` (``one_line``): the trainer's
    user chooses some of them (its heartbeat's phase, a checkpoint folder's name), and a newline
    forged a line of the alert (``report: ...`` pointing elsewhere) while a byte that was not
    UTF-8 made the alert fail on every target that encodes its text (apprise's form://, xml://).
    Each is redacted too: an alert leaves the machine, and the trainer's phase may name a token."""
    p = {k: one_line(_redacted(k, v)) if isinstance(v, str) else v for k, v in p.items()}
    where = f"{p.get('host')}:{p.get('run_dir')} (run {p.get('run_id')}"
    if p["event"] == "incident":
        step = f", step {p['step']}" if p.get("step") is not None else ""
        phase = f", phase {p['phase']}" if p.get("phase") else ""
        signature = (f"{p['signature']} ({p.get('title')})" if p.get("signature")
                     else "unknown (no known stack signature matched)" if p.get("bundle")
                     else "unknown (no evidence bundle)")
        report = p.get("report") or p.get("bundle") or f"none ({p.get('capture_error') or 'capture failed'})"
        return (f"hangwatch: {p.get('kind')} in attempt {p.get('attempt')} on {p.get('host')}",
                "\n".join([f"what: {p.get('kind')}: {p.get('reason')}",
                           f"where: {where}, attempt {p.get('attempt')}{step}{phase})",
                           f"signature: {signature}",
                           f"done: {p.get('action')}",
                           f"report: {report}"]))
    status = f"hangwatch status {p.get('run_dir')}"
    if p["event"] == "gave_up":
        return (f"hangwatch: run stopped ({p.get('outcome')}, exit {p.get('exit_code')}) on {p.get('host')}",
                "\n".join([f"what: {p.get('outcome')}: {p.get('reason')}", f"where: {where})",
                           f"attempts: {p.get('attempts')}, incidents: {p.get('incidents')}", f"details: {status}"]))
    return (f"hangwatch: run finished on {p.get('host')}",
            "\n".join([f"what: {p.get('reason')}", f"where: {where})",
                       f"attempts: {p.get('attempts')}, incidents: {p.get('incidents')}", f"details: {status}"]))
