"""``hangwatch report RUN_DIR``: one page for a whole run, from its journal.

All attempts and incidents, with goodput: the share of the run's wall time the
trainer was making progress. An attempt's progress runs from its first
heartbeat (or its launch, for a trainer that never beats) to its end, or to
the onset of its hang (the last progress); everything else is lost, split into
start-up (launch to first heartbeat), hung (onset to detection), recovery
(detection to the attempt's end: capture, kill, GPU release) and backoff
(between attempts). Work redone since the last checkpoint is not counted.
Time to recover, per incident: onset to the next attempt's first heartbeat.

``goodput`` is pure (records in, numbers out); ``render_html`` builds the page.
"""

from __future__ import annotations

import html
import json
import math
import os
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

from hangwatch.cli.status import bundle_info, describe_exit, locate_bundle, started_at, supervisor_alive
from hangwatch.contract import atomic
from hangwatch.contract.journal import fold_journal, read_journal_bounded


def _timed(records: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The records the accounting can use: with a time, and an onset only if it is a time.

    The journal reader checks the fields every reader needs; these two it leaves (a record
    may lack ``ts``, ``onset_wall`` is ours alone), and `report`, like `status`, may be
    pointed at a journal edited by hand or written by another version: no traceback."""
    def is_time(value: Any) -> bool:
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)

    out = []
    for r in records:
        if not is_time(r.get("ts")):
            continue
        if r.get("onset_wall") is not None and not is_time(r.get("onset_wall")):
            r = {k: v for k, v in r.items() if k != "onset_wall"}
        out.append(r)
    return out


def _seconds(value: Any) -> float | None:
    """A journal's duration, or None when it is not a finite non-negative number."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value >= 0
    return float(value) if ok else None


def goodput(records: Sequence[Mapping[str, Any]], now: float | None = None, run_dir: Path | None = None) -> dict[str, Any]:
    """Time accounting of a run from its journal records (wall-clock seconds); with ``run_dir``,
    incident bundles are looked for where they are now (``status.locate_bundle``)."""
    records = _timed(records)
    start = next((float(r["ts"]) for r in records if r.get("event") in ("run_started", "run_resumed")), None)
    finish = next((float(r["ts"]) for r in records if r.get("event") == "run_finished"), None)
    end = finish if finish is not None else (time.time() if now is None else now)
    attempts: dict[int, dict[str, Any]] = {}
    order: list[int] = []
    for r in records:
        event, n = r.get("event"), r.get("attempt")
        if event == "attempt_started":
            attempts[int(n)] = {"attempt": int(n), "started": float(r["ts"]), "first_beat": None, "onset": None,
                                "detected": None, "ended": None, "kind": None, "exit_code": None,
                                "evidence": None, "engine_level": []}
            order.append(int(n))
        elif n is None or int(n) not in attempts:
            continue
        a = attempts[int(n)]
        if event == "first_heartbeat":
            a["first_beat"] = float(r["ts"])
        elif event == "incident":
            if a["onset"] is not None:
                # An engine-level incident never recovered (its retry wedged again): lost until this
                # one's onset, and listed too.
                onset_now = float(r.get("onset_wall") or r["ts"])
                a["engine_level"].append({**{k: a[k] for k in ("onset", "detected", "evidence", "incident")},
                                          "recovered": max(onset_now, a["detected"] or onset_now),
                                          "unrecovered": True})
            a["detected"] = float(r["ts"])
            a["onset"] = float(r.get("onset_wall") or r["ts"])
            a["incident"] = {"kind": r.get("kind"), "reason": r.get("reason"), "latency_s": r.get("latency_s")}
        elif event == "capture" and r.get("evidence_path"):
            a["evidence"] = r["evidence_path"]
        elif event == "engine_recovered" and a["onset"] is not None:
            # Level 1: the incident ended inside the attempt, the trainer went on. Its span is
            # lost time within the attempt, not the attempt's end.
            # Recovered when its record says (a restart whose retried rollouts came back before a new
            # hang is journaled at that hang), else when it was written.
            took = _seconds(r.get("onset_to_progress_s"))
            a["engine_level"].append({**{k: a[k] for k in ("onset", "detected", "evidence", "incident")},
                                      "recovered": a["onset"] + took if took is not None else float(r["ts"])})
            a["onset"] = a["detected"] = a["evidence"] = None
        elif event == "engine_restart" and r.get("backstop"):
            a["backstop_killed_s"] = _seconds(r.get("onset_to_killed_s"))
        elif event == "engine_recovered" and r.get("backstop") and "backstop_killed_s" in a:
            # The generator's own timeout restarted its engine, no verdict came: lost all the same
            # (it once read as progress, with no incident listed). Hung until its worker was killed.
            took, killed = _seconds(r.get("onset_to_progress_s")) or 0.0, a.pop("backstop_killed_s") or 0.0
            onset = float(r["ts"]) - took
            a["engine_level"].append({"onset": onset, "detected": onset + min(killed, took), "evidence": None,
                                      "recovered": float(r["ts"]),
                                      "incident": {"kind": "stall", "latency_s": round(min(killed, took), 3),
                                                   "reason": "the generator's own timeout restarted its engine "
                                                             "(no verdict, no evidence)"}})
        elif event == "attempt_ended":
            a["ended"], a["kind"], a["exit_code"] = float(r["ts"]), r.get("kind"), r.get("exit_code")
    totals = {"productive": 0.0, "startup": 0.0, "hung": 0.0, "recovery": 0.0, "backoff": 0.0}
    incidents = []
    previous_end = start
    for i, n in enumerate(order):
        a = attempts[n]
        a_end = a["ended"] if a["ended"] is not None else end
        if previous_end is not None:
            totals["backoff"] += max(0.0, a["started"] - previous_end)
        working_from = a["first_beat"] if a["first_beat"] is not None else a["started"]
        totals["startup"] += max(0.0, min(working_from, a_end) - a["started"])
        if a["kind"] == "supervisor_lost":
            # Its end was written by --resume, long after the trainer died with its supervisor.
            totals["recovery"] += max(0.0, a_end - working_from)
            previous_end = a_end
            continue
        stop = a["onset"] if a["onset"] is not None else a_end
        lost_inside = 0.0
        for e in a["engine_level"]:
            onset = max(e["onset"], working_from)
            detected = max(e["detected"] or e["recovered"], onset)
            totals["hung"] += detected - onset
            totals["recovery"] += max(0.0, e["recovered"] - detected)
            lost_inside += max(0.0, e["recovered"] - onset)
            info = _bundle(run_dir, e["evidence"])
            incidents.append({"attempt": n, **e["incident"], "signature": info["signature"],
                              "report": info["report"], "level": 1,
                              "time_to_recover_s": None if e.get("unrecovered") else round(e["recovered"] - e["onset"], 1)})
        totals["productive"] += max(0.0, stop - working_from - lost_inside)
        if a["onset"] is not None:
            detected = a["detected"] or a_end
            totals["hung"] += max(0.0, detected - max(a["onset"], working_from))
            totals["recovery"] += max(0.0, a_end - detected)
            nxt = attempts[order[i + 1]] if i + 1 < len(order) else None
            recovered = nxt["first_beat"] if nxt is not None else None
            info = _bundle(run_dir, a["evidence"])
            incidents.append({"attempt": n, **a["incident"], "signature": info["signature"],
                              "report": info["report"],
                              "time_to_recover_s": round(recovered - a["onset"], 1) if recovered else None})
        previous_end = a_end
    if previous_end is not None and finish is not None:
        totals["backoff"] += max(0.0, finish - previous_end)
    wall = max(0.0, end - start) if start is not None else 0.0
    return {
        "wall_s": round(wall, 1),
        **{f"{k}_s": round(v, 1) for k, v in totals.items()},
        "goodput": round(totals["productive"] / wall, 4) if wall > 0 else None,
        "attempts": [attempts[n] for n in order],
        "incidents": incidents,
        "finished": finish is not None,
    }


def _bundle(run_dir: Path | None, path: Any) -> dict[str, Any]:
    """bundle_summary, where the bundle is now; ``report`` falls back to the bundle, None if it is gone."""
    gone = False
    if run_dir is not None:
        path, gone = locate_bundle(run_dir, path)
    info = bundle_info(path)
    return {**info, "report": None if gone else info["report"] or info["bundle"]}


def render_html(run_dir: Path, records: Sequence[Mapping[str, Any]], g: Mapping[str, Any],
                alive: bool | None = None) -> str:
    e = html.escape
    finished = next((r for r in records if r.get("event") == "run_finished"), None)
    run_id = records[0].get("run_id") if records else ""
    state = (f"{finished.get('outcome')} (exit {finished.get('exit_code')}): {finished.get('reason')}"
             if finished else "still running (times up to now)" if alive
             else "its supervisor is gone without finishing (times up to its last record; hangwatch run --resume "
                  "continues it)" if alive is False
             else "still running, or its supervisor died (see hangwatch status)")
    if g.get("journal_left_out_bytes"):
        state += (f"; {g['journal_left_out_bytes']} bytes in the journal's middle were not read (more records than "
                  "a run writes): times are from its first and its last records")
    wall = g["wall_s"] or 1.0
    parts = [("productive", "#2e7d32"), ("startup", "#90a4ae"), ("hung", "#c62828"), ("recovery", "#ef6c00"),
             ("backoff", "#fbc02d")]
    bar = "".join(f'<div title="{name} {g[name + "_s"]:.0f} s" style="width:{100 * g[name + "_s"] / wall:.2f}%;'
                  f'background:{color}"></div>' for name, color in parts)
    legend = " · ".join(f'<span style="color:{c}">■</span> {n} {g[n + "_s"]:.0f} s' for n, c in parts)

    def when(ts: float | None) -> str:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts)) if ts else "-"

    def link(path: str | None) -> str:
        if not path:
            return "none (no bundle, or it was removed)"
        try:
            rel = os.path.relpath(path, run_dir)
        except ValueError:
            rel = path
        return f'<a href="{e(rel)}">{e(rel)}</a>'

    rows = "".join(
        f"<tr><td>{a['attempt']}</td><td>{when(a['started'])}</td>"
        f"<td>{(a['ended'] - a['started']) if a['ended'] else 0:.0f} s</td><td>{e(str(a['kind'] or 'running'))}</td>"
        f"<td>{e(describe_exit(a['exit_code'], a['kind']))}</td>"
        f"<td>{_to_first_beat(a)}</td></tr>"
        for a in g["attempts"])
    incidents = "".join(
        f"<tr><td>{i['attempt']}</td><td>{e(str(i['kind']))}</td><td>{e(str(i['reason']))}</td>"
        f"<td>{e(str(i['signature'] or 'none'))}</td><td>{i['latency_s']} s</td>"
        f"<td>{'%.0f s' % i['time_to_recover_s'] if i['time_to_recover_s'] is not None else 'not recovered'}</td>"
        f"<td>{'engine only: the trainer lived on' if i.get('level') == 1 else 'job restart'}</td>"
        f"<td>{link(i['report'])}</td></tr>"
        for i in g["incidents"]) or '<tr><td colspan="8">none</td></tr>'
    goodput_pct = f"{100 * g['goodput']:.1f} %" if g["goodput"] is not None else "-"
    return f"""<!doctype html>
<html><head><meta charset="utf-8">
<meta http-equiv=Content-Security-Policy content="default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'">
<title>hangwatch run {e(str(run_id))}</title>
<style>body{{font:14px system-ui,sans-serif;margin:2em;max-width:70em}}table{{border-collapse:collapse;margin:1em 0}}
td,th{{border:1px solid #ccc;padding:.3em .6em;text-align:left}}.bar{{display:flex;height:1.4em;border:1px solid #999}}
.bar div{{height:100%}}code{{background:#f4f4f4}}</style></head><body>
<h1>hangwatch run {e(str(run_id))}</h1>
<p><code>{e(str(run_dir))}</code><br>{e(state)}</p>
<h2>Goodput {goodput_pct}</h2>
<p>{g['wall_s']:.0f} s of wall time, {g['productive_s']:.0f} s making progress.</p>
<div class="bar">{bar}</div><p>{legend}</p>
<h2>Attempts</h2>
<table><tr><th>attempt</th><th>started</th><th>ran</th><th>outcome</th><th>exit</th><th>to first heartbeat</th></tr>{rows}</table>
<h2>Incidents</h2>
<table><tr><th>attempt</th><th>kind</th><th>reason</th><th>signature</th><th>detection latency</th><th>time to recover</th><th>recovery</th><th>report</th></tr>{incidents}</table>
<p>Productive time: first heartbeat (or launch) to the attempt's end or its hang's onset. Time to recover:
onset to the next attempt's first heartbeat; for an engine-only recovery, onset to the trainer's first step
after it. Work redone since the last checkpoint is not counted.</p>
</body></html>
"""


