"""Wiring for unattended runs: the live status file, alerts, metrics and warnings.

All of them are observers of the supervisor (``hangwatch.supervisor.operate.observe``);
this module only builds them from the settings and hands them over. The
decisions stay in the supervisor; nothing here can stop a recovery.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from hangwatch.contract.errors import ConfigError
from hangwatch.contract.journal import fold_journal, read_journal
from hangwatch.contract.private import UnsafePathError, check_ancestors
from hangwatch.supervisor.config import OperateConfig, RunConfig
from hangwatch.supervisor.operate.evidence import bundle_summary
from hangwatch.supervisor.operate.livestatus import FILE_NAME, LiveStatus
from hangwatch.supervisor.operate.observe import ObservedJournal, Observers

#: how long the end of a run waits for queued alerts (the run_finished one above all)
NOTIFY_DRAIN_S = 30.0


class ConsoleNotes:
    """Says on the console where to look: the report of each incident, as soon as it exists."""

    def __init__(self, log: Any) -> None:
        self.log = log

    def record(self, r: Mapping[str, Any]) -> None:
        if r.get("event") == "capture" and r.get("evidence_path"):
            info = bundle_summary(r["evidence_path"])
            sig = f" (signature: {info['signature']})" if info.get("signature") else ""
            self.log.warning("incident_report", message=f"attempt {r.get('attempt')}: report {info['report'] or info['bundle']}{sig}")


@dataclass
class Operations:
    journal: ObservedJournal
    observer: Observers
    status: LiveStatus
    notifier: Any = None
    metrics: Any = None

    def close(self) -> None:
        if self.notifier is not None:
            self.notifier.close(NOTIFY_DRAIN_S)
        if self.metrics is not None:
            self.metrics.close()


def _incidents_so_far(journal: Path) -> int:
    """Incidents already in the journal (``--resume``): the end alert counts the run's, not this
    supervisor's (after a resume it said 2 of the run's 3)."""
    if not journal.exists():
        return 0
    try:
        return len(fold_journal(read_journal(journal)).incidents)
    except (OSError, ValueError):  # read again by the supervisor, which reports it
        return 0


def start(config: RunConfig, operate: OperateConfig, run_id: str, probe_name: str, log: Any) -> Operations:
    run_dir = config.run_dir
    observers = Observers()
    journal = ObservedJournal(run_dir / "journal.jsonl", run_id, observers)
    status = LiveStatus(run_dir / FILE_NAME, detector=config.detector, gpu_probe=probe_name,
                        heartbeat_warning=operate.heartbeat_warning)
    observers.add(status)
    observers.add(ConsoleNotes(log))
    ops = Operations(journal, observers, status)

    # Alert targets first: a URL apprise does not understand is refused before anything starts.
    targets: list[Any] = []
    if operate.notify_urls or operate.notify_command:
        from hangwatch.supervisor.operate.notify import AppriseTarget, CommandTarget  # noqa: PLC0415

        targets = [AppriseTarget(url) for url in operate.notify_urls]
        if operate.notify_command:
            targets.append(CommandTarget(operate.notify_command))

    if probe_name == "none" and config.detector.progress_timeout is None:
        log.warning("no_detection", message=(
            "NO HANG CAN BE DETECTED in this run: no GPU probe and --progress-timeout 0; only crashes are noticed"))

    if operate.metrics_port is not None or operate.metrics_textfile is not None:
        from hangwatch.supervisor.operate.metrics import MetricsExporter, TextfileInUse  # noqa: PLC0415  (prometheus-client only if used)

        ops.metrics = MetricsExporter(status, textfile=operate.metrics_textfile)
        if operate.metrics_port is not None:
            host, port = operate.metrics_port
            try:
                url = ops.metrics.serve(host, port)
            except OSError as exc:
                raise ConfigError(f"--metrics-port {host + ':' if host else ''}{port}: cannot listen there ({exc.strerror or exc})") from None
            status.link("metrics", url)
            log.info("metrics", message=f"Prometheus metrics at {url}")
        if operate.metrics_textfile is not None:
            try:
                # Rewritten all run long: below a folder another user controls, they could swap it for a
                # link and have it land in a directory of their choice (a run dir's rule, contract.private).
                check_ancestors(operate.metrics_textfile, "--metrics-textfile")
                ops.metrics.claim_textfile(str(run_dir))
                ops.metrics.write_textfile()  # a place it cannot write is refused now, not found out later
            except TextfileInUse as exc:
                ops.metrics.textfile = None
                ops.metrics.close()
                raise ConfigError(f"--metrics-textfile {operate.metrics_textfile}: another run writes it ({exc}); "
                                  "give each run its own file in the collector's folder, e.g. "
                                  "hangwatch-<name>.prom") from None
            except UnsafePathError as exc:
                ops.metrics.textfile = None
                ops.metrics.close()
                raise ConfigError(str(exc)) from None
            except OSError as exc:
                ops.metrics.textfile = None
                ops.metrics.close()
                raise ConfigError(f"--metrics-textfile {operate.metrics_textfile}: cannot write there "
                                  f"({exc.strerror or exc})") from None
            status.link("metrics_textfile", str(operate.metrics_textfile))
        observers.add(ops.metrics)

    if targets:
        from hangwatch.supervisor.operate.notify import Notifier  # noqa: PLC0415

        ops.notifier = Notifier(targets, run_dir=str(run_dir), journal_append=journal.append,
                                incidents_so_far=_incidents_so_far(run_dir / "journal.jsonl"))
        observers.add(ops.notifier)
        log.info("notify", message="alerts (incident, gave_up, run_finished) to: " + ", ".join(t.name for t in targets))
    return ops
