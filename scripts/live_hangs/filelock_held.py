# Expected cause id per role (the first role is the primary one: Ctrl-C, gdb, --json);
# alternatives are joined by ' | '. Read by scripts/bench_replay_live.py without importing.
EXPECTED = {"main": "file-lock-wait"}

import multiprocessing as mp, time, os
import hw
from filelock import FileLock
PATH = hw.path("cache.lock")

def holder(ev):
    with FileLock(PATH):
        ev.set()
        time.sleep(140)

if __name__ == "__main__":
    ev = mp.Event()
    p = mp.Process(target=holder, args=(ev,)); p.start(); ev.wait(30)
    hw.ready()
    with FileLock(PATH, timeout=140):
        print("got it")
