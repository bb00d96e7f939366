"""`hangwatch status` over what the trainer's user named or wrote, what a page never reached, a run
dir of FIFOs and links; and its text rendering.

`hangwatch status` prints text the trainer chose (phases, reasons, paths): never raw escapes."""

from __future__ import annotations

import os

import pytest

from hangwatch.cli.main import main
from hangwatch.contract.journal import Journal
import json
import subprocess
import sys
from pathlib import Path
from hangwatch.cli.run_summary import describe_exit, render_status

pytestmark = pytest.mark.timeout(30)

EVIL = "\x1b]0;owned\x07\x1b[2J"


def test_status_escapes_control_characters(tmp_path, capsys):
    run_dir = tmp_path / "run"
    run_dir.mkdir(mode=0o700)
    os.chmod(run_dir, 0o700)
    j = Journal(run_dir / "journal.jsonl", "r1")
    j.append("run_started", pid=999999, command=["x"])
    j.append("attempt_started", attempt=1, pid=1, env={"HANGWATCH_CUDAGRAPHS": "1"}, resume_from=None)
    j.append("incident", attempt=1, kind="stall", reason=f"phase {EVIL}", latency_s=1.0)
    j.append("attempt_ended", attempt=1, kind="stall", exit_code=-9, reason=EVIL)
    j.append("run_finished", outcome="gave_up", exit_code=71, reason=EVIL)
    assert main(["status", str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out
    assert "\\x1b]0;owned\\x07" in out


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


@pytest.mark.slow
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


@pytest.mark.slow
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


@pytest.mark.slow
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


def _hangwatch_in(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hangwatch.cli", *args], cwd=cwd, capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=80)


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_status_says_which_alerts_were_not_delivered(tmp_path):
    """Failed alerts were journaled (notify_failed) but `hangwatch status` said nothing of them:
    the run's last alert could be lost and status showed a clean finish."""
    run_dir = tmp_path / "run"
    done = _hangwatch_in(["run", "--run-dir", str(run_dir), "--gpu-probe", "none", "--quiet", "--interval", "0.2",
                       "--notify-command",
                       "echo receiver down >&2; exit 3", "--", sys.executable, "-c", "pass"], tmp_path)
    assert done.returncode == 0, done.stderr
    shown = _hangwatch_in(["status", str(run_dir)], tmp_path)
    assert shown.returncode == 0, shown.stderr
    line = next((x for x in shown.stdout.splitlines() if x.startswith("alerts:")), "")
    assert "1 not delivered" in line and "did NOT reach command" in line and "receiver down" in line, shown.stdout
    data = json.loads(_hangwatch_in(["status", "--json", str(run_dir)], tmp_path).stdout)
    assert data["alerts_failed"]["count"] == 1 and data["alerts_failed"]["last"]["notification"] == "run_finished"


@pytest.mark.timeout(90)
def test_a_crash_loop_of_hundreds_of_attempts_reads_in_a_few_lines(tmp_path):
    """400 alike attempts were 400 identical table lines between the run's state and its
    incidents; a run of alike attempts is now its first row, a count and its last row."""
    from hangwatch.cli.run_summary import render_status, summarise

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    records = [{"event": "run_started", "ts": 1000.0, "pid": 4242, "run_dir": str(run_dir)}]
    for n in range(1, 301):
        ts = 1000.0 + n
        records += [{"event": "attempt_started", "ts": ts, "attempt": n, "pid": 5000 + n, "create_time": ts,
                     "env": {"HANGWATCH_CUDAGRAPHS": "1"}},
                    {"event": "attempt_ended", "ts": ts + 0.1, "attempt": n, "kind": "crash", "exit_code": 3,
                     "signal": None, "reason": "trainer exited with code 3", "duration_s": 0.1}]
        if n == 150:  # one different attempt in the middle stays its own row
            records[-1].update(exit_code=-9, kind="silent_hang")
    records.append({"event": "run_finished", "ts": 1400.0, "outcome": "gave_up", "exit_code": 71,
                    "reason": "restart budget exhausted", "attempts": 300})
    (run_dir / "journal.jsonl").write_text("".join(json.dumps({"run_id": "r", **r}) + "\n" for r in records))
    text = render_status(summarise(run_dir / "journal.jsonl"))
    rows = [line for line in text.splitlines() if line[:7].strip().isdigit() or "more alike" in line]
    assert len(rows) == 7, text  # 1 ... 149, 150, 151 ... 300
    assert "147 more alike" in text and "148 more alike" in text
    assert "finished: restart budget exhausted" in text


def test_status_render_names_exit_signal_and_report():
    summary = {
        "run_dir": "/r", "run_id": "x", "state": "running: attempt 2, supervisor pid 5", "restarts": 1,
        "live": {"phase": "watching", "attempt": 2, "heartbeat_seen": True, "updated": 100.0,
                 "heartbeat": {"step": 40, "phase": "generate", "ts": 95.0}, "links": {"metrics": "http://h:1/metrics"}},
        "attempts": [{"attempt": 1, "started": 0, "cudagraphs": "on", "enforce_eager": False, "resume_from": None,
                      "outcome": "stall", "exit": describe_exit(-9)}],
        "incidents": [{"attempt": 1, "kind": "stall", "reason": "gpu_util=100%", "latency_s": 60.0,
                       "signature": "vllm-cudagraph-replay", "signature_title": "CUDA graph replay",
                       "report": "/r/incidents/b/report.html"}],
        "finished": None,
    }
    text = render_status(summary, now=100.0)
    assert "heartbeat step 40, phase generate, 5 s ago" in text
    assert "killed by SIGKILL (-9)" in text
    assert "signature vllm-cudagraph-replay (CUDA graph replay); report /r/incidents/b/report.html" in text
    assert "metrics  http://h:1/metrics" in text
    assert describe_exit(3) == "exit 3" and describe_exit(None, "supervisor_lost") == "unknown (supervisor lost)"


def test_status_of_a_run_dir_whose_not_started_record_is_a_fifo_answers(tmp_path):
    """status reads run dirs other users may write: a FIFO named like the record of a run that
    stopped before it began hung it (a plain open() of a FIFO waits for a writer)."""
    import os
    import subprocess
    import sys

    run_dir = tmp_path / "run"
    run_dir.mkdir(mode=0o700)
    (run_dir / "settings.json").write_text("{}")
    os.mkfifo(run_dir / "not_started.json", 0o600)
    done = subprocess.run([sys.executable, "-m", "hangwatch.cli", "status", str(run_dir)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "stopped before its run began" in done.stdout, done.stderr


def _opens_for_reading(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Paths handed to ``os.open`` for anything but ``O_PATH`` (a real open: a driver's open runs)."""
    opened: list[str] = []
    real = os.open

    def spy(path, flags, *args, **kwargs):  # type: ignore[no-untyped-def]
        if not flags & getattr(os, "O_PATH", 0):
            opened.append(os.fspath(path))
        return real(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", spy)
    return opened


@pytest.mark.timeout(60)
def test_status_never_opens_what_another_users_run_dir_links_to(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Root's `hangwatch status` (and each poll of `--follow`) on another user's run dir opened
    whatever their ``supervisor.lock`` or ``journal.jsonl`` link named: reproduced with a FIFO
    whose writer their open unblocked; their terminal or ``/dev/watchdog`` open the same way.
    Only a regular file is ever opened; a linked lock file is no lock."""
    from hangwatch.cli.rundir import held_by_live_supervisor
    from hangwatch.cli.run_summary import JournalTail

    fifo = tmp_path / "theirs.fifo"
    os.mkfifo(fifo)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "supervisor.lock").symlink_to(fifo)
    (run_dir / "journal.jsonl").symlink_to(fifo)
    opened = _opens_for_reading(monkeypatch)
    assert held_by_live_supervisor(run_dir) is None
    assert JournalTail(run_dir / "journal.jsonl").read() == []
    assert [p for p in opened if p.startswith(str(tmp_path))] == []


def test_status_shows_the_learned_progress_timeout_and_its_inputs(tmp_path):
    """--progress-timeout auto journals each learned value (timeout_learned): status shows the last."""
    from hangwatch.cli.run_summary import render_status, summarise

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    learned = {"timeout_s": 42.0, "intervals": 20, "quantile_s": 14.0, "max_interval_s": 15.0, "warmup_beats": 20,
               "quantile": 0.99, "factor": 3.0, "floor": 120.0, "ceiling": 3600.0, "window": 2000}
    records = [{"event": "run_started", "ts": 1000.0, "pid": 4242, "run_dir": str(run_dir)},
               {"event": "attempt_started", "ts": 1001.0, "attempt": 1, "pid": 5001, "create_time": 1001.0,
                "env": {"HANGWATCH_CUDAGRAPHS": "1"}},
               {"event": "timeout_learned", "ts": 1002.0, "attempt": 1, "rule": "progress", **learned},
               {"event": "timeout_learned", "ts": 1003.0, "attempt": 1, "rule": "progress",
                **dict(learned, timeout_s=90.0, quantile_s=30.0)}]
    (run_dir / "journal.jsonl").write_text("".join(json.dumps({"run_id": "r", **r}) + "\n" for r in records))
    summary = summarise(run_dir / "journal.jsonl")
    assert summary["learned_timeout"]["timeout_s"] == 90.0
    text = render_status(summary)
    line = next(x for x in text.splitlines() if x.startswith("timeout"))
    assert "progress 90.0 s, learned in attempt 1 from 20 beat intervals (p99 30.0 s x 3.0" in line, line
    assert "floor 120.0 s, ceiling 3600.0 s" in line
