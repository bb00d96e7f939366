# Expected cause id per role (the first role is the primary one: Ctrl-C, gdb, --json);
# alternatives are joined by ' | '. Read by scripts/bench_replay_live.py without importing.
EXPECTED = {"main": "thread-join | socket-read"}

import socket, threading
import hw
port = hw.silent_server()

def fetch():
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"GET\n")
    s.settimeout(140)
    return s.recv(4096)

t = threading.Thread(target=fetch, name="fetcher")
t.start()
hw.ready()
t.join(140)
