# Expected cause id per role (the first role is the primary one: Ctrl-C, gdb, --json);
# alternatives are joined by ' | '. Read by scripts/bench_replay_live.py without importing.
EXPECTED = {"main": "socket-read"}

import socket
import hw
srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen(0)   # never accepts
addr = srv.getsockname()
fill = []
for _ in range(3):                            # fill the accept queue
    c = socket.socket(); c.setblocking(False)
    try: c.connect(addr)
    except BlockingIOError: pass
    fill.append(c)
hw.ready()
s = socket.create_connection(addr, timeout=140)   # SYN dropped: connect blocks
