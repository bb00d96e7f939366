# Expected cause id per role (the first role is the primary one: Ctrl-C, gdb, --json);
# alternatives are joined by ' | '. Read by scripts/bench_replay_live.py without importing.
EXPECTED = {"child": "fork-inherited-lock | lock-wait", "parent": "subprocess-wait | child-process-wait"}
GDB = True

import os, threading, time
import hw

_metrics_lock = threading.RLock()
_buf = []

def flush_metrics():
    with _metrics_lock:
        _buf.clear()

def exporter():
    with _metrics_lock:
        time.sleep(140)                      # slow export holding the lock

threading.Thread(target=exporter, daemon=True).start()
time.sleep(0.3)
pid = os.fork()
if pid == 0:
    hw.ready("child")
    flush_metrics()                          # inherited lock: held by a thread that doesn't exist here
    os._exit(0)
hw.ready("parent")
os.waitpid(pid, 0)
