# Expected cause id per role (the first role is the primary one: Ctrl-C, gdb, --json);
# alternatives are joined by ' | '. Read by scripts/bench_replay_live.py without importing.
EXPECTED = {"main": "lock-wait | asyncio-blocked"}

import asyncio, threading
import hw
lock = threading.Lock(); lock.acquire()

def blocking_io():
    with lock:                               # never released
        return 1

async def main():
    loop = asyncio.get_running_loop()
    hw.ready()
    await asyncio.wait_for(loop.run_in_executor(None, blocking_io), timeout=140)

asyncio.run(main())
