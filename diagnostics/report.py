"""A bundle's ``report.html``: one self-contained page (inline CSS and SVG, no
scripts, no network) a person can open from a bug report.

Sections: verdict and classification with advice, a timeline of GPU
utilisation, tree CPU and heartbeats with onset and detection marked, the
process tree, the classified stacks (evidence highlighted), what the capture
got and what failed, versions, log tails.
"""

from __future__ import annotations

import html
from typing import Any, Iterable, Sequence

from hangwatch.diagnostics.bundle import Bundle
from hangwatch.diagnostics.classify import Classification, classify
from hangwatch.diagnostics.gpustate import readings
from hangwatch.diagnostics.signatures import load_signatures
from hangwatch.diagnostics.stacks import ProcessSeries
from hangwatch.contract.samples import Sample
from hangwatch.contract.terminal import one_line

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0;color:#1d2330;background:#f6f7f9}
header{background:#1d2330;color:#fff;padding:14px 24px}header h1{margin:0;font-size:20px}
header .sub{color:#b8c0d0;font-size:13px}main{padding:8px 24px 40px;max-width:1180px}
section{background:#fff;border:1px solid #dde1e8;border-radius:6px;margin:14px 0;padding:12px 16px}
h2{font-size:16px;margin:0 0 8px}table{border-collapse:collapse;font-size:13px}
td,th{padding:3px 10px 3px 0;text-align:left;vertical-align:top}th{color:#5a6375;font-weight:600}
.verdict{display:flex;gap:24px;flex-wrap:wrap}.kv b{display:block;color:#5a6375;font-size:12px;font-weight:600}
.sig{font-size:18px;font-weight:700}.sig.unknown{color:#8a5a00}.sig.known{color:#b3261e}
.advice{background:#fff8e6;border-left:4px solid #f0b400;padding:8px 12px;margin-top:8px}
pre,code{font:12px/1.4 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace}
pre{background:#f3f4f7;padding:8px;overflow:auto;max-height:420px;margin:4px 0}
.frame{white-space:pre}.ev{background:#ffe1de;font-weight:700}.native{color:#6b7385}
.badge{display:inline-block;border-radius:3px;padding:0 6px;font-size:11px;margin-left:6px}
.frozen{background:#b3261e;color:#fff}.changing{background:#2e7d32;color:#fff}.once{background:#8a93a6;color:#fff}
.fail{color:#b3261e}.ok{color:#2e7d32}ul.tree{list-style:none;padding-left:18px;margin:2px 0}
ul.tree li{margin:1px 0}details summary{cursor:pointer;color:#34508a}
.thread{margin:6px 0 10px}.muted{color:#6b7385}
"""


def render_report(bundle: Bundle, *, signature_files: Iterable[str] = ()) -> str:
    manifest = bundle.manifest or {}
    series = bundle.series()
    classification = classify(series, load_signatures(signature_files)) if series else _stored(manifest)
    verdict = manifest.get("verdict") or {}
    parts = [
        # Everything shown comes from a bundle someone may have sent: no script, no fetch, ever.
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        "<meta http-equiv=Content-Security-Policy content=\"default-src 'none'; style-src 'unsafe-inline'; "
        "img-src data:; base-uri 'none'; form-action 'none'\">",
        f"<title>hangwatch incident {_e(bundle.name)}</title><style>{_CSS}</style></head><body>",
        f"<header><h1>hangwatch incident: {_e(verdict.get('kind', '?'))}</h1>",
        f"<div class=sub>{_e(bundle.name)} · run {_e(manifest.get('run_id'))} · attempt {_e(manifest.get('attempt'))} · "
        f"captured {_e((manifest.get('times') or {}).get('capture_started'))}</div></header><main>",
        _summary(manifest, classification),
        _timeline(bundle.samples(), verdict),
        _gpus(bundle),
        _tree(bundle.process_rows() or manifest.get("tree") or [], manifest.get("root_pid")),
        _stacks(series, classification),
        _capture(manifest, bundle.left_out),
        _versions(bundle.json("versions.json")),
        _logs(bundle),
        "</main></body></html>",
    ]
    # A byte that was not UTF-8 (a trainer argument, a path) arrives as a lone surrogate, which
    # no writer can encode: `hangwatch report` of the bundle failed as malformed input. Shown
    # as \udcXX instead.
    return "\n".join(parts).encode("utf-8", "backslashreplace").decode("utf-8")


def _stored(manifest: dict[str, Any]) -> Classification | None:
    data = manifest.get("classification")
    return Classification.from_json(data) if data else None


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value))


def _frame(f: Any) -> str:
    """A frame on one line of its ``<pre>``: its names are the trainer's (a code object's name,
    ``compile()``'s filename), and a newline in one forged frames of the evidence."""
    return _e(one_line(f.render()))


def _summary(manifest: dict[str, Any], c: Classification | None) -> str:
    verdict = manifest.get("verdict") or {}
    th = manifest.get("thresholds") or {}
    kv = [
        ("Verdict", verdict.get("kind")),
        ("Reason", verdict.get("reason")),
        ("Latency", f"{verdict.get('latency_s', '?')} s after onset"),
        ("Thresholds", f"gpu ≥ {th.get('gpu_busy_pct')}%, cpu ≤ {th.get('cpu_idle_pct')}%, window {th.get('stall_window')} s, interval {th.get('interval')} s"),
    ]
    out = ["<section><h2>Verdict and diagnosis</h2><div class=verdict>"]
    out += [f"<div class=kv><b>{_e(k)}</b>{_e(v)}</div>" for k, v in kv]
    out.append("</div>")
    if c is None:
        out.append("<p class=fail>No stacks were captured; see “Capture” below for why.</p>")
    else:
        cls = "known" if c.signature_id else "unknown"
        frozen = {True: "frozen across rounds", False: "changing between rounds", None: "seen once"}[c.frozen]
        out.append(f"<p class='sig {cls}'>{_e(c.signature_id or 'unknown')}: {_e(c.title)}</p>")
        out.append(f"<p>Stalled: pid <b>{_e(c.pid)}</b>, thread <b>{_e(c.thread_name)}</b> ({_e(frozen)}, {_e(c.rounds)} round(s)) "
                   f"<span class=muted>{_e(c.cmdline[:200])}</span></p>")
        out.append("<p><b>Evidence</b></p><pre>" + "\n".join(_frame(f) for f in c.evidence) + "</pre>")
        out.append(f"<div class=advice><b>Advice.</b> {_e(c.advice)}</div>")
    out.append("</section>")
    return "".join(out)


def _timeline(samples: Sequence[Sample], verdict: dict[str, Any]) -> str:
    if not samples:
        return "<section><h2>Timeline</h2><p class=muted>No samples recorded.</p></section>"
    t0 = samples[0].t
    span = max(samples[-1].t - t0, 1e-6)
    W, L, R = 1100, 60, 20
    pw = W - L - R

    def x(t: float) -> float:
        return L + (t - t0) / span * pw

    gpu = [(s.t, max((d.util_pct for d in s.gpu), default=0.0) if s.gpu is not None else None) for s in samples]
    cpu = [(s.t, sum(s.cpu_pct.values())) for s in samples]
    cpu_max = max(100.0, max(v for _, v in cpu))
    beats, last = [], None
    for s in samples:
        if s.heartbeat is not None and s.heartbeat.token != last:
            beats.append(s.t)
            last = s.heartbeat.token
    panels = [("GPU util %", gpu, 100.0, "#b3261e", 20), ("tree CPU % (one core = 100)", cpu, cpu_max, "#34508a", 170)]
    svg = [f"<svg xmlns='http://www.w3.org/2000/svg' width='{W}' height='370' viewBox='0 0 {W} 370' role=img aria-label='timeline'>"]
    for title, series, top, color, y0 in panels:
        h = 120
        svg.append(f"<rect x='{L}' y='{y0}' width='{pw}' height='{h}' fill='#fafbfc' stroke='#dde1e8'/>")
        svg.append(f"<text x='{L}' y='{y0 - 5}' font-size='12' fill='#5a6375'>{_e(title)}</text>")
        svg.append(f"<text x='{L - 6}' y='{y0 + 10}' font-size='10' text-anchor='end' fill='#5a6375'>{top:.0f}</text>")
        svg.append(f"<text x='{L - 6}' y='{y0 + h}' font-size='10' text-anchor='end' fill='#5a6375'>0</text>")
        path, pen = [], "M"
        for t, v in series:
            if v is None:
                pen = "M"  # a missing GPU sample is a gap, not a zero
                continue
            path.append(f"{pen}{x(t):.1f},{y0 + h - min(v, top) / top * h:.1f}")
            pen = "L"
        svg.append(f"<path d='{' '.join(path)}' fill='none' stroke='{color}' stroke-width='2'/>")
    yb = 320
    svg.append(f"<text x='{L}' y='{yb - 8}' font-size='12' fill='#5a6375'>heartbeats (progress)</text>")
    svg.append(f"<line x1='{L}' y1='{yb + 10}' x2='{L + pw}' y2='{yb + 10}' stroke='#dde1e8'/>")
    for t in beats:
        svg.append(f"<line x1='{x(t):.1f}' y1='{yb}' x2='{x(t):.1f}' y2='{yb + 20}' stroke='#2e7d32' stroke-width='2'/>")
    for key, label, color in (("onset", "onset", "#f0b400"), ("detected_at", "verdict", "#b3261e")):
        t = verdict.get(key)
        if isinstance(t, (int, float)) and t0 <= t <= samples[-1].t + 1e-6:
            svg.append(f"<line x1='{x(t):.1f}' y1='15' x2='{x(t):.1f}' y2='{yb + 22}' stroke='{color}' stroke-width='2' stroke-dasharray='6 4'/>")
            near_right = x(t) > L + pw - 140
            tx, anchor = (x(t) - 4, "end") if near_right else (x(t) + 4, "start")
            svg.append(f"<text x='{tx:.1f}' y='{12 if key == 'onset' else 165}' font-size='12' fill='{color}' font-weight='700' text-anchor='{anchor}'>{label} +{t - t0:.0f} s</text>")
    for i in range(6):
        t = t0 + span * i / 5
        svg.append(f"<text x='{x(t):.1f}' y='{yb + 38}' font-size='10' text-anchor='middle' fill='#5a6375'>+{t - t0:.0f} s</text>")
    svg.append("</svg>")
    return f"<section><h2>Timeline</h2>{''.join(svg)}</section>"


#: Processes the report's tree shows: a sent bundle's table of 10 M rows made a page of GBs.
MAX_TREE_ROWS = 5000


def _tree(rows: Sequence[dict[str, Any]], root_pid: int | None) -> str:
    """The process tree as nested lists, built with a stack, not recursion: its depth is the
    trainer's (a chain of 700 nested shells made the capture's report fail with RecursionError
    and `hangwatch report` refuse hangwatch's own bundle), and a sent bundle's rows may repeat a
    pid or loop (each row is shown once)."""
    by_parent: dict[Any, list[dict[str, Any]]] = {}
    pids = {r.get("pid") for r in rows}
    for r in rows:
        by_parent.setdefault(r.get("ppid") if r.get("ppid") in pids else None, []).append(r)

    def line(r: dict[str, Any]) -> str:
        cpu = (r.get("cpu_user_s") or 0) + (r.get("cpu_system_s") or 0)
        return (f"<code>{_e(r.get('pid'))}</code> <b>{_e(r.get('name'))}</b> state {_e(r.get('state', '?'))} "
                f"wchan {_e(r.get('wchan') or '-')} cpu {cpu:.1f} s rss {(r.get('rss_bytes') or 0) / 2**20:.0f} MiB "
                f"<span class=muted>{_e(' '.join(r.get('cmdline') or [])[:160])}</span>")

    out: list[str] = []
    shown: set[int] = set()
    cut = False
    # Each entry: a row to open, or the closing markup of one whose children are done.
    stack: list[dict[str, Any] | str] = list(reversed(by_parent.get(None, [])))
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            out.append(item)
            continue
        if id(item) in shown:
            continue
        if len(shown) >= MAX_TREE_ROWS:
            cut = True  # the rest is left out; the closing markup still pops
            continue
        shown.add(id(item))
        kids = [k for k in by_parent.get(item.get("pid"), []) if id(k) not in shown]
        out.append(f"<li>{line(item)}")
        if kids:
            out.append("<ul class=tree>")
            stack.append("</ul></li>")
            stack.extend(reversed(kids))
        else:
            out.append("</li>")
    if cut:
        out.append(f"<li class=muted>... {len(rows) - len(shown)} more process(es) not shown "
                   "(processes.txt lists them)</li>")
    body = "".join(out) or "<li class=muted>no process table</li>"
    return f"<section><h2>Process tree</h2><ul class=tree>{body}</ul></section>"


def _stacks(series: Sequence[ProcessSeries], c: Classification | None) -> str:
    if not series:
        return ""
    evidence = {(f.function, f.short_file, f.line) for f in (c.evidence if c else ())}
    out = ["<section><h2>Stacks</h2>"]
    for s in series:
        latest = s.latest
        out.append(f"<details {'open' if c and s.pid == c.pid else ''}><summary>pid {_e(s.pid)} — {len(latest.threads)} thread(s), "
                   f"{len(s.dumps)} round(s) <span class=muted>{_e(s.cmdline[:140])}</span></summary>")
        for t in latest.threads:
            fz = s.frozen(t.ident)
            badge = {True: "<span class='badge frozen'>frozen</span>", False: "<span class='badge changing'>changing</span>", None: "<span class='badge once'>one look</span>"}[fz]
            stalled = c is not None and s.pid == c.pid and t.ident == c.thread_ident
            lines = []
            for f in t.frames:
                cls = "ev" if stalled and (f.function, f.short_file, f.line) in evidence else ("native" if f.native else "")
                lines.append(f"<span class='frame {cls}'>{_frame(f)}</span>")
            out.append(f"<div class=thread><b>{_e(t.name or t.ident)}</b> <span class=muted>({_e(t.ident)})</span>{badge}"
                       f"{' <b class=fail>← stalled</b>' if stalled else ''}<pre>" + "\n".join(lines) + "</pre></div>")
        out.append("</details>")
    out.append("</section>")
    return "".join(out)


def _gpus(bundle: Bundle) -> str:
    """Each GPU's utilisation, memory, power draw and SM clock: "100 % at idle power" is a
    spinning wedge. Empty when the bundle has no GPU reading."""
    try:
        rows = readings(bundle.json("gpu/state.json"), bundle.samples())
    except Exception:  # noqa: BLE001 - a sent bundle's malformed GPU file costs only this section
        return ""
    if not rows:
        return ""

    def cell(value: Any, unit: str) -> str:
        return "—" if value is None else f"{_e(f'{float(value):.0f}')} {unit}" if isinstance(value, (int, float)) else _e(value)

    body = "".join(f"<tr><td>{_e(r.get('index'))}</td><td>{cell(r.get('util_pct'), '%')}</td><td>{cell(r.get('mem_used_mib'), 'MiB')}</td>"
                   f"<td>{cell(r.get('power_w'), 'W')}</td><td>{cell(r.get('sm_clock_mhz'), 'MHz')}</td></tr>" for r in rows)
    return (f"<section><h2>GPUs</h2><p class=muted>{_e(rows[0]['source'])}</p><table><tr><th>GPU</th><th>util</th>"
            f"<th>memory</th><th>power</th><th>SM clock</th></tr>{body}</table></section>")


def _capture(manifest: dict[str, Any], left_out: Sequence[str] = ()) -> str:
    failed = manifest.get("failed") or {}
    rows = [f"<tr><td class=ok>✓</td><td>{_e(n)}</td><td></td></tr>" for n in manifest.get("captured") or []]
    rows += [f"<tr><td class=fail>✗</td><td>{_e(n)}</td><td>{_e(m)}</td></tr>" for n, m in failed.items()]
    rows += [f"<tr><td class=fail>✗</td><td>{_e(n)}</td><td>not shown: more objects than a capture writes</td></tr>"
             for n in left_out]
    stacks = manifest.get("stacks") or {}
    rounds = "".join(f"<tr><td>round {_e(r.get('round'))}</td><td>{_e(r.get('ok'))}/{_e(r.get('processes'))} dumped</td>"
                     f"<td>{_e(r.get('duration_s'))} s</td></tr>" for r in stacks.get("rounds") or [] if isinstance(r, dict))
    # How each process's stacks came: py-spy, its own in-process dump, or none (and why).
    methods = "".join(f"<tr><td>pid {_e(m.get('pid'))}</td><td>{_e(m.get('method'))}</td><td>{_e(m.get('why') or '')}</td></tr>"
                      for m in (stacks.get("methods") or [])[:MAX_TREE_ROWS] if isinstance(m, dict))
    times = manifest.get("times") or {}
    return (f"<section><h2>Capture</h2><p>took {_e(times.get('capture_duration_s'))} s of a {_e(times.get('deadline_s'))} s budget; "
            f"py-spy: <code>{_e(stacks.get('pyspy'))}</code></p><table>{''.join(rows)}</table><table>{rounds}</table>"
            + (f"<p><b>Stacks by process</b></p><table>{methods}</table>" if methods else "") + "</section>")


def _versions(versions: dict[str, Any] | None) -> str:
    if not versions:
        return ""
    side = versions.get("trainer") or versions.get("supervisor") or {}
    cells = "".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in side.items() if v)
    driver = f"<tr><th>driver</th><td>{_e(versions.get('driver'))}</td></tr>" if versions.get("driver") else ""
    return f"<section><h2>Versions</h2><table>{cells}{driver}</table></section>"


#: the most of each log a report shows: the capture keeps tails of this size (``sysinfo.tail``); a
#: bundle someone sent may hold 32 MiB logs, and redacting a report of four of them took minutes
LOG_TAIL_BYTES = 256 * 1024


def _logs(bundle: Bundle) -> str:
    names = sorted(n for n in bundle.files if n.startswith("logs/"))
    if not names:
        return ""
    body = "".join(f"<details><summary>{_e(n[5:])}</summary><pre>{_e(_tail(bundle.files[n]))}</pre></details>"
                   for n in names)
    return f"<section><h2>Log tails</h2>{body}</section>"


def _tail(data: bytes) -> str:
    if len(data) <= LOG_TAIL_BYTES:
        return data.decode("utf-8", "replace")
    return f"[... {len(data) - LOG_TAIL_BYTES} bytes before this not shown ...]\n" + \
        data[-LOG_TAIL_BYTES:].decode("utf-8", "replace")
