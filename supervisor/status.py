"""``hangwatch status``: what a run did and where it stands, from its journal alone."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from supervisor.journal import read_journal


def summarise(path: Path) -> dict[str, Any]:
    records = read_journal(path)
    attempts: dict[int, dict[str, Any]] = {}
    incidents: list[dict[str, Any]] = []
    finished = None
    supervisor_pids: list[int] = []
    for r in records:
        event = r["event"]
        if event in ("run_started", "run_resumed"):
            supervisor_pids.append(int(r.get("pid", 0)))
        elif event == "attempt_started":
            attempts[r["attempt"]] = {
                "attempt": r["attempt"],
                "pid": r["pid"],
                "started": r["ts"],
                "cudagraphs": "off" if r["env"].get("HANGWATCH_CUDAGRAPHS") == "0" else "on",
                "enforce_eager": r["env"].get("HANGWATCH_ENFORCE_EAGER") == "1",
                "resume_from": r.get("resume_from"),
                "ended": None,
                "outcome": None,
            }
        elif event == "attempt_ended" and r["attempt"] in attempts:
            attempts[r["attempt"]].update(ended=r["ts"], outcome=r["kind"], exit_code=r.get("exit_code"),
                                          evidence=r.get("evidence_path"), reason=r.get("reason"))
        elif event == "incident":
            incidents.append({k: r.get(k) for k in ("attempt", "kind", "reason", "latency_s", "ts")})
        elif event == "run_finished":
            finished = {k: r.get(k) for k in ("outcome", "exit_code", "reason", "ts")}
    if finished is not None:
        state = f"finished: {finished['outcome']} (exit {finished['exit_code']})"
    elif supervisor_pids and _alive(supervisor_pids[-1]):
        current = max(attempts) if attempts else None
        state = f"running: attempt {current}, supervisor pid {supervisor_pids[-1]}"
    else:
        state = "supervisor gone without finishing: continue with hangwatch run --resume RUN_DIR"
    return {
        "run_dir": str(path.parent),
        "run_id": records[0]["run_id"] if records else None,
        "state": state,
        "attempts": [attempts[k] for k in sorted(attempts)],
        "restarts": max(0, len(attempts) - 1),
        "incidents": incidents,
        "finished": finished,
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


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
