"""What a run did (its journal) and what it is doing now (its status file): the summary,
its rendering and ``--follow`` of ``hangwatch status``, read by ``report`` and ``run --resume`` too.

The journal is the record: attempts with their exit code or signal, incidents
with their signature and report. ``status.json`` is the live view the
supervisor rewrites (phase, stall progress, heartbeat, backoff), trusted only
while a live supervisor holds the run directory's lock. ``--follow`` streams
journal events and phase changes until the run finishes.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import sys
import time
from pathlib import Path
from typing import Any, Callable, Mapping, TextIO

import psutil

from hangwatch.cli.rundir import held_by_live_supervisor
from hangwatch.contract import env
from hangwatch.contract.capped import open_regular
from hangwatch.contract.terminal import one_line, terminal_safe
from hangwatch.contract.journal import MAX_LINE_BYTES, fold_journal, parse_record, read_journal_bounded
from hangwatch.contract.procid import pid_exists
from hangwatch.supervisor.operate.evidence import bundle_summary
from hangwatch.supervisor.operate.livestatus import read_status


#: ``status --json``'s version: raised when a key changes meaning or goes; new keys may come
JSON_SCHEMA = 1


def supervisor_alive(run_dir: Path, pids: list[int], since: float | None = None) -> bool:
    """The run's supervisor lives: it holds the run dir's lock; without a lock file (a run from
    before it existed), its pid, the last one ``run_started``/``run_resumed`` named at ``since``,
    still runs and is as old as that record."""
    held = held_by_live_supervisor(run_dir)
    if held is not None:
        return held
    return bool(pids) and _running_since(pids[-1], since)


def _running_since(pid: int, since: float | None) -> bool:
    """``pid`` exists and was created before ``since``: a pid reused by a newer process (pid 1 in a
    journal from elsewhere) made `status` say "running" and `--follow` wait forever."""
    if not pid_exists(pid):
        return False
    if since is None:
        return True
    try:
        return psutil.Process(pid).create_time() <= since + 1.0
    except psutil.NoSuchProcess:
        return False
    except psutil.Error:
        return True  # exists, but its age cannot be read: as before


def started_at(records: list[dict[str, Any]]) -> float | None:
    """When the last supervisor of a run wrote its ``run_started`` or ``run_resumed``."""
    ts = [r.get("ts") for r in records if r.get("event") in ("run_started", "run_resumed")]
    return ts[-1] if ts and isinstance(ts[-1], (int, float)) else None


def describe_exit(exit_code: int | None, kind: str | None = None) -> str:
    """"exit 3", "killed by SIGKILL (-9)", or why there is no status."""
    if kind == "supervisor_lost":
        return "unknown (supervisor lost)"
    if exit_code is None:
        return "-"
    if exit_code < 0:
        try:
            name = signal.Signals(-exit_code).name
        except ValueError:
            name = f"signal {-exit_code}"
        return f"killed by {name} ({exit_code})"
    return f"exit {exit_code}"


def locate_bundle(run_dir: Path, path: Any) -> tuple[Any, bool]:
    """Where an incident bundle the journal names is now, and whether it is gone.

    The journal holds absolute paths: in a run directory that was moved or copied (off a
    cluster, say) they name the old place, so the bundle is looked for by its name under
    this run directory's ``incidents/`` too. Gone: removed (``--keep-incidents``, by hand)."""
    if not path or not isinstance(path, str):
        return path, False
    try:
        if os.path.lexists(path):
            return path, False
        name = Path(path).name
        here = run_dir / "incidents" / name
        if name not in ("", ".", "..") and here.is_dir():
            return str(here), False
    except (OSError, ValueError):  # a name too long, a NUL: as journaled
        return path, False
    return path, True


# Each incident's signature is read from its bundle's manifest (up to 4 MiB, parsed): a journal
# of 200 incidents naming one 4 MiB manifest of `[{},...]` kept `status` 30 s (its 1 GiB, hours).
# So each manifest file is parsed once (by its inode: links to one file are one), and at most
# this many manifest bytes in all; past it, a signature is not read (shown as none).
_MANIFEST_BUDGET = 256 << 20
_manifests: dict[tuple[int, int, int, int], dict[str, Any]] = {}
_manifest_bytes = [0]


