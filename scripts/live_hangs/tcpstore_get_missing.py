# Expected cause id per role (the first role is the primary one: Ctrl-C, gdb, --json);
# alternatives are joined by ' | '. Read by scripts/bench_replay_live.py without importing.
EXPECTED = {"main": "store-wait"}
PYSPY_JSON = True

import datetime
import hw
from torch.distributed import TCPStore
store = TCPStore("127.0.0.1", hw.free_port(), world_size=1, is_master=True, timeout=datetime.timedelta(seconds=140))
store.set("config", "ok")
hw.ready()
master_addr = store.get("trainer/master_addr")   # nobody ever sets this key
