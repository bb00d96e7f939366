# Expected cause id per role (the first role is the primary one: Ctrl-C, gdb, --json);
# alternatives are joined by ' | '. Read by scripts/bench_replay_live.py without importing.
EXPECTED = {"main": "shutdown-join | event-wait"}

import threading
import hw
stop = threading.Event()

def heartbeat():
    while not stop.wait(140):               # non-daemon thread waiting for a stop that never comes
        pass

threading.Thread(target=heartbeat, name="heartbeat").start()
print("training done")
hw.ready()
# main returns without stop.set(): interpreter exit waits for the thread