def bundle_info(path: Any) -> dict[str, Any]:
    """``bundle_summary`` of an incident's bundle, each manifest parsed once, all of them within a budget."""
    try:
        st = os.lstat(Path(path) / "manifest.json")
    except (OSError, TypeError, ValueError):
        return bundle_summary(path)  # no manifest (or no path): nothing is parsed
    if not stat.S_ISREG(st.st_mode):
        return bundle_summary(path)  # not read as a manifest (a link, a FIFO): nothing is parsed
    key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
    known = _manifests.get(key)
    if known is None and _manifest_bytes[0] + st.st_size > _MANIFEST_BUDGET:
        known = {"signature": None, "title": None}
    if known is None:
        info = bundle_summary(path)
        _manifest_bytes[0] += st.st_size
        _manifests[key] = {"signature": info["signature"], "title": info["title"]}
        return info
    info = bundle_summary(None)
    info["bundle"] = str(Path(path))
    report = Path(path) / "report.html"
    try:
        info["report"] = str(report) if report.is_file() else None
    except OSError:
        pass
    return {**info, **known}


def summarise(path: Path) -> dict[str, Any]:
    # Bounded: the run dir may be another user's, its journal 1 GiB of tiny records.
    records, left_out = read_journal_bounded(path)
    run = fold_journal(records)
    run_dir = path.parent
    ended = {int(r["attempt"]): r for r in records if r.get("event") == "attempt_ended" and r.get("attempt") is not None}
    attempts = []
    for a in sorted(run.attempts, key=lambda a: a.attempt):
        end = ended.get(a.attempt, {})
        attempts.append({
            "attempt": a.attempt,
            "pid": a.pid,
            "started": a.started,
            "cudagraphs": "off" if a.env.get(env.CUDAGRAPHS) == "0" else "on",
            "enforce_eager": a.env.get(env.ENFORCE_EAGER) == "1",
            "resume_from": a.resume_from,
            "ended": a.ended,
            "outcome": a.outcome,
            # Every key always there (null while the attempt runs): `--json` readers see one shape.
            **({"exit_code": a.exit_code, "signal": _signal_name(a.exit_code, end.get("signal")),
                "exit": describe_exit(a.exit_code, a.outcome), "duration_s": end.get("duration_s"),
                "evidence": a.evidence, "reason": a.reason} if a.ended is not None else
               {"exit_code": None, "signal": None, "exit": "-", "duration_s": None, "evidence": None, "reason": None}),
        })
    evidence = {a["attempt"]: a.get("evidence") for a in attempts}
    for r in records:
        if r.get("event") == "capture" and r.get("evidence_path") and not evidence.get(r.get("attempt")):
            evidence[r.get("attempt")] = r["evidence_path"]
    incidents = []
    for i in run.incidents:
        bundle, gone = locate_bundle(run_dir, i.get("evidence_path") or evidence.get(i.get("attempt")))
        info = bundle_info(bundle)
        incidents.append({**i, "evidence_path": info["bundle"], "report": info["report"], "bundle_gone": gone,
                          "signature": info["signature"], "signature_title": info["title"]})
    pids = run.supervisor_pids
    alive = run.finished is None and supervisor_alive(run_dir, pids, started_at(records))
    live = read_status(run_dir) if alive else None
    if run.finished is not None:
        state = f"finished: {run.finished['outcome']} (exit {run.finished['exit_code']})"
    elif alive:
        current = attempts[-1]["attempt"] if attempts else None
        doing = f"attempt {current}" if current is not None else "starting (no attempt yet)"
        state = f"running: {doing}, supervisor pid {pids[-1] if pids else '?'}"
    else:
        state = "supervisor gone without finishing: continue with hangwatch run --resume RUN_DIR"
    return {
        "schema": JSON_SCHEMA,
        "run_dir": str(run_dir),
        "run_id": run.run_id,
        "state": state,
        "alive": alive,
        "now": describe_live(live) if live else None,
        "live": live,
        "attempts": attempts,
        # Judged attempts followed by another, as --max-restarts counts: a stop's attempt, or one a
        # dead supervisor left, was followed by a --resume, not a restart.
        "restarts": sum(1 for a in run.attempts[:-1] if a.judged),
        "incidents": incidents,
        "finished": run.finished,
        "cohort": {**run.cohort, "events": run.cohort_events} if run.cohort else None,
        "pruned": _pruned(records),
        "engine_restarts": _engine_restarts(records),
        # --on-hang observe: incidents the trainer moved on from with nothing done
        "recovered_by_itself": run.recovered_by_itself,
        # --progress-timeout auto: the progress timeout learned last, and what from (None before one is)
        "learned_timeout": run.learned_timeout,
        "alerts_failed": _alerts_failed(records),
        # bytes in the journal's middle not read (its first and last records are what is shown)
        "journal_left_out_bytes": left_out,
        # how each attempt's root was started (warm or cold, and why), and the warm launcher held now
        "launches": _launches(records),
        "warm": _warm_launcher(records, alive),
    }


