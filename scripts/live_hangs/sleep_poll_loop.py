# Expected cause id per role (the first role is the primary one: Ctrl-C, gdb, --json);
# alternatives are joined by ' | '. Read by scripts/bench_replay_live.py without importing.
EXPECTED = {"main": "sleep"}

import os, time
import hw

def wait_for_checkpoint(path, interval=1.0):
    while not os.path.exists(path):
        time.sleep(interval)

hw.ready()
wait_for_checkpoint(hw.path("never/checkpoint-100/done"))
