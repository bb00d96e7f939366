"""``hangwatch report RUN_DIR``: goodput and time to recover from a journal."""

from __future__ import annotations

import json

import pytest

from hangwatch.cli import main as cli_main
from hangwatch.cli.goodput import goodput

pytestmark = pytest.mark.timeout(30)

T = 1_700_000_000.0


def _records() -> list[dict]:
    r = {"run_id": "abc"}
    return [
        {**r, "event": "run_started", "ts": T, "pid": 1},
        {**r, "event": "attempt_started", "ts": T + 1, "attempt": 1, "pid": 2},
        {**r, "event": "first_heartbeat", "ts": T + 11, "attempt": 1, "step": 1},  # 10 s start-up
        # working 11 -> 611; hung 611 -> 671 (detected); capture + kill until 701
        {**r, "event": "incident", "ts": T + 671, "attempt": 1, "kind": "stall", "onset_wall": T + 611,
         "latency_s": 60.0, "reason": "gpu_util=100%"},
        {**r, "event": "capture", "ts": T + 690, "attempt": 1, "evidence_path": None},
        {**r, "event": "attempt_ended", "ts": T + 701, "attempt": 1, "kind": "stall", "exit_code": -9},
        {**r, "event": "restart_scheduled", "ts": T + 701, "after_attempt": 1, "delay_s": 4.0},
        {**r, "event": "attempt_started", "ts": T + 705, "attempt": 2, "pid": 3},  # 4 s backoff
        {**r, "event": "first_heartbeat", "ts": T + 725, "attempt": 2, "step": 50},  # 20 s start-up
        {**r, "event": "attempt_ended", "ts": T + 1725, "attempt": 2, "kind": "done", "exit_code": 0},
        {**r, "event": "run_finished", "ts": T + 1726, "outcome": "success", "exit_code": 0, "reason": "ok"},
    ]


def test_goodput_splits_the_run_into_progress_and_what_was_lost():
    g = goodput(_records())
    assert g["wall_s"] == 1726
    assert g["productive_s"] == 600 + 1000
    assert (g["startup_s"], g["hung_s"], g["recovery_s"], g["backoff_s"]) == (30, 60, 30, 6)
    assert g["productive_s"] + g["startup_s"] + g["hung_s"] + g["recovery_s"] + g["backoff_s"] == g["wall_s"]
    assert g["goodput"] == pytest.approx(1600 / 1726, abs=1e-4)
    assert [(i["attempt"], i["kind"], i["time_to_recover_s"]) for i in g["incidents"]] == [(1, "stall", 114.0)]


def test_an_engine_level_recovery_is_lost_time_inside_the_attempt_not_its_end():
    """Level 1: the trainer lived on. Before, the journal's repeated first_heartbeat and the
    single incident slot made a clean run read 0 % goodput."""
    r = {"run_id": "abc"}
    records = [
        {**r, "event": "run_started", "ts": T, "pid": 1},
        {**r, "event": "attempt_started", "ts": T + 1, "attempt": 1, "pid": 2},
        {**r, "event": "first_heartbeat", "ts": T + 11, "attempt": 1, "step": 1},
        {**r, "event": "incident", "ts": T + 641, "attempt": 1, "kind": "stall", "onset_wall": T + 611,
         "latency_s": 30.0, "reason": "engine made no step"},
        {**r, "event": "capture", "ts": T + 643, "attempt": 1, "evidence_path": None},
        {**r, "event": "recovery", "ts": T + 643, "attempt": 1, "level": 1, "scope": "engine", "reason": "x"},
        {**r, "event": "engine_restart", "ts": T + 643, "attempt": 1, "ok": True},
        {**r, "event": "engine_recovered", "ts": T + 651, "attempt": 1, "step": 18},
        {**r, "event": "attempt_ended", "ts": T + 1651, "attempt": 1, "kind": "done", "exit_code": 0},
        {**r, "event": "run_finished", "ts": T + 1652, "outcome": "success", "exit_code": 0, "reason": "ok"},
    ]
    g = goodput(records)
    assert (g["startup_s"], g["hung_s"], g["recovery_s"]) == (10, 30, 10)
    assert g["productive_s"] == 1640 - 40
    assert [(i["attempt"], i["level"], i["time_to_recover_s"]) for i in g["incidents"]] == [(1, 1, 40.0)]


