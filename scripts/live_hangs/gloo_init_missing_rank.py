# Expected cause id per role (the first role is the primary one: Ctrl-C, gdb, --json);
# alternatives are joined by ' | '. Read by scripts/bench_replay_live.py without importing.
EXPECTED = {"main": "nccl-comm-init | store-wait"}
GDB = True

import os, datetime
import hw
import torch.distributed as dist
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(hw.free_port()), RANK="0", WORLD_SIZE="2")
hw.ready()
# rank 1 was never launched
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=140))
