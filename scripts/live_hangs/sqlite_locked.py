# Expected cause id per role (the first role is the primary one: Ctrl-C, gdb, --json);
# alternatives are joined by ' | '. Read by scripts/bench_replay_live.py without importing.
EXPECTED = {"main": "file-lock-wait"}
GDB = True

import sqlite3, multiprocessing as mp, time
import hw
DB = hw.path("runs.db")

def holder(ev):
    c = sqlite3.connect(DB, isolation_level=None)
    c.execute("BEGIN EXCLUSIVE"); c.execute("INSERT INTO t VALUES (1)")
    ev.set(); time.sleep(140)

if __name__ == "__main__":
    c = sqlite3.connect(DB); c.execute("CREATE TABLE IF NOT EXISTS t (x)"); c.commit(); c.close()
    ev = mp.Event(); p = mp.Process(target=holder, args=(ev,)); p.start(); ev.wait(30)
    conn = sqlite3.connect(DB, timeout=140)
    hw.ready()
    conn.execute("INSERT INTO t VALUES (2)")   # busy handler waits for the lock
    conn.commit()
