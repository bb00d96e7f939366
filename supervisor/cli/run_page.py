"""``hangwatch report RUN_DIR``: one page for a whole run, from its journal.

All attempts and incidents, with goodput and time to recover (``hangwatch.cli.goodput``
does the accounting); ``render_html`` builds the page, ``write_run_report`` reads the
journal, bounded, and writes RUN_DIR/report.html.
"""

from __future__ import annotations

import html
import json
import os
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

from hangwatch.cli.goodput import goodput
from hangwatch.cli.run_summary import describe_exit, started_at, supervisor_alive
from hangwatch.contract import atomic
from hangwatch.contract.journal import fold_journal, read_journal_bounded


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
        f"<td>{_recovery_cell(i, e)}</td>"
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
after it. Observed only (<code>--on-hang observe</code>): nothing was done; what would have been, and what happened. Work redone since the last checkpoint is not counted.</p>
</body></html>
"""


def _recovery_cell(incident: Mapping[str, Any], e: Any) -> str:
    """What was done, or, observed only (--on-hang observe), what would have been and what came after."""
    if incident.get("observed"):
        return e(f"observed only: would have {incident.get('would_act') or 'acted'}; "
                 f"{incident.get('after') or 'still hung'}")
    return "engine only: the trainer lived on" if incident.get("level") == 1 else "job restart"


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
