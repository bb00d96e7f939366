# Expected cause id per role (the first role is the primary one: Ctrl-C, gdb, --json);
# alternatives are joined by ' | '. Read by scripts/bench_replay_live.py without importing.
EXPECTED = {"main": "checkpoint-write"}

import os, torch, multiprocessing as mp, time
import hw
PATH = hw.path("ckpt.pt")     # checkpoint path on a "filesystem" that stops draining

def slow_reader():
    f = open(PATH, "rb")               # opens but never reads
    time.sleep(140)

if __name__ == "__main__":
    if os.path.exists(PATH): os.remove(PATH)
    os.mkfifo(PATH)
    p = mp.Process(target=slow_reader); p.start()
    model = torch.nn.Linear(512, 512)
    hw.ready()
    torch.save({"model": model.state_dict(), "step": 100}, PATH)
