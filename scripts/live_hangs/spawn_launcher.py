# Expected cause id per role (the first role is the primary one: Ctrl-C, gdb, --json);
# alternatives are joined by ' | '. Read by scripts/bench_replay_live.py without importing.
EXPECTED = {"parent": "spawn-launcher-wait", "rank0": "nccl-collective-wait"}
TREE = "nccl-collective-wait | event-wait"   # py-spy dump --subprocesses of the whole tree
WAIT_FOR = ["rank1"]   # roles that must be ready too, not dumped

import os, datetime, threading
import hw
import torch, torch.distributed as dist, torch.multiprocessing as mp

def worker(rank, port):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2, timeout=datetime.timedelta(seconds=140))
    if rank == 0:
        hw.ready("rank0")
        dist.barrier()
    else:
        hw.ready("rank1")
        threading.Event().wait(140)          # rank 1 waits for something else
        dist.barrier()

if __name__ == "__main__":
    hw.ready("parent")
    mp.spawn(worker, args=(hw.free_port(),), nprocs=2)
