# Expected cause id per role (the first role is the primary one: Ctrl-C, gdb, --json);
# alternatives are joined by ' | '. Read by scripts/bench_replay_live.py without importing.
EXPECTED = {"worker": "pool-worker-idle", "parent": "sleep"}

import multiprocessing as mp, time
import hw

def sq(x): return x * x

def init(): hw.ready("worker")

if __name__ == "__main__":
    with mp.Pool(2, initializer=init) as pool:
        print(pool.map(sq, range(4)))
        hw.ready("parent")
        for _ in range(280):                 # parent does other work; workers idle
            time.sleep(0.5)
