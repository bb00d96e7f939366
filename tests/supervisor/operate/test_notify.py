"""The notifier's story and policy, with fake targets and recorded sleeps (no network)."""

from __future__ import annotations

import pytest

from hangwatch.supervisor.operate.notify import DeliveryError, Notifier, redact_url, render
from hangwatch.supervisor.operate.notify import _held

pytestmark = pytest.mark.timeout(30)


@pytest.mark.parametrize(
    "url, shown",
    [
        ("slack://T1AAAA/B2BBBB/abcdefSECRET", "slack://[REDACTED]"),
        ("json://user:hunter2@hooks.example.com:8443/path/SECRET", "json://hooks.example.com:8443/[REDACTED]"),
        ("ntfy://my-private-topic", "ntfy://[REDACTED]"),
        ("discord://1234/SECRETTOKEN", "discord://[REDACTED]"),
        ("json://localhost:9000/hook?token=SECRET", "json://localhost:9000/[REDACTED]"),
        ("not a url", "[REDACTED]"),
    ],
)
def test_notify_urls_are_redacted_to_scheme_and_host(url, shown):
    assert redact_url(url) == shown


class Recorder:
    def __init__(self, name: str = "fake://x", fail: int = 0) -> None:
        self.name = name
        self.fail = fail
        self.sent: list[tuple[dict, str, str]] = []

    def send(self, payload, title, body, timeout):
        if self.fail:
            self.fail -= 1
            raise DeliveryError(f"{self.name}: refused")
        self.sent.append((dict(payload), title, body))


def _story(n: Notifier) -> None:
    r = {"run_id": "abc"}
    n.record({**r, "event": "incident", "attempt": 1, "kind": "stall", "reason": "gpu_util=100% cpu=0.0%",
              "evidence": {"step": 40}, "phase": "generate"})
    n.record({**r, "event": "capture", "attempt": 1, "evidence_path": "/run/incidents/b"})
    n.record({**r, "event": "kill", "attempt": 1, "pids": [1, 2, 3], "survivors": []})
    n.record({**r, "event": "attempt_ended", "attempt": 1, "kind": "stall"})
    n.record({**r, "event": "restart_scheduled", "after_attempt": 1, "delay_s": 0.0, "cudagraphs": "off"})
    n.record({**r, "event": "run_finished", "outcome": "success", "exit_code": 0, "reason": "trainer exited 0",
              "attempts": 2})


def test_one_incident_message_after_the_action_then_the_end():
    target = Recorder()
    describe = lambda path: {"bundle": path, "report": f"{path}/report.html", "signature": "vllm-cudagraph-replay",
                             "title": "CUDA graph replay wedge"}
    n = Notifier([target], run_dir="/run", host="node7", describe=describe)
    _story(n)
    assert n.close(10)
    assert [p["event"] for p, _, _ in target.sent] == ["incident", "run_finished"]
    payload, title, body = target.sent[0]
    assert title == "hangwatch: stall in attempt 1 on node7"
    assert payload["action"] == "killed 3 process(es); restarting as attempt 2 in 0 s with cuda graphs off"
    assert "where: node7:/run (run abc, attempt 1, step 40, phase generate)" in body
    assert "signature: vllm-cudagraph-replay (CUDA graph replay wedge)" in body
    assert "report: /run/incidents/b/report.html" in body
    assert target.sent[1][1] == "hangwatch: run finished on node7"


def test_each_engine_level_incident_is_alerted_when_the_engine_is_restarted():
    """Level 1 schedules no restart: each incident was held back, overwritten by the next, and
    only the last one went out, at the run's end."""
    target = Recorder()
    n = Notifier([target], run_dir="/run", host="h", describe=lambda p: {})
    r = {"run_id": "abc"}
    for k in (1, 2):
        n.record({**r, "event": "incident", "attempt": 1, "kind": "stall", "reason": f"engine wedge {k}",
                  "evidence": {"step": 10 * k}, "phase": "generate"})
        n.record({**r, "event": "capture", "attempt": 1, "evidence_path": f"/run/incidents/{k}"})
        n.record({**r, "event": "recovery", "attempt": 1, "level": 1, "scope": "engine"})
        n.record({**r, "event": "kill", "attempt": 1, "pids": [7 + k], "survivors": [], "scope": "engine"})
        n.record({**r, "event": "engine_restart", "attempt": 1, "ok": True, "cudagraphs": "off"})
    n.record({**r, "event": "run_finished", "outcome": "success", "exit_code": 0, "reason": "trainer exited 0",
              "attempts": 1})
    assert n.close(10)
    sent = [p for p, _, _ in target.sent]
    assert [p["event"] for p in sent] == ["incident", "incident", "run_finished"]
    assert [p["reason"] for p in sent[:2]] == ["engine wedge 1", "engine wedge 2"]
    assert sent[0]["action"] == ("killed 1 process(es); restarted only the rollout engine's worker (cuda graphs off); "
                                 "the trainer lives on and retries the batch")


def test_retries_with_backoff_then_journals_the_failure():
    sleeps: list[float] = []
    journaled: list[tuple[str, dict]] = []
    bad, good = Recorder("bad://[REDACTED]", fail=99), Recorder(fail=2)
    n = Notifier([bad, good], run_dir="/run", host="h", describe=lambda p: {}, sleep=sleeps.append,
                 journal_append=lambda event, **f: journaled.append((event, f)))
    n.record({"event": "run_finished", "outcome": "gave_up", "exit_code": 71, "reason": "budget", "attempts": 3})
    assert n.close(10)
    assert sleeps == [0.5, 1.0, 0.5, 1.0], "two growing waits per target"
    assert [e for e, _ in journaled] == ["notify_failed"]
    assert journaled[0][1]["target"] == "bad://[REDACTED]" and journaled[0][1]["tries"] == 3
    assert journaled[0][1]["notification"] == "gave_up"
    assert [p["event"] for p, _, _ in good.sent] == ["gave_up"], "the second target still got it, on its third try"


def test_gave_up_message_says_why_and_where_to_look():
    title, body = render({"event": "gave_up", "host": "h", "run_dir": "/r", "run_id": "x", "outcome": "gave_up",
                          "exit_code": 72, "reason": "no checkpoint progress", "attempts": 4, "incidents": 3})
    assert title == "hangwatch: run stopped (gave_up, exit 72) on h"
    assert "what: gave_up: no checkpoint progress" in body and "details: hangwatch status /r" in body


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
