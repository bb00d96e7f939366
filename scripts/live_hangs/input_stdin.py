# Expected cause id per role (the first role is the primary one: Ctrl-C, gdb, --json);
# alternatives are joined by ' | '. Read by scripts/bench_replay_live.py without importing.
EXPECTED = {"main": "socket-read"}

import hw
hw.ready()
answer = input("Overwrite existing output dir? [y/N] ")
