# Expected cause id per role (the first role is the primary one: Ctrl-C, gdb, --json);
# alternatives are joined by ' | '. Read by scripts/bench_replay_live.py without importing.
EXPECTED = {"main": "socket-read"}
PYSPY_JSON = True

import requests
import hw
port = hw.silent_server()
hw.ready()
r = requests.post(f"http://127.0.0.1:{port}/generate", json={"prompt": "hi"}, timeout=140)
