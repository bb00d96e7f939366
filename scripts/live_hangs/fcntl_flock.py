# Expected cause id per role (the first role is the primary one: Ctrl-C, gdb, --json);
# alternatives are joined by ' | '. Read by scripts/bench_replay_live.py without importing.
EXPECTED = {"main": "file-lock-wait"}
GDB = True

import fcntl, os, time, multiprocessing as mp
import hw
PATH = hw.path("shard.lock")

def holder(ev):
    fd = os.open(PATH, os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    ev.set(); time.sleep(140)

def open_exclusive(path):
    fd = os.open(path, os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)          # blocks: another process holds it
    return fd

if __name__ == "__main__":
    ev = mp.Event()
    p = mp.Process(target=holder, args=(ev,)); p.start(); ev.wait(30)
    hw.ready()
    open_exclusive(PATH)
