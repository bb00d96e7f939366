# Expected cause id per role (the first role is the primary one: Ctrl-C, gdb, --json);
# alternatives are joined by ' | '. Read by scripts/bench_replay_live.py without importing.
EXPECTED = {"main": "future-wait | lock-wait"}
GDB = True

import threading, time
from concurrent.futures import ThreadPoolExecutor
import hw
db_lock = threading.Lock()
db_lock.acquire()                           # leaked: never released

def write_row(i):
    with db_lock:
        return i

with ThreadPoolExecutor(4) as ex:
    fut = ex.submit(write_row, 1)
    hw.ready()
    print(fut.result(timeout=140))
