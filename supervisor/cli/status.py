"""``hangwatch status``: what a run did and where it stands, from its journal alone."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from hangwatch.contract import env
from hangwatch.contract.journal import fold_journal, read_journal
from hangwatch.contract.procid import pid_exists


def summarise(path: Path) -> dict[str, Any]:
    records = read_journal(path)
    run = fold_journal(records)
    attempts = [
        {
            "attempt": a.attempt,
            "pid": a.pid,
            "started": a.started,
            "cudagraphs": "off" if a.env.get(env.CUDAGRAPHS) == "0" else "on",
            "enforce_eager": a.env.get(env.ENFORCE_EAGER) == "1",
            "resume_from": a.resume_from,
            "ended": a.ended,
            "outcome": a.outcome,
            **({"exit_code": a.exit_code, "evidence": a.evidence, "reason": a.reason} if a.ended is not None else {}),
        }
        for a in sorted(run.attempts, key=lambda a: a.attempt)
    ]
    pids = run.supervisor_pids
    if run.finished is not None:
        state = f"finished: {run.finished['outcome']} (exit {run.finished['exit_code']})"
    elif pids and pid_exists(pids[-1]):
        current = attempts[-1]["attempt"] if attempts else None
        state = f"running: attempt {current}, supervisor pid {pids[-1]}"
    else:
        state = "supervisor gone without finishing: continue with hangwatch run --resume RUN_DIR"
    return {
        "run_dir": str(path.parent),
        "run_id": run.run_id,
        "state": state,
        "attempts": attempts,
        "restarts": max(0, len(attempts) - 1),
        "incidents": run.incidents,
        "finished": run.finished,
    }


def render_status(summary: dict[str, Any]) -> str:
    lines = [
        f"run     {summary['run_dir']} ({summary['run_id']})",
        f"state   {summary['state']}",
        f"restarts {summary['restarts']}, incidents {len(summary['incidents'])}",
        "",
        "attempt  started              outcome       graphs  resumed from",
    ]
    for a in summary["attempts"]:
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(a["started"]))
        graphs = a["cudagraphs"] + ("+eager" if a["enforce_eager"] else "")
        lines.append(
            f"{a['attempt']:>7}  {started}  {str(a['outcome'] or 'running'):<12}  {graphs:<6}  {a['resume_from'] or '-'}"
        )
    for i in summary["incidents"]:
        lines.append(f"incident: attempt {i['attempt']} {i['kind']}: {i['reason']} (latency {i['latency_s']} s)")
    if summary["finished"] and summary["finished"].get("reason"):
        lines.append(f"finished: {summary['finished']['reason']}")
    return "\n".join(lines)
