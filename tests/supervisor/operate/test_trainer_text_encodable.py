"""Text the trainer's user chooses, on its way to UTF-8 writers.

JSON lets a heartbeat name a lone surrogate (``"\\udcff"``), which no UTF-8 writer accepts:
with a real run (a trainer beating ``phase="gen\\udcff"``), the metrics exporter failed at every
tick (its textfile frozen), the incident alert failed on apprise's form:// and xml:// targets,
and the supervisor ended with an internal error, exit 70 instead of its outcome's 71. And a
phase with a newline forged lines of the alert.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from hangwatch.contract.heartbeat import read_heartbeat
from hangwatch.supervisor.operate.notify import render

pytestmark = pytest.mark.timeout(60)


def _beat(tmp_path: Path) -> Path:
    path = tmp_path / "heartbeat.json"
    path.write_text('{"pid": 42, "seq": 3, "ts": 1.5, "step": 7, "phase": "gen\\udcff\\ud800x",'
                    ' "info": {"k\\udcff": ["v\\udfff", {"deep": "\\udcfe"}], "n": 1}}')
    return path


def test_every_string_of_a_beat_is_utf8_encodable(tmp_path):
    hb = read_heartbeat(_beat(tmp_path))
    assert hb is not None and hb.step == 7
    assert hb.phase == "gen\\udcff\\ud800x"
    json.dumps(hb.to_json(), ensure_ascii=False).encode("utf-8")
    assert hb.info == {"k\\udcff": ["v\\udfff", {"deep": "\\udcfe"}], "n": 1}


def test_the_metrics_exporter_takes_a_beat_with_a_lone_surrogate(tmp_path):
    from prometheus_client import generate_latest

    from hangwatch.supervisor.decide.detector import DetectorConfig
    from hangwatch.supervisor.operate.livestatus import LiveStatus
    from hangwatch.supervisor.operate.metrics import MetricsExporter

    status = LiveStatus(Path(os.devnull), detector=DetectorConfig(), gpu_probe="none")
    exporter = MetricsExporter(status)
    status.state["heartbeat"] = read_heartbeat(_beat(tmp_path)).to_json()
    exporter.tick(None)
    assert 'hangwatch_heartbeat_phase{phase="gen\\\\udcff\\\\ud800x"} 1.0' in generate_latest(exporter.registry).decode()


def test_an_alert_is_encodable_and_no_field_forges_a_line():
    payload = {"event": "incident", "host": "node1", "run_dir": "/runs/r\udcff", "run_id": "abc", "attempt": 2,
               "kind": "silent_hang", "reason": "no progress", "step": 9, "bundle": "/runs/b",
               "phase": "gen\udcff\nreport: /tmp/evil.html\x1b[2J", "action": "restarting"}
    title, body = render(payload)
    (title + body).encode("utf-8")
    lines = body.split("\n")
    assert len(lines) == 5 and [line.split(":")[0] for line in lines] == ["what", "where", "signature", "done", "report"]
    assert "\x1b" not in body and "phase gen\\udcff\\nreport: /tmp/evil.html\\x1b[2J" in lines[1]
    for event in ("gave_up", "run_finished"):
        title, body = render({**payload, "event": event, "reason": "stopped\nforged: line\udcff"})
        (title + body).encode("utf-8")
        assert "forged" not in [line.split(":")[0] for line in body.split("\n")]


def test_a_secret_in_the_trainers_phase_never_leaves_in_an_alert():
    from hangwatch.supervisor.operate.notify import _held

    token = "hf_abcdefghijklmnopqrstuvwxyzABCDEF12"
    payload = {"event": "incident", "host": "node1", "run_dir": "/runs/r", "run_id": "c838d032d17e", "attempt": 1,
               "kind": "stall", "reason": "no progress", "phase": f"download https://u:hunter2pass@hub/x {token}",
               "action": "restarting"}
    title, body = render(payload)
    assert token not in body and "hunter2pass" not in body and "phase download https://u:[REDACTED]@hub/x" in body
    event = _held(payload)
    assert token not in event["phase"] and "hunter2pass" not in event["phase"] and event["run_id"] == "c838d032d17e"