def test_an_engine_restart_whose_retry_wedged_again_is_listed_and_lost():
    """Level 1, the retried batch wedges again, level 2: both incidents listed, nothing between
    the first onset and the end of the attempt counted as progress."""
    r = {"run_id": "abc"}
    records = [
        {**r, "event": "run_started", "ts": T, "pid": 1},
        {**r, "event": "attempt_started", "ts": T + 1, "attempt": 1, "pid": 2},
        {**r, "event": "first_heartbeat", "ts": T + 11, "attempt": 1, "step": 1},
        {**r, "event": "incident", "ts": T + 641, "attempt": 1, "kind": "stall", "onset_wall": T + 611},
        {**r, "event": "engine_restart", "ts": T + 643, "attempt": 1, "ok": True},
        {**r, "event": "incident", "ts": T + 680, "attempt": 1, "kind": "stall", "onset_wall": T + 650},
        {**r, "event": "attempt_ended", "ts": T + 690, "attempt": 1, "kind": "stall", "exit_code": -9},
        {**r, "event": "attempt_started", "ts": T + 691, "attempt": 2, "pid": 3},
        {**r, "event": "first_heartbeat", "ts": T + 701, "attempt": 2, "step": 15},
        {**r, "event": "attempt_ended", "ts": T + 1701, "attempt": 2, "kind": "done", "exit_code": 0},
        {**r, "event": "run_finished", "ts": T + 1701, "outcome": "success", "exit_code": 0, "reason": "ok"},
    ]
    g = goodput(records)
    assert [(i["attempt"], i.get("level"), i["time_to_recover_s"]) for i in g["incidents"]] == [
        (1, 1, None), (1, None, 701 - 650)]
    assert g["productive_s"] == 600 + 1000
    assert g["productive_s"] + g["startup_s"] + g["hung_s"] + g["recovery_s"] + g["backoff_s"] == g["wall_s"]


def test_a_lost_attempt_is_not_counted_as_progress():
    records = _records()[:3] + [
        {"run_id": "abc", "event": "run_resumed", "ts": T + 5000, "pid": 9},
        {"run_id": "abc", "event": "attempt_ended", "ts": T + 5001, "attempt": 1, "kind": "supervisor_lost"},
        {"run_id": "abc", "event": "run_finished", "ts": T + 5002, "outcome": "success", "exit_code": 0},
    ]
    g = goodput(records)
    assert g["productive_s"] == 0 and g["recovery_s"] == 4990


def test_report_command_writes_the_run_page(tmp_path, capsys):
    (tmp_path / "journal.jsonl").write_text("".join(json.dumps(r) + "\n" for r in _records()))
    assert cli_main.main(["report", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{tmp_path / 'report.html'}  (goodput 92.7 %: 1600 s of 1726 s; 1 incident(s), 2 attempt(s))")
    page = (tmp_path / "report.html").read_text()
    assert "Goodput 92.7 %" in page and "gpu_util=100%" in page and "114 s" in page
    assert cli_main.main(["report", str(tmp_path), "-o", str(tmp_path)]) == 2
    assert "is a directory" in capsys.readouterr().err


def test_an_attempt_without_a_heartbeat_reads_none_not_nan(tmp_path, capsys):
    """An attempt that wedged before its first beat: 'to first heartbeat' read 'nan s'."""
    records = [r for r in _records() if not (r["event"] == "first_heartbeat" and r["attempt"] == 1)]
    (tmp_path / "journal.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    assert cli_main.main(["report", str(tmp_path)]) == 0
    page = (tmp_path / "report.html").read_text()
    assert "nan" not in page and "<td>none</td>" in page and "<td>20.0 s</td>" in page
