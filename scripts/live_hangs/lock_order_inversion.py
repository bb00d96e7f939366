# Expected cause id per role (the first role is the primary one: Ctrl-C, gdb, --json);
# alternatives are joined by ' | '. Read by scripts/bench_replay_live.py without importing.
EXPECTED = {"main": "lock-wait"}
GDB = True

import threading, time
import hw
a, b = threading.Lock(), threading.Lock()

def transfer_ab():
    with a:
        time.sleep(0.2)
        with b: pass

def transfer_ba():
    with b:
        time.sleep(0.2)
        with a: pass

t1 = threading.Thread(target=transfer_ab, name="t-ab", daemon=True)
t2 = threading.Thread(target=transfer_ba, name="t-ba", daemon=True)
t1.start(); t2.start()
hw.ready()
t1.join(140); t2.join(140)
