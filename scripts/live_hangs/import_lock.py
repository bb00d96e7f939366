# Expected cause id per role (the first role is the primary one: Ctrl-C, gdb, --json);
# alternatives are joined by ' | '. Read by scripts/bench_replay_live.py without importing.
EXPECTED = {"main": "import-lock | event-wait"}

import threading, sys, os
import hw
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "mods"))

def bg():
    import slow_plugin                        # its top level blocks, holding the module lock

threading.Thread(target=bg, name="plugin-loader", daemon=True).start()
import time; time.sleep(0.5)
hw.ready()
import slow_plugin                            # blocks on the per-module import lock
