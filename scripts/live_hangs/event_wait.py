# Expected cause id per role (the first role is the primary one: Ctrl-C, gdb, --json);
# alternatives are joined by ' | '. Read by scripts/bench_replay_live.py without importing.
EXPECTED = {"main": "event-wait"}

import threading
import hw
model_ready = threading.Event()

def wait_for_model():
    if not model_ready.wait(timeout=140):
        raise TimeoutError

hw.ready()
wait_for_model()
