"""Observe-only mode with real processes: ``hangwatch run --on-hang observe`` on a wedged trainer
(the simulated GPU pinned at 100 %, the tree idle). One incident with a full evidence bundle and
an alert to a real local webhook; no process signalled (the trainer records every catchable
signal it gets, and keeps its pid and create time); the journal says what would have been done;
the trainer then moves on by itself, and that is journaled, counted, and shown by ``status`` and
``report``. (The decision itself, with a fake clock: tests/supervisor/recover/test_observe_only.py.)
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import psutil
import pytest
from run_checks import check_journal
from waiting import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


class Receiver:
    """A webhook on 127.0.0.1 that keeps what apprise's json:// scheme posts."""

    def __init__(self) -> None:
        self.posts: list[dict] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                outer.posts.append(json.loads(body))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver():
    r = Receiver()
    yield r
    r.close()


def test_observe_only_captures_alerts_and_journals_a_wedge_without_signalling_anything(hw, receiver):
    signals = hw.tmp / "signals.txt"
    args = hw.fast_args(**{"--on-hang": "observe", "--stall-window": "2", "--max-restarts": "0"})
    args += ["--notify", f"json://127.0.0.1:{receiver.port}/hook",
             "--", *hw.trainer("--beats", "5", "--wedge", "--wedge-for", "14", "--beats-after", "5",
                               "--children", "1", "--signals", str(signals))]
    proc = hw.start(args)

    wait_for(lambda: (hw.run_dir / "journal.jsonl").exists() and hw.events("would_act"), timeout=60,
             what="the incident observed only")
    started = hw.events("attempt_started")[0]
    trainer = psutil.Process(started["pid"])
    assert trainer.create_time() == pytest.approx(started["create_time"], abs=0.01), "the same trainer, not a new one"
    assert trainer.status() != psutil.STATUS_ZOMBIE
    would = hw.events("would_act")[0]
    assert would["scope"] == "job" and would["level"] == 2 and would["cudagraphs"] == "off"
    killed = {p["pid"]: p for p in would["would_kill"]}
    reported = hw.reported_pids()
    assert set(reported["trainer"]) | set(reported["child"]) <= set(killed), "every process it would have killed"
    assert killed[started["pid"]]["create_time"] == pytest.approx(started["create_time"], abs=0.01)
    assert "fake_trainer.py" in " ".join(killed[started["pid"]]["cmdline"])
    # The alert, sent at once: nothing was done, and what would have been.
    wait_for(lambda: any(p.get("type") == "failure" or "observe-only" in p.get("message", "")
                         for p in receiver.posts), timeout=30, what="the alert")

    out, err = proc.communicate(timeout=90)
    assert proc.returncode == 0, err
    journal = check_journal(hw.run_dir)
    events = [r["event"] for r in journal]
    assert events.count("incident") == 1, "one incident for one stall episode, however long it lasts"
    assert events.count("would_act") == 1 and events.count("attempt_started") == 1
    assert "recovery" not in events and "restart_scheduled" not in events
    assert not [r for r in journal if r["event"] == "kill" and r.get("reason") != "done"], "no kill for the hang"
    recovered = hw.events("recovered_by_itself")
    assert len(recovered) == 1 and recovered[0]["step"] > 5 and recovered[0]["after_s"] > 0
    assert events.index("incident") < events.index("capture") < events.index("would_act") \
        < events.index("recovered_by_itself") < events.index("attempt_ended")
    assert hw.events("attempt_ended")[0]["kind"] == "done"
    # Nothing was signalled while hung or after: only what the trainer left behind at its own exit
    # (its child) gets the usual sweep, after it moved on by itself.
    got = [line.split() for line in signals.read_text().splitlines()] if signals.exists() else []
    moved_on = recovered[0]["ts"]
    assert [g for g in got if int(g[1]) == started["pid"] or float(g[2]) < moved_on] == [], got

    # The full bundle, as when acting.
    bundle = Path(hw.events("capture")[0]["evidence_path"])
    assert (bundle / "manifest.json").is_file() and (bundle / "report.html").stat().st_size > 1000
    alert = next(p for p in receiver.posts if "observe-only" in p.get("message", ""))
    assert "would have killed" in alert["message"] and "restarted the job" in alert["message"]

    status = hw.run(["status", str(hw.run_dir)], timeout=30).stdout
    assert "recovered by itself 1" in status and "observed only: would have restarted the job" in status
    assert hw.run(["report", str(hw.run_dir)], timeout=30).returncode == 0
    page = (hw.run_dir / "report.html").read_text()
    assert "observed only: would have restarted the job (killing 2 process(es), cuda graphs off); " \
           "recovered by itself after" in page
