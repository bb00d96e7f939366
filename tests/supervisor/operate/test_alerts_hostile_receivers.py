"""Alert receivers that misbehave: an answer that never ends, a slow receiver at the end of a run."""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

pytestmark = pytest.mark.timeout(60)

_BODY = 64 << 20  # what the receiver offers: far past the cap, small enough to send at once before


def _receiver(status: int, sent: list[int]) -> ThreadingHTTPServer:
    class Flood(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.send_response(status)
            if status == 302:
                self.send_header("Location", "/elsewhere")
            self.send_header("Content-Length", str(_BODY))
            self.end_headers()
            chunk, total = b"x" * (1 << 20), 0
            try:
                while total < _BODY:
                    self.wfile.write(chunk)
                    total += len(chunk)
            except OSError:
                pass  # the client stopped reading and closed
            finally:
                sent.append(total)

        do_GET = do_POST  # a followed redirect

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Flood)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.mark.slow
@pytest.mark.parametrize("status", [200, 302])
def test_a_receivers_endless_answer_is_never_held_in_the_supervisors_memory(status):
    """Apprise reads a receiver's whole answer into memory (its socket timeouts bound each
    read, not the answer): a receiver answering with a 4 GB body grew the supervisor by
    ~400 MB a second, past 3.6 GB within 11 s of the alert, until the kernel would kill it
    and leave the run unwatched. A redirect's body was drained the same way. Now an answer
    stops at MAX_ANSWER_BYTES and the try fails."""
    from hangwatch.supervisor.operate.notify import MAX_ANSWER_BYTES, AppriseTarget, DeliveryError

    sent: list[int] = []
    server = _receiver(status, sent)
    try:
        target = AppriseTarget(f"json://127.0.0.1:{server.server_address[1]}/hook")
        with pytest.raises(DeliveryError, match="over 1 MiB"):
            target.send({"event": "incident"}, "t", "b", 20.0)
    finally:
        server.shutdown()
        server.server_close()
        deadline = time.monotonic() + 10
        while not sent and time.monotonic() < deadline:  # the handler sees the close a moment later
            time.sleep(0.02)
    # The receiver got no further than the cap and the sockets' buffers.
    assert sent and max(sent) <= MAX_ANSWER_BYTES + (16 << 20), sent


@pytest.mark.slow
def test_a_slow_receivers_abandoned_try_is_waited_for_not_the_end_alerts_tries_spent_on_it():
    """At the end of a run an incident alert's try is cut to what is left (0.9 s, say); a
    receiver answering in 3 s outlived it, and the run's last alert then spent its three
    quick tries being refused ("an earlier try ... is still waiting") and was lost with
    seconds to spare. The earlier try is now waited for within the new try's own bound."""
    from hangwatch.supervisor.operate.notify import AppriseTarget, DeliveryError

    release = threading.Event()
    received: list[str] = []

    class Slow(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if not received:
                release.wait(30)  # the first answer is slow
            received.append(self.path)
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Slow)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        target = AppriseTarget(f"json://127.0.0.1:{server.server_address[1]}/hook")
        with pytest.raises(DeliveryError):
            target.send({"event": "incident"}, "t", "b", 0.3)  # abandoned: the receiver still holds it
        threading.Timer(0.5, release.set).start()
        target.send({"event": "gave_up"}, "t", "b", 20.0)  # refused at once before
        assert len(received) == 2
    finally:
        release.set()
        server.shutdown()
        server.server_close()


def test_the_runs_last_alert_makes_room_in_a_full_queue():
    """Behind a target that hangs, incident alerts filled the bounded queue and the run's last
    alert (gave_up) was the one dropped. It now takes the place of the oldest incident alert."""
    from hangwatch.supervisor.operate.notify import Notifier

    release = threading.Event()
    sent: list[str] = []
    journaled: list[tuple[str, dict]] = []

    class Stuck:
        name = "stuck"

        def send(self, payload, title, body, timeout):
            release.wait(30)
            sent.append(payload["event"])

    notifier = Notifier([Stuck()], run_dir="/run", journal_append=lambda e, **f: journaled.append((e, f)),
                        describe=lambda bundle: {}, queue_size=3)
    for attempt in range(1, 7):
        notifier.record({"event": "incident", "attempt": attempt, "kind": "silent_hang", "reason": "r"})
        notifier.record({"event": "restart_scheduled", "after_attempt": attempt, "delay_s": 0})
    notifier.record({"event": "run_finished", "exit_code": 71, "outcome": "gave_up", "reason": "budget"})
    release.set()
    assert notifier.close(30)
    assert sent[-1] == "gave_up", sent
    assert all(f["notification"] == "incident" and "queue is full" in f["error"] for _, f in journaled), journaled
