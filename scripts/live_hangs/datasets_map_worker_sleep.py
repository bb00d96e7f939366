# Expected cause id per role (the first role is the primary one: Ctrl-C, gdb, --json);
# alternatives are joined by ' | '. Read by scripts/bench_replay_live.py without importing.
EXPECTED = {"worker": "sleep", "parent": "queue-wait | future-wait | child-process-wait"}

import time
import hw
from datasets import Dataset

def annotate(ex):
    if ex["i"] == 0:
        hw.ready("worker")
        for _ in range(280):
            time.sleep(0.5)                  # rate-limited API: retry loop never succeeds
    return {"j": ex["i"] * 2}

if __name__ == "__main__":
    ds = Dataset.from_dict({"i": list(range(8))})
    hw.ready("parent")
    ds.map(annotate, num_proc=2)
