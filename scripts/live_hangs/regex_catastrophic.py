# Expected cause id per role (the first role is the primary one: Ctrl-C, gdb, --json);
# alternatives are joined by ' | '. Read by scripts/bench_replay_live.py without importing.
EXPECTED = {"main": "other:catastrophic-regex"}
GDB = True

import re
import hw
EMAIL = re.compile(r"^([a-zA-Z0-9]+)*@example\.com$")
hw.ready()
for line in ["a" * 40 + "!"]:
    EMAIL.match(line)                        # catastrophic backtracking, holds the GIL