def _to_first_beat(attempt: dict[str, Any]) -> str:
    """Launch to the attempt's first heartbeat; 'none' when it sent none (it read 'nan s')."""
    if not attempt.get("first_beat"):
        return "none"
    return f"{attempt['first_beat'] - attempt['started']:.1f} s"


def write_run_report(run_dir: Path, out: Path | None = None) -> tuple[Path, dict[str, Any]]:
    # Bounded: the run dir may be another user's, its journal 1 GiB of tiny records.
    records, left_out = read_journal_bounded(run_dir / "journal.jsonl")
    alive = supervisor_alive(run_dir, fold_journal(records).supervisor_pids, started_at(records))
    # A run without run_finished is live, or its supervisor died: then it ended with its last
    # record, not now (a report written a week later counted the week as the run's lost time).
    last = max((float(r["ts"]) for r in records if isinstance(r.get("ts"), (int, float))), default=None)
    g = goodput(records, now=None if alive or last is None else last, run_dir=run_dir)
    if left_out:
        g["journal_left_out_bytes"] = left_out
    page = render_html(run_dir, records, g, alive=alive)
    target = out or run_dir / "report.html"
    # A run dir or command with a byte that is not UTF-8 (a lone surrogate here) failed the
    # report with an internal error: shown as \udcXX instead.
    atomic.write_file(target, page.encode("utf-8", "backslashreplace"), mode=0o644)
    return target, json.loads(json.dumps(g, default=str))
