"""Round 4 of hostile inputs: an alert receiver whose answer never ends."""

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
