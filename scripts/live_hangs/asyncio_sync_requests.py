# Expected cause id per role (the first role is the primary one: Ctrl-C, gdb, --json);
# alternatives are joined by ' | '. Read by scripts/bench_replay_live.py without importing.
EXPECTED = {"main": "socket-read"}

import asyncio, requests
import hw
port = hw.silent_server()

async def handler():
    # a blocking HTTP call inside a coroutine: the whole loop stalls
    r = requests.get(f"http://127.0.0.1:{port}/v1/models", timeout=140)
    return r.status_code

async def main():
    hw.ready()
    await asyncio.gather(handler(), asyncio.sleep(1))

asyncio.run(main())
