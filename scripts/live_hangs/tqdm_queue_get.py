# Expected cause id per role (the first role is the primary one: Ctrl-C, gdb, --json);
# alternatives are joined by ' | '. Read by scripts/bench_replay_live.py without importing.
EXPECTED = {"main": "queue-wait"}

import queue, threading, time
from tqdm import tqdm
import hw
results = queue.Queue()

def worker():
    for i in range(5):
        results.put(i)
    # crashes before the rest: nothing else is put

threading.Thread(target=worker, daemon=True).start()
bar = tqdm(total=20, mininterval=0.1)
time.sleep(0.2)
hw.ready()
for _ in range(20):
    results.get(timeout=140)
    bar.update(1)
