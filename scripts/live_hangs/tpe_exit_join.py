# Expected cause id per role (the first role is the primary one: Ctrl-C, gdb, --json);
# alternatives are joined by ' | '. Read by scripts/bench_replay_live.py without importing.
EXPECTED = {"main": "shutdown-join | socket-read"}

import socket, sys
from concurrent.futures import ThreadPoolExecutor
import hw
port = hw.silent_server()

def upload_metrics():
    s = socket.create_connection(("127.0.0.1", port)); s.sendall(b"PUT /metrics\n")
    s.settimeout(140)
    return s.recv(1024)                      # never answered

ex = ThreadPoolExecutor(2)
ex.submit(upload_metrics)
print("done, exiting")
hw.ready()
sys.exit(0)                                  # exit waits for the executor's worker threads
