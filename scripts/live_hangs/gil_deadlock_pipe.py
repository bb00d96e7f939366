# Expected cause id per role (the first role is the primary one: Ctrl-C, gdb, --json);
# alternatives are joined by ' | '. Read by scripts/bench_replay_live.py without importing.
EXPECTED = {"main": "gil-deadlock"}
GDB = True

import ctypes, os, threading, time
import hw
r, w = os.pipe()
libc = ctypes.PyDLL(None)                   # PyDLL: calls keep the GIL held

def notifier():
    time.sleep(1.0)                          # when it wakes up it needs the GIL ...
    os.write(w, b"x")

threading.Thread(target=notifier, name="notifier", daemon=True).start()
hw.ready()
buf = ctypes.create_string_buffer(1)
libc.read(r, buf, 1)                         # ... which this blocking read holds: GIL deadlock
