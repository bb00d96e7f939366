# Expected cause id per role (the first role is the primary one: Ctrl-C, gdb, --json);
# alternatives are joined by ' | '. Read by scripts/bench_replay_live.py without importing.
EXPECTED = {"main": "extension-build-lock"}
PYSPY_JSON = True

import os
import hw
from torch.utils import cpp_extension
d = hw.path("ext_build"); os.makedirs(d, exist_ok=True)
src = os.path.join(d, "fused_op.cpp")
open(src, "w").write("#include <torch/extension.h>\nint f(){return 1;}\nPYBIND11_MODULE(TORCH_EXTENSION_NAME, m){m.def(\"f\", &f);}\n")
open(os.path.join(d, "lock"), "w").close()    # stale lock left by a killed build
hw.ready()
mod = cpp_extension.load(name="fused_op", sources=[src], build_directory=d, verbose=True)
