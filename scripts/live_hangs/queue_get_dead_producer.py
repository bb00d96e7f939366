# Expected cause id per role (the first role is the primary one: Ctrl-C, gdb, --json);
# alternatives are joined by ' | '. Read by scripts/bench_replay_live.py without importing.
EXPECTED = {"main": "queue-wait"}
PYSPY_JSON = True

import queue, threading
import hw

def producer(q):
    for i in range(3):
        q.put(i)
    raise RuntimeError("producer died")      # dies silently in its thread

def main():
    q = queue.Queue(maxsize=8)
    threading.Thread(target=producer, args=(q,), daemon=True).start()
    hw.ready()
    while True:
        item = q.get(timeout=140)
        print("got", item, flush=True)

main()
