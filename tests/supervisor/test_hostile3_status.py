"""``hangwatch status`` (text, ``--follow``, ``--json``) and ``report RUN_DIR`` over what the
trainer's user named, or a journal line nobody should have written."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FORGED = "      9  2026-01-01 00:00:00  done             exit 0 (forged)"

TRAINER = r"""
import os, sys
ckpt = sys.argv[1]
if os.environ["HANGWATCH_ATTEMPT"] == "1":
    folder = os.path.join(ckpt, "checkpoint-5\n" + sys.argv[2])
    os.makedirs(folder)
    with open(os.path.join(folder, "trainer_state.json"), "w") as f:
        f.write("{}")
    sys.exit(1)
"""


def _hangwatch(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "hangwatch.cli", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)


@pytest.mark.timeout(120)
def test_a_checkpoint_name_never_forges_a_line_in_status(tmp_path):
    """The trainer's user names the checkpoint folder; ``resuming from`` is in the journal, and
    ``status`` and ``status --follow`` printed its newline as it was: a forged attempt row."""
    run, ckpt = tmp_path / "run", tmp_path / "ckpt"
    ckpt.mkdir()
    done = _hangwatch("run", "--run-dir", str(run), "--gpu-probe", "none", "--quiet", "--checkpoint-dir", str(ckpt),
                      "--backoff", "0.1", "--backoff-max", "0.1", "--interval", "0.2", "--",
                      sys.executable, "-c", TRAINER, str(ckpt), FORGED, timeout=100)
    assert done.returncode == 0, done.stderr[-3000:]
    journal = [json.loads(line) for line in (run / "journal.jsonl").read_text().splitlines()]
    assert any("\n" in str(r.get("resume_from") or "") for r in journal)  # the name reached the journal as it was
    for args in ((), ("--follow",)):
        shown = _hangwatch("status", str(run), *args)
        assert shown.returncode == 0, shown.stderr[-2000:]
        assert FORGED not in shown.stdout.splitlines(), shown.stdout
        assert "checkpoint-5\\n" + FORGED in shown.stdout, shown.stdout  # shown, escaped
    as_json = _hangwatch("status", str(run), "--json")
    assert as_json.returncode == 0 and FORGED in json.loads(as_json.stdout)["attempts"][1]["resume_from"]


@pytest.mark.timeout(60)
def test_a_journal_record_with_a_null_time_is_skipped_not_a_traceback(tmp_path):
    """``"ts": null`` passed the journal's checks (a null number counts as absent) and every
    fold then failed on ``float(None)``: ``status``, ``status --json`` and ``report RUN_DIR``
    were internal errors."""
    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    records = [
        {"event": "run_started", "ts": 1700000000.0, "run_id": "r", "pid": 999999999 % (1 << 22), "command": ["x"]},
        {"event": "attempt_started", "ts": None, "run_id": "r", "attempt": 1, "pid": 5, "env": {}},
        {"event": "attempt_ended", "ts": 1700000005.0, "run_id": "r", "attempt": 1, "kind": "crash", "exit_code": 1},
        {"event": "run_finished", "ts": 1700000006.0, "run_id": "r", "outcome": "gave_up", "exit_code": 71},
    ]
    journal = run / "journal.jsonl"
    journal.write_text("".join(json.dumps(r) + "\n" for r in records))
    journal.chmod(0o600)
    for args in (("status", str(run)), ("status", str(run), "--json"), ("status", str(run), "--follow"),
                 ("report", str(run), "-o", str(tmp_path / "report.html"))):
        done = _hangwatch(*args)
        assert done.returncode == 0, (args, done.returncode, done.stderr[-2000:])
        assert "Traceback" not in done.stderr and "internal error" not in done.stderr, done.stderr


@pytest.mark.timeout(60)
def test_a_deeply_nested_journal_field_is_shown_bounded(tmp_path):
    """A field nested hundreds of levels deep (which the journal reader accepts) must not
    exhaust the recursion of what escapes every string for the console."""
    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    deep = "[" * 500 + "]" * 500
    journal = run / "journal.jsonl"
    journal.write_text(
        '{"event":"run_started","ts":1700000000,"run_id":"r","pid":5,"command":["x"]}\n'
        '{"event":"attempt_started","ts":1700000001,"run_id":"r","attempt":1,"pid":6,"env":{}}\n'
        '{"event":"incident","ts":1700000002,"run_id":"r","attempt":1,"kind":"stall","reason":{"a":' + deep + '}}\n'
        '{"event":"run_finished","ts":1700000004,"run_id":"r","outcome":"gave_up","exit_code":71}\n')
    journal.chmod(0o600)
    for args in (("status", str(run)), ("status", str(run), "--follow")):
        done = _hangwatch(*args)
        assert done.returncode == 0, (args, done.returncode, done.stderr[-2000:])
        assert "nested too deep" in done.stdout, done.stdout
