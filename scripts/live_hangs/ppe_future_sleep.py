# Expected cause id per role (the first role is the primary one: Ctrl-C, gdb, --json);
# alternatives are joined by ' | '. Read by scripts/bench_replay_live.py without importing.
EXPECTED = {"parent": "future-wait", "worker": "sleep"}
TREE = "future-wait | sleep"   # py-spy dump --subprocesses of the whole tree

import time
from concurrent.futures import ProcessPoolExecutor
import hw

def slow_job(x):
    hw.ready("worker")
    for _ in range(280):
        time.sleep(0.5)                     # worker stuck in a sleep-retry loop
    return x

if __name__ == "__main__":
    with ProcessPoolExecutor(2) as ex:
        fut = ex.submit(slow_job, 1)
        hw.ready("parent")
        print(fut.result(timeout=140))
