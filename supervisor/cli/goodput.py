"""Goodput: the share of a run's wall time the trainer was making progress, from its journal.

An attempt's progress runs from its first heartbeat (or its launch, for a trainer that
never beats) to its end, or to the onset of its hang (the last progress); everything
else is lost, split into start-up (launch to first heartbeat), hung (onset to
detection), recovery (detection to the attempt's end: capture, kill, GPU release) and
backoff (between attempts). Work redone since the last checkpoint is not counted.
Time to recover, per incident: onset to the next attempt's first heartbeat.
An incident observed only (``--on-hang observe``) says what would have been done and what
happened after it: recovered by itself after N s, the trainer exited, or still hung at the end.

``goodput`` is pure (records in, numbers out); ``hangwatch.cli.run_page`` shows it.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

from hangwatch.cli.run_summary import bundle_info, locate_bundle


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
    incident bundles are looked for where they are now (``run_summary.locate_bundle``)."""
    records = _timed(records)
    start = next((float(r["ts"]) for r in records if r.get("event") in ("run_started", "run_resumed")), None)
    finish = next((float(r["ts"]) for r in records if r.get("event") == "run_finished"), None)
    end = finish if finish is not None else (time.time() if now is None else now)
    attempts, order = _attempt_timelines(records)
    totals = {"productive": 0.0, "startup": 0.0, "hung": 0.0, "recovery": 0.0, "backoff": 0.0}
    incidents: list[dict[str, Any]] = []
    previous_end = start
    for i, n in enumerate(order):
        a = attempts[n]
        if previous_end is not None:
            totals["backoff"] += max(0.0, a["started"] - previous_end)
        following = attempts[order[i + 1]] if i + 1 < len(order) else None
        previous_end = _account_attempt(a, following, end, totals, incidents, run_dir)
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


def _attempt_timelines(records: Sequence[Mapping[str, Any]]) -> tuple[dict[int, dict[str, Any]], list[int]]:
    """Each attempt's times (launch, first beat, onset, detection, end) and engine-level incidents, in order."""
    attempts: dict[int, dict[str, Any]] = {}
    order: list[int] = []
    for r in records:
        event, n = r.get("event"), r.get("attempt")
        if event == "attempt_started":
            attempts[int(n)] = {"attempt": int(n), "started": float(r["ts"]), "first_beat": None, "onset": None,
                                "detected": None, "ended": None, "kind": None, "exit_code": None,
                                "evidence": None, "engine_level": []}
            order.append(int(n))
        elif n is not None and int(n) in attempts:
            _note_event(attempts[int(n)], event, r)
    return attempts, order


def _note_event(a: dict[str, Any], event: Any, r: Mapping[str, Any]) -> None:
    """One journal record of an attempt, folded into its timeline."""
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
        a["incident"] = {"kind": r.get("kind"), "reason": r.get("reason"), "latency_s": r.get("latency_s"),
                         **({"observed": True} if r.get("observe_only") else {})}
    elif event == "would_act" and a["onset"] is not None:
        kill = len(r.get("would_kill") or [])
        a["incident"]["would_act"] = (f"{'restarted the rollout engine' if r.get('level') == 1 else 'restarted the job'} "
                                      f"(killing {kill} process(es), cuda graphs {r.get('cudagraphs')})")
    elif event == "recovered_by_itself" and a["onset"] is not None:
        # Observe-only: the hang ended inside the attempt, nothing done; lost time, then progress again.
        took = _seconds(r.get("after_s"))
        recovered = (a["detected"] or a["onset"]) + took if took is not None else float(r["ts"])
        a["engine_level"].append({**{k: a[k] for k in ("onset", "detected", "evidence")},
                                  "incident": {**a["incident"], "after": f"recovered by itself after "
                                                                          f"{took if took is not None else '?'} s"},
                                  "recovered": recovered})
        a["onset"] = a["detected"] = a["evidence"] = None
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


def _account_attempt(a: dict[str, Any], following: dict[str, Any] | None, end: float, totals: dict[str, float],
                     incidents: list[dict[str, Any]], run_dir: Path | None) -> float:
    """Add one attempt's time to ``totals`` and its incidents to ``incidents``; returns its end."""
    n = a["attempt"]
    a_end = a["ended"] if a["ended"] is not None else end
    working_from = a["first_beat"] if a["first_beat"] is not None else a["started"]
    totals["startup"] += max(0.0, min(working_from, a_end) - a["started"])
    if a["kind"] == "supervisor_lost":
        # Its end was written by --resume, long after the trainer died with its supervisor.
        totals["recovery"] += max(0.0, a_end - working_from)
        return a_end
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
                          "report": info["report"], "level": None if e["incident"].get("observed") else 1,
                          "time_to_recover_s": None if e.get("unrecovered") else round(e["recovered"] - e["onset"], 1)})
    totals["productive"] += max(0.0, stop - working_from - lost_inside)
    if a["onset"] is not None:
        detected = a["detected"] or a_end
        totals["hung"] += max(0.0, detected - max(a["onset"], working_from))
        totals["recovery"] += max(0.0, a_end - detected)
        recovered = following["first_beat"] if following is not None else None
        info = _bundle(run_dir, a["evidence"])
        if a["incident"].get("observed"):
            a["incident"]["after"] = _after_observed(a)
        incidents.append({"attempt": n, **a["incident"], "signature": info["signature"],
                          "report": info["report"],
                          "time_to_recover_s": round(recovered - a["onset"], 1) if recovered else None})
    return a_end


def _after_observed(a: Mapping[str, Any]) -> str:
    """What became of an incident observed only that did not end by itself."""
    if a["ended"] is None or a["kind"] in ("stopped", "supervisor_lost"):
        return "still hung when the run ended" if a["ended"] is not None else "still hung"
    return f"the trainer exited ({a['kind']}) {a['ended'] - (a['detected'] or a['ended']):.0f} s after the verdict"


def _bundle(run_dir: Path | None, path: Any) -> dict[str, Any]:
    """bundle_summary, where the bundle is now; ``report`` falls back to the bundle, None if it is gone."""
    gone = False
    if run_dir is not None:
        path, gone = locate_bundle(run_dir, path)
    info = bundle_info(path)
    return {**info, "report": None if gone else info["report"] or info["bundle"]}
