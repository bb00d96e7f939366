# Expected cause id per role (the first role is the primary one: Ctrl-C, gdb, --json);
# alternatives are joined by ' | '. Read by scripts/bench_replay_live.py without importing.
EXPECTED = {"main": "queue-wait"}

import threading
import hw
from transformers import TextIteratorStreamer

class Tok:                                   # stand-in tokenizer object (no download)
    def decode(self, ids, **kw): return "x"

streamer = TextIteratorStreamer(Tok(), skip_prompt=True, timeout=140)

def generate():
    raise RuntimeError("CUDA out of memory")  # the generate thread dies before producing anything

threading.Thread(target=generate, daemon=True).start()
hw.ready()
for text in streamer:
    print(text, end="")
