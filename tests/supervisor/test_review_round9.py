"""Review round 9: today's non-replay changes, probed in process."""

from __future__ import annotations

import pytest

from hangwatch.supervisor.notify import _held, render

pytestmark = pytest.mark.timeout(30)


def test_an_alerts_own_paths_are_not_redacted_as_text_but_the_trainers_text_is():
    """Each field of an alert is redacted now; the run's paths too, as text: a run under a folder
    named like a key (``sk-2026-experiments``) reached a --notify-command as ``/data/[REDACTED]/...``
    in ``run_dir``, ``bundle`` and ``report``, so a hook that copies the bundle found nothing."""
    run_dir = "/data/sk-2026-experiments/run1"
    token = "hf_abcdefghijklmnopqrstuvwxyzABCDEF12"
    payload = {"event": "incident", "host": "node1", "run_dir": run_dir, "run_id": "c838d032d17e", "attempt": 1,
               "kind": "stall", "reason": "no progress", "phase": f"download {token}", "action": "restarting",
               "bundle": f"{run_dir}/attempt-1/incident-1", "report": f"{run_dir}/attempt-1/incident-1/report.html"}
    event = _held(payload)
    for key in ("run_dir", "bundle", "report", "run_id", "host"):
        assert event[key] == payload[key], key
    assert token not in event["phase"]
    title, body = render(payload)
    assert payload["report"] in body and token not in body
