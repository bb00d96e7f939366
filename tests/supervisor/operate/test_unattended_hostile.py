"""Unattended operation against what goes wrong around a run: a console that goes away,
alert commands that fork, flood or escape, alert targets that never finish, a metrics
textfile that cannot be written or is a link. Real processes, bounded waits."""

from __future__ import annotations

import json
import os
import subprocess
import time
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(60)

ROOT = Path(__file__).resolve().parents[3]


def _hangwatch(args: list[str], cwd: Path, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "hangwatch.cli", *args], cwd=cwd,
                            env=dict(os.environ, PYTHONPATH=str(ROOT)), **kw)


def _journal(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "journal.jsonl").read_text().splitlines() if line.strip()]


@pytest.mark.slow
def test_a_console_that_goes_away_never_ends_the_run(tmp_path):
    """`hangwatch run ... 2>&1 | head`: the pipe's reader exits, the next log line raised
    EPIPE inside the supervisor, which called it an internal error and killed the trainer."""
    run_dir = tmp_path / "run"
    proc = _hangwatch(["run", "--run-dir", str(run_dir), "--gpu-probe", "none", "--interval", "0.1",
                       "--", sys.executable, "-c", "import time; time.sleep(1)"],
                      tmp_path, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    proc.stdout.close()  # the reader is gone before the supervisor's first line
    assert proc.wait(timeout=40) == 0
    finished = [r for r in _journal(run_dir) if r["event"] == "run_finished"]
    assert [r["outcome"] for r in finished] == ["success"]
    assert "internal_error" not in (run_dir / "hangwatch.log").read_text()


@pytest.mark.slow
def test_status_into_a_closed_pipe_is_not_an_internal_error(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    lines = [{"event": "run_started", "ts": 1.0e9 + i, "run_id": "r", "pid": 1} if i == 0 else
             {"event": "trainer_info", "ts": 1.0e9 + i, "run_id": "r", "attempt": 1, "note": "x" * 200}
             for i in range(3000)]
    (run_dir / "journal.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    proc = _hangwatch(["status", "--follow", "--json", str(run_dir)], tmp_path, stdout=subprocess.PIPE,
                      stderr=subprocess.PIPE)
    proc.stdout.readline()
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=30) == 141, err
    assert "internal error" not in err and "Traceback" not in err


# -- --notify-command: bounded, reaped, never part of the trainer's tree ----------------------


def _running(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.mark.slow
def test_an_alert_command_and_its_daemon_stay_out_of_the_tree_and_die_at_the_deadline(tmp_path):
    """The supervisor treats its descendants as the trainer's tree: a notify command run from it
    was captured and killed as the trainer, and a `setsid` daemon it left outlived every deadline."""
    import threading

    from hangwatch.supervisor.operate.notify import CommandTarget
    from hangwatch.supervisor.watch.proctree import ProcessTree

    daemon_pid, shell_pid = tmp_path / "daemon.pid", tmp_path / "shell.pid"
    got = tmp_path / "got.json"
    target = CommandTarget(f"echo $$ > {shell_pid}; cat > {got}; (setsid sh -c 'echo $$ > {daemon_pid}; exec sleep 30' &);"
                           " sleep 0.5; exit 0")
    done = threading.Event()
    thread = threading.Thread(target=lambda: (target.send({"event": "incident"}, "t", "b", 1.5), done.set()))
    thread.start()
    deadline = time.monotonic() + 10
    while not daemon_pid.exists() or not daemon_pid.read_text().strip():
        assert time.monotonic() < deadline, "the daemon never started"
        time.sleep(0.02)
    pid = int(daemon_pid.read_text())
    assert _running(pid)
    members = {p.pid for p in ProcessTree().members()}  # this process's tree, as the supervisor sees its own
    assert int(shell_pid.read_text()) not in members, "the alert command would be taken for the trainer's process"
    thread.join(10)
    assert done.is_set(), "exit 0 with a daemon left is a delivered alert"
    assert json.loads(got.read_text())["event"] == "incident"
    assert not _running(pid), "nothing an alert command starts outlives its deadline"


def test_an_alert_command_that_floods_stderr_fails_with_a_short_line(tmp_path):
    from hangwatch.supervisor.operate.notify import CommandTarget, DeliveryError

    target = CommandTarget("head -c 30000000 /dev/zero | tr '\\0' x >&2; echo; echo 'the last words' >&2; exit 3")
    with pytest.raises(DeliveryError) as caught:
        target.send({"event": "gave_up"}, "t", "b", 10)
    message = str(caught.value)
    assert "exit status 3" in message and message.endswith("the last words") and len(message) < 500


# -- --metrics-textfile ------------------------------------------------------------------------


@pytest.mark.slow
def test_a_metrics_textfile_that_stops_being_writable_costs_the_metrics_not_the_run(tmp_path):
    """Its directory went away mid-run (here: replaced by a file): the write at the end raised
    out of the supervisor's cleanup and a finished run exited 70 as an internal error."""
    folder = tmp_path / "textfile"
    folder.mkdir()
    run_dir = tmp_path / "run"
    trainer = (f"import os, shutil, time; time.sleep(0.3); shutil.rmtree({str(folder)!r}); "
               f"open({str(folder)!r}, 'w').close(); time.sleep(0.3)")
    proc = _hangwatch(["run", "--run-dir", str(run_dir), "--gpu-probe", "none", "--interval", "0.1",
                       "--metrics-textfile", str(folder / "hangwatch.prom"), "--", sys.executable, "-c", trainer],
                      tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = proc.communicate(timeout=40)
    assert proc.returncode == 0, err
    assert "metrics_textfile_failed" in err and "internal error" not in err


@pytest.mark.slow
def test_a_metrics_textfile_that_is_a_link_is_refused_and_its_target_untouched(tmp_path):
    """The path was resolved at start, so a link planted at the name had root's metrics
    replace whatever file it pointed to."""
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    link = tmp_path / "hangwatch.prom"
    link.symlink_to(victim)
    proc = _hangwatch(["run", "--run-dir", str(tmp_path / "run"), "--gpu-probe", "none", "--metrics-textfile",
                       str(link), "--", sys.executable, "-c", "pass"],
                      tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = proc.communicate(timeout=40)
    assert proc.returncode == 2 and "is a symbolic link" in err, err
    assert victim.read_text() == "precious\n" and link.is_symlink()


# -- --notify URL ------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_receiver_that_dribbles_its_answer_leaves_one_abandoned_try_not_one_per_retry():
    """Apprise's socket timeouts bound each read, not the answer: a receiver sending a byte now
    and then kept every abandoned try's thread and connection alive, one more per retry."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from hangwatch.supervisor.operate.notify import AppriseTarget, DeliveryError

    stop = threading.Event()
    connections: list[int] = []

    class Dribble(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            connections.append(1)
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.send_response(200)
            self.send_header("Content-Length", "1000")
            self.end_headers()
            while not stop.wait(0.1):
                self.wfile.write(b"x")
                self.wfile.flush()

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Dribble)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        target = AppriseTarget(f"json://127.0.0.1:{server.server_address[1]}/hook")
        for _ in range(4):
            with pytest.raises(DeliveryError):
                target.send({"event": "incident"}, "t", "b", 0.4)
        tries = [t for t in threading.enumerate() if t.name.startswith("notify-try") and t.is_alive()]
        assert len(tries) == 1 and len(connections) == 1
    finally:
        stop.set()
        server.shutdown()
        server.server_close()


# -- status and report on run directories as people find them ----------------------------------


def _write_journal(run_dir: Path, records: list[dict]) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "journal.jsonl").write_text("".join(json.dumps({"run_id": "r", **r}) + "\n" for r in records))


def test_the_report_of_a_run_whose_supervisor_died_ends_at_its_last_record(tmp_path):
    """Without run_finished the report ran the clock to now: written a day after the supervisor
    died, a run of 100 s had a day of wall time and a goodput near 0."""
    from hangwatch.cli.run_page import write_run_report

    run_dir = tmp_path / "run"
    t0 = 1.0e9  # long ago
    _write_journal(run_dir, [{"event": "run_started", "ts": t0, "pid": 1},
                             {"event": "attempt_started", "ts": t0, "attempt": 1, "pid": 2},
                             {"event": "first_heartbeat", "ts": t0 + 10, "attempt": 1},
                             {"event": "trainer_info", "ts": t0 + 100, "attempt": 1}])
    (run_dir / "supervisor.lock").write_text("1\n")  # nobody holds it: the supervisor is gone
    path, g = write_run_report(run_dir)
    assert g["wall_s"] == 100.0 and g["productive_s"] == 90.0 and g["goodput"] == 0.9
    assert "supervisor is gone without finishing" in path.read_text()


def test_status_and_report_find_bundles_of_a_moved_run_dir_and_say_when_one_is_gone(tmp_path):
    from hangwatch.cli.run_page import write_run_report
    from hangwatch.cli.run_summary import render_status, summarise

    run_dir = tmp_path / "copied"
    old = "/gone/cluster/run/incidents"
    _write_journal(run_dir, [
        {"event": "run_started", "ts": 1.0e9, "pid": 1},
        {"event": "attempt_started", "ts": 1.0e9, "attempt": 1, "pid": 2},
        {"event": "incident", "ts": 1.0e9 + 5, "attempt": 1, "kind": "stall", "reason": "r", "latency_s": 2.0},
        {"event": "capture", "ts": 1.0e9 + 6, "attempt": 1, "evidence_path": f"{old}/b1"},
        {"event": "attempt_ended", "ts": 1.0e9 + 7, "attempt": 1, "kind": "stall", "exit_code": -15},
        {"event": "attempt_started", "ts": 1.0e9 + 8, "attempt": 2, "pid": 3},
        {"event": "incident", "ts": 1.0e9 + 9, "attempt": 2, "kind": "stall", "reason": "r", "latency_s": 2.0},
        {"event": "capture", "ts": 1.0e9 + 9, "attempt": 2, "evidence_path": f"{old}/b2"},
        {"event": "attempt_ended", "ts": 1.0e9 + 10, "attempt": 2, "kind": "stall", "exit_code": -15},
        {"event": "run_finished", "ts": 1.0e9 + 10, "outcome": "gave_up", "exit_code": 71, "reason": "budget"}])
    bundle = run_dir / "incidents" / "b1"
    bundle.mkdir(parents=True)
    (bundle / "report.html").write_text("<html></html>")  # b2 was removed (--keep-incidents, by hand)
    shown = render_status(summarise(run_dir / "journal.jsonl"))
    assert f"report {bundle / 'report.html'}" in shown
    assert f"report none (its bundle {old}/b2 no longer exists)" in shown
    page = write_run_report(run_dir)[0].read_text()
    assert 'href="incidents/b1/report.html"' in page and old not in page.split("<h2>Incidents")[1]


def test_status_json_has_one_shape_for_running_and_ended_attempts(tmp_path):
    """A running attempt lacked exit_code, signal, exit, duration_s, evidence and reason
    (present once it ended): a `--json` reader met KeyErrors mid-run."""
    from hangwatch.cli.run_summary import render_status, summarise

    run_dir = tmp_path / "run"
    _write_journal(run_dir, [
        {"event": "run_started", "ts": 1.0e9, "pid": 1},
        {"event": "attempt_started", "ts": 1.0e9, "attempt": 1, "pid": 2},
        {"event": "attempt_ended", "ts": 1.0e9 + 5, "attempt": 1, "kind": "crash", "exit_code": 1},
        {"event": "attempt_started", "ts": 1.0e9 + 6, "attempt": 2, "pid": 3}])
    summary = summarise(run_dir / "journal.jsonl")
    ended, running = summary["attempts"]
    assert set(ended) == set(running) and running["exit_code"] is None and summary["schema"] == 1
    # pid 1 is no supervisor of ours: the open attempt is left open, not running
    assert render_status(summary).splitlines()[-1].split()[3:5] == ["left", "open"]


@pytest.mark.slow
def test_the_runs_last_alert_is_not_starved_by_incident_alerts_a_slow_target_holds():
    """At the end the notifier had a fixed time for its queue, first in first out: behind a few
    incident alerts to a slow target, `gave_up` (the alert that matters when nobody watches)
    was never sent, and the alerts dropped at the deadline were journaled nowhere."""
    from hangwatch.supervisor.operate.notify import Notifier

    sent: list[str] = []

    class Slow:
        name = "slow://[REDACTED]"

        def send(self, payload, title, body, timeout):
            time.sleep(0.5)
            sent.append(payload["event"])

    journaled: list[dict] = []
    n = Notifier([Slow()], run_dir="/run", host="h", describe=lambda p: {},
                 journal_append=lambda event, **f: journaled.append({"event": event, **f}))
    for attempt in range(1, 9):  # 8 alerts of 0.5 s each: more than the 3.5 s the end has
        n.record({"event": "incident", "attempt": attempt, "kind": "stall", "reason": "r"})
        n.record({"event": "restart_scheduled", "after_attempt": attempt, "delay_s": 0})
    n.record({"event": "run_finished", "outcome": "gave_up", "exit_code": 71, "reason": "budget", "attempts": 9})
    n.close(3.5)
    assert "gave_up" in sent
    assert len(sent) + len([j for j in journaled if j["event"] == "notify_failed"]) == 9, "each alert sent or journaled"


def test_metrics_port_takes_a_bracketed_ipv6_address():
    """`--metrics-port [::1]:9464` (how URLs write it) was refused: 'Name or service not known'."""
    import socket
    import urllib.request

    from hangwatch.supervisor.config import build_operate
    from hangwatch.supervisor.decide.detector import DetectorConfig
    from hangwatch.supervisor.operate.livestatus import LiveStatus
    from hangwatch.supervisor.operate.metrics import MetricsExporter

    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
    except OSError:
        pytest.skip("no IPv6 loopback here")
    host, port = build_operate({"metrics_port": "[::1]:0"}).metrics_port
    exporter = MetricsExporter(LiveStatus(Path(os.devnull), detector=DetectorConfig(), gpu_probe="none"))
    try:
        url = exporter.serve(host, port)
        assert url.startswith("http://[::1]:")
        assert b"hangwatch_supervisor_running 1.0" in urllib.request.urlopen(url, timeout=5).read()
    finally:
        exporter.close()


def test_metrics_count_engine_level_restarts_and_their_lost_time():
    """After a level-1 recovery the metrics said 0 restarts: nothing counted the engine restart."""
    from prometheus_client.parser import text_string_to_metric_families
    from prometheus_client import generate_latest

    from hangwatch.supervisor.decide.detector import DetectorConfig
    from hangwatch.supervisor.operate.livestatus import LiveStatus
    from hangwatch.supervisor.operate.metrics import MetricsExporter

    exporter = MetricsExporter(LiveStatus(Path(os.devnull), detector=DetectorConfig(), gpu_probe="none"))
    for r in [{"event": "incident", "ts": 100.0, "onset_wall": 96.0, "attempt": 1, "kind": "stall"},
              {"event": "engine_restart", "ts": 100.5, "attempt": 1, "ok": True},
              {"event": "engine_recovered", "ts": 110.0, "attempt": 1},
              {"event": "incident", "ts": 200.0, "onset_wall": 195.0, "attempt": 1, "kind": "stall"},
              {"event": "engine_restart", "ts": 200.5, "attempt": 1, "ok": False},
              {"event": "restart_scheduled", "ts": 201.0, "after_attempt": 1, "delay_s": 0},
              {"event": "first_heartbeat", "ts": 215.0, "attempt": 2}]:
        exporter.record(r)
    got = {(s.name, tuple(sorted(s.labels.items()))): s.value
           for f in text_string_to_metric_families(generate_latest(exporter.registry).decode()) for s in f.samples}
    assert got[("hangwatch_engine_restarts_total", (("ok", "true"),))] == 1
    assert got[("hangwatch_engine_restarts_total", (("ok", "false"),))] == 1
    assert got[("hangwatch_restarts_total", ())] == 1 and got[("hangwatch_incidents_total", (("kind", "stall"),))] == 2
    assert got[("hangwatch_seconds_lost_total", ())] == (110 - 96) + (215 - 195)


def test_heartbeat_phase_metric_holds_the_current_phase_only():
    """Each phase the trainer ever announced stayed a series (set to 0): a trainer naming its
    phases per step grew every scrape without bound (1.3 MB after 5,000 phases)."""
    from prometheus_client import generate_latest

    from hangwatch.supervisor.decide.detector import DetectorConfig
    from hangwatch.supervisor.operate.livestatus import LiveStatus
    from hangwatch.supervisor.operate.metrics import MetricsExporter

    status = LiveStatus(Path(os.devnull), detector=DetectorConfig(), gpu_probe="none")
    exporter = MetricsExporter(status)
    for step in range(500):
        status.state["heartbeat"] = {"step": step, "phase": f"epoch 1/step {step} " + "x" * 500, "ts": 1.0}
        exporter.tick(None)
    lines = [line for line in generate_latest(exporter.registry).decode().splitlines()
             if line.startswith("hangwatch_heartbeat_phase{")]
    assert len(lines) == 1 and "step 499" in lines[0] and lines[0].endswith(" 1.0") and len(lines[0]) < 200


def test_report_on_a_journal_with_fields_of_other_types_is_written_not_a_traceback(tmp_path):
    """`status` took any journal; `report` raised on an incident without a time or with an
    onset that is not one (a journal edited by hand, or from another version): exit 70."""
    from hangwatch.cli.run_page import write_run_report

    run_dir = tmp_path / "run"
    _write_journal(run_dir, [
        {"event": "run_started", "ts": 1.0e9, "pid": 1},
        {"event": "attempt_started", "ts": 1.0e9 + 1, "attempt": 1, "pid": 2},
        {"event": "incident", "ts": 1.0e9 + 5, "attempt": 1, "kind": "stall", "onset_wall": "yesterday"},
        {"event": "incident", "attempt": 1, "kind": "stall"},
        {"event": "attempt_ended", "ts": 1.0e9 + 8, "attempt": 1, "kind": "stall", "exit_code": -15},
        {"event": "run_finished", "ts": 1.0e9 + 10, "outcome": "gave_up", "exit_code": 71, "reason": "b"}])
    path, g = write_run_report(run_dir)
    assert g["wall_s"] == 10.0 and len(g["incidents"]) == 1 and path.is_file()


def test_follow_ends_when_the_journals_supervisor_pid_now_belongs_to_a_newer_process(tmp_path):
    """Without a lock file (a run from before it existed, or a journal from elsewhere), a pid in
    use again (pid 1 here) made `status` say running and `status --follow` wait forever."""
    import io

    from hangwatch.cli.run_summary import follow, summarise

    run_dir = tmp_path / "run"
    _write_journal(run_dir, [{"event": "run_started", "ts": 1.0e9, "pid": 1}])  # pid 1 started after 2001
    assert not summarise(run_dir / "journal.jsonl")["alive"]
    out = io.StringIO()
    sleeps: list[float] = []
    assert follow(run_dir, out=out, sleep=sleeps.append) == 1 and not sleeps
    assert "supervisor gone without finishing" in out.getvalue()


def test_the_end_alert_of_a_resumed_run_counts_the_runs_incidents(tmp_path):
    """After `--resume` the notifier counted only its own supervisor's incidents: gave_up said
    'incidents: 2' of a run whose journal held 3."""
    import structlog

    from hangwatch.cli import operate
    from hangwatch.supervisor.config import SETTINGS, build, build_operate

    run_dir = tmp_path / "run"
    _write_journal(run_dir, [{"event": "run_started", "ts": 1.0e9, "pid": 1},
                             {"event": "attempt_started", "ts": 1.0e9 + 1, "attempt": 1, "pid": 2},
                             {"event": "incident", "ts": 1.0e9 + 5, "attempt": 1, "kind": "stall"},
                             {"event": "attempt_started", "ts": 1.0e9 + 6, "attempt": 2, "pid": 3},
                             {"event": "incident", "ts": 1.0e9 + 9, "attempt": 2, "kind": "stall"}])
    got = tmp_path / "alert.json"
    values = {k: v[1] for k, v in SETTINGS.items()}
    values.update(run_dir=str(run_dir), gpu_probe="none", notify_command=f"cat > {got}")
    ops = operate.start(build(values, ["true"]), build_operate(values), "r", "none", structlog.get_logger("t"))
    ops.journal.append("incident", attempt=3, kind="stall")
    ops.journal.append("run_finished", outcome="gave_up", exit_code=71, reason="budget", attempts=3)
    ops.close()
    assert json.loads(got.read_text())["incidents"] == 3


@pytest.mark.slow
def test_idle_connections_to_metrics_cost_a_bounded_number_of_threads():
    """A thread per connection, waiting without a timeout: 600 idle connections to /metrics (all
    interfaces by default) were 600 threads in the supervisor."""
    import socket
    import threading
    import urllib.request

    from hangwatch.supervisor.decide.detector import DetectorConfig
    from hangwatch.supervisor.operate.livestatus import LiveStatus
    from hangwatch.supervisor.operate.metrics import MetricsExporter

    exporter = MetricsExporter(LiveStatus(Path(os.devnull), detector=DetectorConfig(), gpu_probe="none"))
    url = exporter.serve("127.0.0.1", 0)
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    before = threading.active_count()
    idle = []
    try:
        for _ in range(40):
            idle.append(socket.create_connection(("127.0.0.1", port), timeout=5))
            idle[-1].sendall(b"GET /metrics HTTP/1.1\r\n")  # and never the rest
        time.sleep(0.5)
        assert threading.active_count() - before <= 10
    finally:
        for s in idle:
            s.close()
    deadline = time.monotonic() + 5
    while True:  # slots come back as the idle connections close
        try:
            assert b"hangwatch_supervisor_running" in urllib.request.urlopen(url, timeout=2).read()
            break
        except OSError:
            assert time.monotonic() < deadline
            time.sleep(0.1)
    exporter.close()


@pytest.mark.parametrize("name", ["metrics_port", "metrics_textfile", "notify_command"])
def test_an_empty_operations_option_is_refused_not_silently_off(name):
    """`--metrics-port "$PORT"` with PORT unset ran without metrics and said nothing."""
    from hangwatch.contract.errors import ConfigError
    from hangwatch.supervisor.config import build_operate

    with pytest.raises(ConfigError, match="empty value"):
        build_operate({name: ""})