def _launches(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each attempt's ``launch`` (attempt_started): warm, with its memory, or cold and why."""
    out = []
    for r in records:
        if r.get("event") == "attempt_started" and isinstance(r.get("launch"), dict):
            out.append({"attempt": r.get("attempt"), **r["launch"]})
    return out


def _warm_launcher(records: list[dict[str, Any]], alive: bool) -> dict[str, Any] | None:
    """The next attempt's warm launcher as the journal last said (ready: pid and RSS; or discarded,
    why), while the run is alive and no attempt has started since."""
    if not alive:
        return None
    last = None
    for r in records:
        if r.get("event") in ("prewarm_ready", "prewarm_discarded"):
            last = r
        elif r.get("event") == "attempt_started":
            last = None
    if last is None:
        return None
    fields = ("pid", "rss_mb", "imports", "import_s", "cuda_runtime_libs", "reason")
    return {"state": "ready" if last["event"] == "prewarm_ready" else "discarded",
            **{k: last.get(k) for k in fields if k in last}}


def _launch_lines(summary: Mapping[str, Any]) -> list[str]:
    """The last relaunches' paths (warm with its RSS, or cold and why), and the warm launcher now."""
    lines = []
    for launch in (summary.get("launches") or [])[1:][-3:]:
        if launch.get("mode") == "warm":
            lines.append(f"launch   attempt {launch.get('attempt')}: warm (prewarmed launcher, RSS "
                         f"{launch.get('rss_mb')} MB, idle {launch.get('idle_s')} s)")
        else:
            lines.append(f"launch   attempt {launch.get('attempt')}: cold ({launch.get('reason') or 'no reason given'})")
    warm = summary.get("warm")
    if warm and warm.get("state") == "ready":
        lines.append(f"warm     the next attempt's launcher is ready: pid {warm.get('pid')}, RSS {warm.get('rss_mb')} MB, "
                     f"imported {', '.join(warm.get('imports') or []) or 'nothing'} in {warm.get('import_s')} s")
    elif warm:
        lines.append(f"warm     the next attempt's launcher was discarded: {warm.get('reason')}")
    return lines


#: past this many attempts, runs of alike attempts are shown as their first and last row
_MANY_ATTEMPTS = 50
_ALIKE_RUN = 5


def _attempt_rows(rows: list[tuple[str, str]]) -> list[str]:
    """The attempt table's lines; with many attempts, a run of alike ones (same outcome, exit,
    graphs, resume point) is its first row, a count and its last row: a crash loop of 400
    attempts was 400 identical lines between the run's state and its incidents."""
    if len(rows) <= _MANY_ATTEMPTS:
        return [head + rest for head, rest in rows]
    out: list[str] = []
    i = 0
    while i < len(rows):
        j = i
        while j + 1 < len(rows) and rows[j + 1][1] == rows[i][1]:
            j += 1
        if j - i + 1 >= _ALIKE_RUN:
            out += [rows[i][0] + rows[i][1], f"    ...  {j - i - 1} more alike", rows[j][0] + rows[j][1]]
        else:
            out += [head + rest for head, rest in rows[i:j + 1]]
        i = j + 1
    return out


def _alerts_failed(records: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Alerts that were not delivered (``notify_failed``): how many, and whether the run's last one is among them.

    The person reading ``status`` is often the one a page never reached."""
    failed = [r for r in records if r.get("event") == "notify_failed"]
    if not failed:
        return None
    last = failed[-1]
    finals = [r for r in failed if r.get("notification") in ("gave_up", "run_finished")][:8]
    return {"count": len(failed), "final_failed": [str(r.get("target")) for r in finals],
            "last": {k: last.get(k) for k in ("notification", "target", "error", "ts")}}


def _engine_restarts(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Engine-level recoveries (``--recovery auto``): each restart and, if it came, the trainer's progress after it."""
    out: list[dict[str, Any]] = []
    for r in records:
        if r.get("event") == "engine_restart":
            out.append({k: r.get(k) for k in ("attempt", "ok", "cudagraphs", "reason", "ts")})
        elif r.get("event") == "engine_recovered" and out and "recovered_step" not in out[-1]:
            out[-1].update(recovered_step=r.get("step"), kill_to_progress_s=r.get("kill_to_progress_s"),
                           recovered=True, recovered_at_exit=bool(r.get("at_exit")),
                           recovered_before_hang=bool(r.get("before_hang")))
    return out


def _pruned(records: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Bundles removed by --keep-incidents: how many, and when last."""
    pruned = [r for r in records if r.get("event") == "incidents_pruned" and isinstance(r.get("removed"), list)]
    if not pruned:
        return None
    return {"bundles": sum(len(r["removed"]) for r in pruned), "last": pruned[-1].get("ts"),
            "keep": pruned[-1].get("keep")}


def _signal_name(exit_code: int | None, journaled: str | None) -> str | None:
    if journaled:
        return journaled
    if exit_code is not None and exit_code < 0:
        try:
            return signal.Signals(-exit_code).name
        except ValueError:
            return None
    return None


# What a field of the wrong type raises while a line is formatted: status.json and the
# journal are files on disk that anyone with access to the run dir may have edited.
_MALFORMED = (TypeError, ValueError, KeyError, AttributeError, OverflowError, IndexError)


def describe_live(live: Mapping[str, Any], now: float | None = None) -> str:
    """One line: what the supervisor is doing, with its numbers."""
    try:
        return _describe_live(live, now)
    except _MALFORMED as exc:
        return f"phase {str(live.get('phase'))[:40]!r} (status.json holds fields hangwatch does not write: {exc!s:.80})"


def _describe_live(live: Mapping[str, Any], now: float | None = None) -> str:
    now = time.time() if now is None else now
    phase = live.get("phase")
    attempt = live.get("attempt")
    if phase == "stall_building" and live.get("stall"):
        s = live["stall"]
        text = f"stall building: {s['held_s']:.0f} of {s['window_s']:.0f} s (GPU busy, its processes idle; attempt {attempt})"
    elif phase == "watching":
        text = f"watching attempt {attempt}"
        p = live.get("progress")
        if p and p.get("timeout_s") and p.get("silent_s", 0) >= min(30.0, p["timeout_s"] / 4):
            text += f"; no heartbeat progress for {p['silent_s']:.0f} of {p['timeout_s']:.0f} s"
        if not live.get("heartbeat_seen"):
            text += "; no heartbeat yet"
    elif phase == "capturing":
        text = f"capturing evidence (attempt {attempt})"
    elif phase == "killing":
        text = f"killing the process tree (attempt {attempt})"
    elif phase == "restarting_engine":
        text = f"restarting the rollout engine only; the trainer lives on (attempt {attempt})"
    elif phase == "releasing":
        text = f"waiting for GPU memory release (attempt {attempt})"
    elif phase == "backing_off" and live.get("backoff"):
        b = live["backoff"]
        left = max(0.0, float(b["until"]) - now)
        text = f"backing off: {left:.0f} s left of {b['delay_s']:.0f} s before attempt {b.get('next_attempt')}"
    elif phase == "ended":
        text = f"attempt {attempt} ended; deciding what next"
    else:
        text = str(phase)
    age = now - float(live.get("updated") or now)
    if age > 30:
        text += f" (as of {age:.0f} s ago)"
    return text


def _live_lines(live: Mapping[str, Any], now: float) -> list[str]:
    lines = [f"now      {describe_live(live, now)}"]
    try:
        hb = live.get("heartbeat")
        if hb:
            lines.append(f"heartbeat step {hb.get('step')}, phase {hb.get('phase') or '-'}, "
                         f"{max(0.0, now - float(hb['ts'])):.0f} s ago")
        else:
            lines.append("heartbeat none yet in this attempt")
        warnings = live.get("warnings") or []
        if live.get("heartbeat_seen"):  # "no heartbeat yet" warnings no longer say what is happening now
            warnings = [w for w in warnings if w.get("event") not in ("no_detection", "no_heartbeat")]
        for w in warnings[-2:]:
            lines.append(f"warning  {w['message']}")
        for name, where in (live.get("links") or {}).items():
            lines.append(f"{name:<8} {where}")
    except _MALFORMED as exc:
        lines.append(f"status   status.json holds fields hangwatch does not write ({exc!s:.80}); the journal below is the record")
    return lines


def _report_of(incident: Mapping[str, Any]) -> str:
    if incident.get("bundle_gone"):
        return f"none (its bundle {incident.get('evidence_path')} no longer exists)"
    return str(incident.get("report") or incident.get("evidence_path") or "none (no evidence captured)")


def _lines_safe(value: Any, depth: int = 0) -> Any:
    """Every string in ``value`` on one line: a checkpoint folder the trainer's user named
    ``checkpoint-5\n      9  ...`` printed a forged attempt row of its own (terminal_safe
    keeps newlines: they are the text's own line breaks). Nesting deeper than anything
    hangwatch writes (a journal line may hold hundreds of levels) is shown as a mark."""
    if isinstance(value, str):
        return one_line(value)
    if isinstance(value, (Mapping, list, tuple)) and depth >= _SHOWN_DEPTH:
        return "(nested too deep)"
    if isinstance(value, Mapping):
        return {_lines_safe(k, depth + 1): _lines_safe(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_lines_safe(v, depth + 1) for v in value]
    return value


_SHOWN_DEPTH = 32


def _learned_line(r: dict[str, Any]) -> str:
    """A ``timeout_learned`` record as one line: the value, and the inputs it came from."""
    quantile = r.get("quantile")
    q = f"p{quantile * 100:g}" if isinstance(quantile, (int, float)) else "quantile"
    return (f"progress {r.get('timeout_s')} s, learned in attempt {r.get('attempt')} from {r.get('intervals')} "
            f"beat intervals ({q} {r.get('quantile_s')} s x {r.get('factor')}, longest {r.get('max_interval_s')} s; "
            f"floor {r.get('floor')} s, ceiling {r.get('ceiling')} s)")


def render_status(summary: dict[str, Any], now: float | None = None) -> str:
    now = time.time() if now is None else now
    summary = _lines_safe(summary)
    lines = [
        f"run      {summary['run_dir']} ({summary['run_id']})",
        f"state    {summary['state']}",
    ]
    live = summary.get("live")
    if live:
        lines += _live_lines(live, now)
    learned = summary.get("learned_timeout")
    if learned:
        lines.append(f"timeout  {_learned_line(learned)}")
    try:
        lines += _launch_lines(summary)
    except _MALFORMED:
        lines.append("launch   the journal's launch records hold fields hangwatch does not write")
    lines += [
        f"restarts {summary['restarts']}, incidents {len(summary['incidents'])}"
        + (f", recovered by itself {summary['recovered_by_itself']}" if summary.get("recovered_by_itself") else ""),
        "",
        "attempt  started              outcome          exit                       graphs  resumed from",
    ]
    # An attempt without its end record runs only while its supervisor does; one a dead
    # supervisor left open is not running (its guardian kills what is left; --resume closes it).
    open_attempt = "running" if summary.get("alive", True) else "left open"
    rows = []
    for a in summary["attempts"]:
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(a["started"]))
        graphs = a["cudagraphs"] + ("+eager" if a["enforce_eager"] else "")
        rest = f"{str(a['outcome'] or open_attempt):<15}  {a.get('exit', '-'):<25}  {graphs:<6}  {a['resume_from'] or '-'}"
        rows.append((f"{a['attempt']:>7}  {started}  ", rest))
    lines += _attempt_rows(rows)
    for i in summary["incidents"]:
        sig = i.get("signature") or "none"
        lines.append(f"incident: attempt {i['attempt']} {i['kind']}: {i['reason']} (latency {i['latency_s']} s)")
        lines.append(f"          signature {sig}{' (' + i['signature_title'] + ')' if i.get('signature_title') else ''}; "
                     f"report {_report_of(i)}")
        if i.get("observe_only"):
            lines.append(f"          {_observed_line(i)}")
    cohort = summary.get("cohort")
    if cohort:
        lines.append(f"cohort:  node {cohort.get('node_rank')} of {cohort.get('nnodes')} ({cohort.get('cohort_id')}), store "
                     f"{cohort.get('store')}" + (" hosted here" if cohort.get("hosts_store") else ""))
        for e in cohort["events"]:
            if e["event"] == "cohort_incident":
                lines.append(f"         attempt {e.get('attempt')}: node {e.get('announced_by')} announced {e.get('kind')} "
                             f"(suspect node {e.get('suspect_node')})")
            elif e["event"] == "cohort_agreed":
                lines.append(f"         attempt {e.get('attempt')}: agreed checkpoint step {e.get('checkpoint_step')}, "
                             f"graphs {e.get('cudagraphs')}" + (" (job resumed)" if e.get("resumed") else ""))
            elif e["event"] == "cohort_culprit":
                lines.append(f"         attempt {e.get('attempt')}: " + (
                    f"culprit rank {e.get('rank')} on node {e.get('node')} (pid {e.get('pid')}): {e.get('reason')}"
                    if e.get("present") is not False else str(e.get("note"))))
            else:
                lines.append(f"         attempt {e.get('attempt')}: {e.get('reason')}")
    for e in summary.get("engine_restarts") or []:
        if not e.get("ok"):
            lines.append(f"engine:  attempt {e['attempt']}: the engine could not be restarted alone; the job was restarted")
            continue
        if e.get("recovered_at_exit"):
            after = "; its retried rollouts came back, then the trainer exited"
        elif e.get("recovered_before_hang"):
            after = "; its retried rollouts came back, then a new hang came before the trainer's step moved on"
        elif e.get("recovered_step") is not None:
            after = f"; the trainer reached step {e['recovered_step']} {e['kill_to_progress_s']} s later"
        else:
            after = "; the trainer moved on" if e.get("recovered") else "; no progress after it"
        lines.append(f"engine:  attempt {e['attempt']}: only the rollout engine was restarted (graphs "
                     f"{e['cudagraphs']}), the trainer lived on{after}")
    alerts = summary.get("alerts_failed")
    if isinstance(alerts, dict) and isinstance(alerts.get("last"), dict):
        last = alerts["last"]
        finals = alerts.get("final_failed") or []
        final = f"; the run's last alert did NOT reach {', '.join(map(str, finals))}" if finals else ""
        lines.append(f"alerts:  {alerts.get('count')} not delivered{final} (last: {last.get('notification')} to "
                     f"{last.get('target')}: {last.get('error')})")
    pruned = summary.get("pruned")
    if pruned:
        last = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(pruned["last"])) if pruned["last"] else "?"
        lines.append(f"pruned: {pruned['bundles']} old incident bundle(s) removed (--keep-incidents {pruned['keep']}), "
                     f"last at {last}")
    if summary["finished"] and summary["finished"].get("reason"):
        lines.append(f"finished: {summary['finished']['reason']}")
    if summary.get("journal_left_out_bytes"):
        lines.append(f"journal: {summary['journal_left_out_bytes']} bytes in its middle were not read (more records "
                     "than a run writes); shown: its first and its last records")
    return "\n".join(lines)


# -- --follow ----------------------------------------------------------------------


def event_line(r: Mapping[str, Any]) -> str:
    """One journal record as a line a person reads (as raw JSON if a field has a type we never write)."""
    r = _lines_safe(r)
    try:
        return _event_line(r)
    except _MALFORMED:
        stamp = time.strftime("%H:%M:%S", time.localtime(float(r.get("ts") or 0)))
        return f"{stamp}  {r.get('event')} " + json.dumps({k: v for k, v in r.items() if k not in ("event", "ts", "run_id")},
                                                          default=str)[:200]


def _observed_line(incident: Mapping[str, Any]) -> str:
    """An incident observed only (--on-hang observe): what would have been done, and since."""
    would = incident.get("would_act") or {}
    what = "the rollout engine" if would.get("scope") == "engine" else "the job"
    after = incident.get("recovered_after_s")
    return (f"observed only: would have restarted {what} (killing {len(would.get('would_kill') or [])} process(es), "
            f"cuda graphs {would.get('cudagraphs', '?')}); "
            + (f"recovered by itself after {after} s" if after is not None else "not recovered by itself"))


def _event_line(r: Mapping[str, Any]) -> str:
    e, a = r.get("event"), r.get("attempt")
    if e == "run_started":
        text = f"run started: supervisor pid {r.get('pid')}, gpu probe {r.get('gpu_probe')}"
    elif e == "run_resumed":
        text = f"run resumed by supervisor pid {r.get('pid')} after {r.get('attempts_so_far')} attempt(s)"
    elif e == "attempt_started":
        text = f"attempt {a} started: pid {r.get('pid')}" + (f", resuming from {r['resume_from']}" if r.get("resume_from") else "")
    elif e == "first_heartbeat":
        text = f"attempt {a}: first heartbeat {r.get('after_launch_s')} s after launch (step {r.get('step')})"
    elif e == "incident":
        text = f"attempt {a}: INCIDENT {r.get('kind')}: {r.get('reason')}"
    elif e == "capture":
        info = bundle_info(r.get("evidence_path"))
        text = (f"attempt {a}: evidence captured in {r.get('duration_s')} s; report {info['report'] or info['bundle']}"
                if r.get("evidence_path") else f"attempt {a}: capture failed: {r.get('error')}")
    elif e == "kill":
        text = f"attempt {a}: killed {len(r.get('pids') or [])} process(es) in {r.get('duration_s')} s" + (
            "" if r.get("confirmed", True) else f"; {len(r.get('survivors') or [])} SURVIVED")
    elif e == "gpu_released":
        released = r.get("released")
        whose = "the killed engine worker's GPU memory" if r.get("scope") == "engine" else "GPU memory"
        text = (f"attempt {a}: {whose} not verifiable (the probe lists no processes)" if released is None else
                f"attempt {a}: {whose} {'released' if released else 'NOT released'} after {r.get('waited_s')} s")
    elif e == "attempt_ended":
        text = f"attempt {a} ended: {r.get('kind')}, {describe_exit(r.get('exit_code'), r.get('kind'))}"
    elif e == "would_act":
        text = (f"attempt {a}: observe-only: would have restarted {'the engine' if r.get('level') == 1 else 'the job'}, "
                f"killing {len(r.get('would_kill') or [])} process(es); nothing done")
    elif e == "timeout_learned":
        text = f"attempt {a}: {_learned_line(r)}"
    elif e == "recovered_by_itself":
        text = f"attempt {a}: recovered by itself {r.get('after_s')} s after the incident (step {r.get('step')})"
    elif e == "restart_scheduled":
        text = f"restart in {r.get('delay_s')} s (cuda graphs {r.get('cudagraphs')}): {r.get('reason')}"
    elif e == "run_finished":
        text = f"run finished: {r.get('outcome')} (exit {r.get('exit_code')}): {r.get('reason')}"
    elif e == "notify_failed":
        text = f"alert {r.get('notification')} to {r.get('target')} failed after {r.get('tries')} tries: {r.get('error')}"
    else:
        text = f"{e} " + json.dumps({k: v for k, v in r.items() if k not in ("event", "ts", "run_id")}, default=str)[:200]
    return f"{time.strftime('%H:%M:%S', time.localtime(float(r.get('ts') or 0)))}  {text}"


class JournalTail:
    """New whole records of a growing journal, at most ``chunk`` bytes per read.

    Lines go through the journal's own parser (the same checks as every reader);
    a line longer than a record can be is dropped as it streams, never held."""

    def __init__(self, path: Path, chunk: int = 1 << 20) -> None:
        self.path = path
        self.offset = 0
        self.chunk = chunk
        self._partial = b""
        self._skipping = False  # inside an overlong line: drop bytes up to its newline
        self.caught_up = False  # the last read reached the end of the file

    def read(self) -> list[dict[str, Any]]:
        try:
            # Only a regular file, and no device opened even for an instant (``open_regular``): each
            # poll of root's `status --follow` on another user's run dir opened what their journal
            # link named (their terminal, /dev/watchdog); a FIFO would hang the follower.
            fd = open_regular(self.path)
        except OSError:
            return []
        try:
            data = os.pread(fd, self.chunk, self.offset)
        except OSError:
            return []
        finally:
            os.close(fd)
        self.offset += len(data)
        self.caught_up = len(data) < self.chunk
        if self._skipping:
            end = data.find(b"\n")
            if end < 0:
                return []
            data, self._skipping = data[end + 1:], False
        data = self._partial + data
        lines = data.split(b"\n")
        self._partial = lines.pop()  # an unfinished last line waits for its newline
        if len(self._partial) > MAX_LINE_BYTES:
            self._partial, self._skipping = b"", True
        return [r for r in map(parse_record, lines) if r is not None]


def follow(run_dir: Path, *, as_json: bool = False, out: TextIO = sys.stdout, poll: float = 0.5,
           sleep: Callable[[float], None] = time.sleep) -> int:
    """Stream until the run finishes (0) or its supervisor is gone without finishing (1)."""
    tail = JournalTail(run_dir / "journal.jsonl")
    last_phase: tuple[Any, ...] | None = None
    pids: list[int] = []
    since: float | None = None
    gone = False
    while True:
        finished = False
        for r in tail.read():
            if r.get("event") in ("run_started", "run_resumed"):
                pids.append(int(r.get("pid") or 0))
                since = started_at([r])
            finished = finished or r.get("event") == "run_finished"
            out.write((json.dumps(r, default=str) if as_json else terminal_safe(event_line(r))) + "\n")
        if finished:
            out.flush()
            return 0
        alive = supervisor_alive(run_dir, pids, since)
        live = read_status(run_dir) if alive else None
        if live is not None:
            key = (live.get("phase"), live.get("attempt"))
            if key != last_phase:
                last_phase = key
                if as_json:
                    out.write(json.dumps({"event": "phase", **live}, default=str) + "\n")
                else:
                    stamp = time.strftime("%H:%M:%S", time.localtime(float(live.get("updated") or time.time())))
                    out.write(f"{stamp}  now: {one_line(describe_live(live))}\n")
        out.flush()
        if not tail.caught_up:
            continue  # a journal longer than one read: the rest first, then judge the supervisor
        if not alive:
            if gone:  # and nothing finished since the last look: it died
                out.write("supervisor gone without finishing: continue with hangwatch run --resume RUN_DIR\n")
                out.flush()
                return 1
            gone = True  # one more read: its last records may have landed meanwhile
            continue
        gone = False
        sleep(poll)
