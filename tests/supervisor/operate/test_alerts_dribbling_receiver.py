"""An alert receiver that dribbles its answer.

Apprise sent from its own thread pool, whose threads the interpreter joins at exit. A receiver
that answers one byte a second never trips a socket timeout, so that thread, and the supervisor
with it, stayed alive after the run had finished and every alert was given up on: reproduced
with a real run, still not exited after ten minutes (exit status never reached the scheduler).
"""

from __future__ import annotations

import socket
import subprocess
import sys
import threading

import pytest

pytest.importorskip("apprise")

pytestmark = pytest.mark.timeout(90)

_SEND = """
import sys, time
from hangwatch.supervisor.operate.notify import AppriseTarget, DeliveryError
target = AppriseTarget(sys.argv[1])
started = time.monotonic()
try:
    target.send({"event": "gave_up"}, "title", "body", 1.0)
except DeliveryError as exc:
    print("failed:", exc, flush=True)
print("returned after", round(time.monotonic() - started, 1), flush=True)
"""


def _dribbling_receiver(stop: threading.Event) -> int:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.settimeout(0.2)

    def answer(conn: socket.socket) -> None:
        with conn:
            try:
                conn.recv(65536)
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n")
                while not stop.wait(0.3):
                    conn.sendall(b"x")
            except OSError:
                pass

    def serve() -> None:
        with server:
            while not stop.is_set():
                try:
                    conn, _ = server.accept()
                except OSError:
                    continue
                threading.Thread(target=answer, args=(conn,), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    return server.getsockname()[1]


@pytest.mark.slow
def test_a_receiver_that_dribbles_its_answer_never_keeps_the_supervisor_from_exiting():
    stop = threading.Event()
    port = _dribbling_receiver(stop)
    proc = subprocess.Popen([sys.executable, "-c", _SEND, f"json://127.0.0.1:{port}/hook"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        out, _ = proc.communicate(timeout=40)  # the try gives up after 1 s; exit follows at once
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        pytest.fail(f"the process never exited after its alert was given up on: {out!r}")
    finally:
        stop.set()
    assert proc.returncode == 0, out
    assert f"failed: json://127.0.0.1:{port}/[REDACTED]: no answer within 1 s" in out and "returned after 1." in out
