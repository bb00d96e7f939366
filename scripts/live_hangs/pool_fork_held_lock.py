# Expected cause id per role (the first role is the primary one: Ctrl-C, gdb, --json);
# alternatives are joined by ' | '. Read by scripts/bench_replay_live.py without importing.
EXPECTED = {"worker": "fork-inherited-lock | lock-wait"}
TREE = "fork-inherited-lock | lock-wait"   # py-spy dump --subprocesses of the whole tree
WAIT_FOR = ["parent"]   # roles that must be ready too, not dumped

import threading, time, multiprocessing as mp
import hw

class Cache:
    def __init__(self):
        self._lock = threading.Lock(); self._d = {}
    def refresh_forever(self):
        with self._lock:                     # background refresh holds the lock for a long time
            time.sleep(140)
    def get(self, k):
        with self._lock:
            return self._d.get(k, k)

CACHE = Cache()

def task(x):
    return CACHE.get(x) * 2

def init():
    hw.ready("worker")

if __name__ == "__main__":
    threading.Thread(target=CACHE.refresh_forever, daemon=True).start()
    time.sleep(0.3)
    with mp.get_context("fork").Pool(2, initializer=init) as pool:   # forks while the lock is held
        hw.ready("parent")
        print(pool.map(task, range(8)))
