# Expected cause id per role (the first role is the primary one: Ctrl-C, gdb, --json);
# alternatives are joined by ' | '. Read by scripts/bench_replay_live.py without importing.
EXPECTED = {"main": "subprocess-wait | child-process-wait"}
GDB = True

import subprocess, sys
import hw
p = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdout.write('x' * 2000000); sys.stdout.flush()"],
                     stdout=subprocess.PIPE)
hw.ready()
p.wait(timeout=140)                          # never reads stdout: the child blocks on a full pipe
out = p.stdout.read()
