# Expected cause id per role (the first role is the primary one: Ctrl-C, gdb, --json);
# alternatives are joined by ' | '. Read by scripts/bench_replay_live.py without importing.
EXPECTED = {"parent": "subprocess-wait | child-process-wait", "child": "socket-read"}
TREE = "subprocess-wait | child-process-wait | socket-read"   # py-spy dump --subprocesses of the whole tree

import subprocess, sys, os
import hw
hw.ready("parent")
# the child reads its stdin, inherited from us, which never closes
subprocess.run([sys.executable, os.path.join(os.path.dirname(__file__), "ask_user.py")], timeout=140, check=True)
