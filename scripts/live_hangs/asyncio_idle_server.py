# Expected cause id per role (the first role is the primary one: Ctrl-C, gdb, --json);
# alternatives are joined by ' | '. Read by scripts/bench_replay_live.py without importing.
EXPECTED = {"main": "event-loop-idle | asyncio-blocked | all-idle"}

import asyncio
import hw

async def handle(reader, writer):
    writer.write(await reader.readline()); await writer.drain(); writer.close()

async def main():
    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    hw.ready()
    async with server:
        await asyncio.wait_for(server.serve_forever(), timeout=140)

asyncio.run(main())
