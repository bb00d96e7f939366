# Expected cause id per role (the first role is the primary one: Ctrl-C, gdb, --json);
# alternatives are joined by ' | '. Read by scripts/bench_replay_live.py without importing.
EXPECTED = {"child": "shutdown-join", "parent": "child-process-wait | subprocess-wait"}
TREE = "child-process-wait | subprocess-wait | shutdown-join"   # py-spy dump --subprocesses of the whole tree

import multiprocessing as mp
import hw

def child(q):
    q.put(b"x" * (16 * 1024 * 1024))        # large result: the feeder thread blocks on the pipe
    hw.ready("child")

if __name__ == "__main__":
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=child, args=(q,))
    p.start()
    hw.ready("parent")
    p.join(timeout=140)                      # joins before reading: classic deadlock
    print(len(q.get()))
