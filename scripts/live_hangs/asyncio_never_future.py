# Expected cause id per role (the first role is the primary one: Ctrl-C, gdb, --json);
# alternatives are joined by ' | '. Read by scripts/bench_replay_live.py without importing.
EXPECTED = {"main": "asyncio-blocked | event-loop-idle"}
PYSPY_JSON = True

import asyncio
import hw

async def wait_reply(pending):
    return await pending

async def main():
    loop = asyncio.get_running_loop()
    pending = loop.create_future()           # nobody ever sets its result
    hw.ready()
    await asyncio.wait_for(wait_reply(pending), timeout=140)

asyncio.run(main())
