# Expected cause id per role (the first role is the primary one: Ctrl-C, gdb, --json);
# alternatives are joined by ' | '. Read by scripts/bench_replay_live.py without importing.
EXPECTED = {"main": "dataloader-wait", "stuck": "dataloader-worker-stuck | socket-read", "idle": "dataloader-worker-idle"}
TREE = "dataloader-wait | dataloader-worker-stuck"   # py-spy dump --subprocesses of the whole tree
GDB = True

import socket, time
import torch
from torch.utils.data import Dataset, DataLoader, get_worker_info
import hw
PORT = hw.silent_server()

class RemoteShards(Dataset):
    def __len__(self): return 64
    def __getitem__(self, idx):
        if idx == 0:
            hw.ready("stuck")
            s = socket.create_connection(("127.0.0.1", PORT))
            s.sendall(b"GET shard-0\n")
            s.settimeout(140)
            data = s.recv(1 << 16)           # storage server never answers
        return torch.tensor([idx])

def winit(wid):
    if wid == 1:
        hw.ready("idle")

if __name__ == "__main__":
    dl = DataLoader(RemoteShards(), batch_size=1, num_workers=2, worker_init_fn=winit, timeout=140)
    hw.ready("main")
    for batch in dl:
        pass
