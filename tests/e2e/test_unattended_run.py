"""End-to-end, unattended: alerts to a local webhook and a command, /metrics scraped during
a real run, ``status`` and ``status --follow`` while it runs, a hanging and a failing alert
target that do not delay recovery, and the no-heartbeat warnings."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from run_checks import check_journal
from waiting import wait_for

from hangwatch.contract.exitcodes import EXIT_BUDGET
from hangwatch.supervisor.operate.livestatus import read_status

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]


class Receiver:
    """A webhook on 127.0.0.1 that keeps what apprise's json:// scheme posts."""

    def __init__(self) -> None:
        self.posts: list[dict] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                outer.posts.append({"path": self.path, **json.loads(body)})
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver():
    r = Receiver()
    yield r
    r.close()


def _metrics(url: str) -> dict[tuple[str, tuple], float]:
    from prometheus_client.parser import text_string_to_metric_families

    text = urllib.request.urlopen(url, timeout=5).read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_alerts_metrics_and_status_during_a_real_run(hw, receiver):
    events = hw.tmp / "events.jsonl"
    textfile = hw.tmp / "hangwatch.prom"
    # A 4 s window: the checks below read the stall-building phase in three places (status file,
    # metrics, a `status` command that starts a Python), which a 2 s one outran on a busy host.
    args = hw.fast_args(**{"--max-restarts": "1", "--metrics-port": "127.0.0.1:0", "--metrics-textfile": str(textfile),
                           "--stall-window": "4"})
    args += ["--notify", f"json://127.0.0.1:{receiver.port}/hook", "--notify-command", f"cat >> {events}",
             "--", *hw.trainer("--beats", "5", "--wedge")]
    proc = hw.start(args)
    wait_for(lambda: (hw.run_dir / "journal.jsonl").exists(), what="the journal")
    follow = subprocess.Popen([sys.executable, "-m", "hangwatch.cli", "status", "--follow", str(hw.run_dir)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=hw.tmp)
    hw.procs.append(follow)

    wait_for(lambda: read_status(hw.run_dir)["phase"] == "stall_building", what="stall building")
    live = read_status(hw.run_dir)
    snapshots: list[dict] = []  # one scrape, all read from it: the phase moves on between scrapes
    wait_for(lambda: snapshots.append(_metrics(live["links"]["metrics"]))
             or snapshots[-1][("hangwatch_phase", (("phase", "stall_building"),))] == 1, what="metrics: stall building")
    m = snapshots[-1]
    assert m[("hangwatch_phase", (("phase", "watching"),))] == 0
    assert m[("hangwatch_attempt", ())] == 1
    assert m[("hangwatch_last_heartbeat_step", ())] == 5
    assert m[("hangwatch_heartbeat_phase", (("phase", "train"),))] == 1
    assert m[("hangwatch_gpu_utilization_percent", (("gpu", "0"),))] == 100
    assert m[("hangwatch_gpu_memory_used_bytes", (("gpu", "0"),))] == 40000 * 1024 * 1024
    assert m[("hangwatch_stall_window_seconds", ())] == 4
    assert 0 <= m[("hangwatch_stall_building_seconds", ())] < 4
    assert m[("hangwatch_supervisor_running", ())] == 1
    shows: list[str] = []  # a `status` that starts late on a busy host may see the incident: ask again
    wait_for(lambda: shows.append(hw.run(["status", str(hw.run_dir)], timeout=30).stdout)
             or "now      stall building: " in shows[-1], timeout=40, what="status: stall building")
    shown = shows[-1]
    assert " of 4 s" in shown
    assert "heartbeat step 5, phase train" in shown

    wait_for(lambda: hw.events("attempt_started")[-1]["attempt"] == 2, what="attempt 2")
    m = _metrics(live["links"]["metrics"])
    assert m[("hangwatch_incidents_total", (("kind", "stall"),))] == 1
    assert m[("hangwatch_restarts_total", ())] == 1
    assert m[("hangwatch_attempt", ())] == 2

    out, err = proc.communicate(timeout=60)
    assert proc.returncode == EXIT_BUDGET, err
    check_journal(hw.run_dir)
    follow_out, _ = follow.communicate(timeout=30)
    assert follow.returncode == 0
    assert "now: stall building" in follow_out and "INCIDENT stall" in follow_out
    assert follow_out.rstrip().splitlines()[-1].endswith("run finished: gave_up (exit 71): restart budget exhausted: "
                                                         "1 restarts (--max-restarts 1)")

    reports = [Path(line.split("report ", 1)[1].split(" ")[0]) for line in err.splitlines() if "incident_report" in line]
    assert len(reports) == 2 and all(p.name == "report.html" and p.is_file() for p in reports), err

    sent = [json.loads(line) for line in events.read_text().splitlines()]
    assert [e["event"] for e in sent] == ["incident", "incident", "gave_up"]
    first = sent[0]
    assert first["kind"] == "stall" and first["attempt"] == 1 and first["report"] == str(reports[0])
    assert first["action"].startswith("killed ") and "restarting as attempt 2" in first["action"]
    assert "cuda graphs off" in first["action"] and first["step"] == 5
    assert "not restarting: restart budget exhausted" in sent[1]["action"]
    assert sent[2]["exit_code"] == EXIT_BUDGET and sent[2]["incidents"] == 2

    assert [p["title"].split(" on ")[0] for p in receiver.posts] == [
        "hangwatch: stall in attempt 1", "hangwatch: stall in attempt 2", "hangwatch: run stopped (gave_up, exit 71)"]
    body = receiver.posts[0]["message"]
    for part in ("what: stall: gpu_util=100%", f"{hw.run_dir}", "signature: ", "done: killed", f"report: {reports[0]}"):
        assert part in body, body

    text = textfile.read_text()
    assert 'hangwatch_run_outcome{outcome="gave_up"} 1.0' in text
    assert 'hangwatch_incidents_total{kind="stall"} 2.0' in text
    lost = [line for line in text.splitlines() if line.startswith("hangwatch_seconds_lost_total")]
    assert lost and float(lost[0].split()[1]) > 0

    final = hw.run(["status", str(hw.run_dir)], timeout=30).stdout
    assert final.count("report.html") == 2 and "killed by SIGTERM" in final


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_hanging_or_failing_alert_target_never_delays_recovery(hw):
    release = hw.tmp / "release"
    got = hw.tmp / "got.jsonl"
    hanging = f"cat >> {got}; while [ ! -e {release} ]; do sleep 0.05; done"
    secret_path = "T0KEN-in-the-path"
    args = hw.fast_args(**{"--max-restarts": "1"}) + [
        "--notify", f"json://127.0.0.1:{_closed_port()}/{secret_path}", "--notify-command", hanging,
        "--", *hw.trainer("--beats", "3", "--wedge")]
    proc = hw.start(args)
    wait_for(lambda: "incident" in got.read_text(), timeout=40, what="the first alert reaching the command")
    # The command holds its alert until `release` exists (its own timeout is 10 s, tried 3 times):
    # a notifier in the supervisor's path would hold the restart that long.
    wait_for(lambda: any(a["attempt"] == 2 for a in hw.events("attempt_started")), timeout=15,
             what="attempt 2 while the alert command still hangs")
    assert not release.exists()
    release.touch()
    out, err = proc.communicate(timeout=90)
    assert proc.returncode == EXIT_BUDGET, err
    check_journal(hw.run_dir)

    failed = hw.events("notify_failed")
    assert {f["notification"] for f in failed} == {"incident", "gave_up"}
    assert all(f["target"].startswith("json://127.0.0.1:") for f in failed), failed
    # Three tries each, but an incident alert still queued when the run ended gets one (the time
    # left is kept for gave_up).
    assert failed[0]["tries"] == 3 and failed[-1]["notification"] == "gave_up" and failed[-1]["tries"] == 3, failed
    assert all(f["target"].endswith("/[REDACTED]") for f in failed)
    for text in (err, (hw.run_dir / "journal.jsonl").read_text(), (hw.run_dir / "hangwatch.log").read_text()):
        assert secret_path not in text, "a notify URL's secret part is never written"


def test_no_hang_can_be_detected_warnings(hw):
    result = hw.run(["run", "--run-dir", str(hw.run_dir), "--gpu-probe", "none", "--interval", "0.2",
                     "--heartbeat-warning", "0.6", "--", sys.executable, "-c", "import time; time.sleep(1.5)"], timeout=30)
    assert result.returncode == 0, result.stderr
    assert "NO HANG CAN BE DETECTED" in result.stderr
    assert "no heartbeat 0 s after launch" not in result.stderr
    assert "attempt 1: no heartbeat 1 s after launch (--heartbeat-warning 0.6)" in result.stderr
