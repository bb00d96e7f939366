# Expected cause id per role (the first role is the primary one: Ctrl-C, gdb, --json);
# alternatives are joined by ' | '. Read by scripts/bench_replay_live.py without importing.
EXPECTED = {"rank1": "nccl-collective-wait", "rank0": "nccl-collective-wait"}
PYSPY_JSON = True

import os, datetime
import hw
import torch, torch.distributed as dist, torch.multiprocessing as mp

def worker(rank, port):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2, timeout=datetime.timedelta(seconds=140))
    if rank == 0:
        hw.ready("rank0")
        objs = [{"step": 1}]
        dist.broadcast_object_list(objs, src=0)        # rank 0 broadcasts metadata ...
    else:
        hw.ready("rank1")
        t = torch.zeros(3)
        dist.all_reduce(t)                             # ... rank 1 went straight to all_reduce (mismatch)
    dist.barrier()

if __name__ == "__main__":
    mp.start_processes(worker, args=(hw.free_port(),), nprocs=2, start_method="fork")
