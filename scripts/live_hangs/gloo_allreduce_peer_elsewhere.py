# Expected cause id per role (the first role is the primary one: Ctrl-C, gdb, --json);
# alternatives are joined by ' | '. Read by scripts/bench_replay_live.py without importing.
EXPECTED = {"rank0": "nccl-collective-wait", "rank1": "sleep"}
TREE = "nccl-collective-wait | sleep"   # py-spy dump --subprocesses of the whole tree
GDB = True

import os, time, datetime
import hw
import torch, torch.distributed as dist, torch.multiprocessing as mp

def worker(rank, port):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2, timeout=datetime.timedelta(seconds=140))
    t = torch.ones(8)
    dist.all_reduce(t)                      # first step fine
    if rank == 0:
        hw.ready("rank0")
        dist.all_reduce(t)                  # rank 1 never arrives
    else:
        hw.ready("rank1")
        while not os.path.exists(hw.path("never-appears")):   # rank 1 polls for a file
            time.sleep(0.5)
        dist.all_reduce(t)

if __name__ == "__main__":
    mp.start_processes(worker, args=(hw.free_port(),), nprocs=2, start_method="fork")
