# Expected cause id per role (the first role is the primary one: Ctrl-C, gdb, --json);
# alternatives are joined by ' | '. Read by scripts/bench_replay_live.py without importing.
EXPECTED = {"agent": "torchrun-agent-monitor", "rank0": "nccl-collective-wait"}
TREE = "nccl-collective-wait | sleep"   # py-spy dump --subprocesses of the whole tree
WAIT_FOR = ["rank1"]   # roles that must be ready too, not dumped
LAUNCHER = ["torchrun", "--nproc_per_node=2", "--standalone"]

import os, time, datetime
import hw
import torch, torch.distributed as dist
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=140))
rank = dist.get_rank()
t = torch.ones(4)
if rank == 0:
    hw.ready("agent", pid=os.getppid(), arm_fh=False)
    hw.ready("rank0")
    dist.all_reduce(t)
else:
    hw.ready("rank1")
    for _ in range(280):
        time.sleep(0.5)                      # rank 1 stuck in a retry loop
    dist.all_reduce(t)
