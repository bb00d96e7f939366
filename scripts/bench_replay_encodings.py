#!/usr/bin/env python3
"""How replay's verdicts on the corpus of real pasted dumps hold when each paste arrives
re-encoded (Windows line ends, colours, a JSON record, no-break spaces, curly quotes,
re-wrapped lines, a timestamp before every line...): one line per encoding,
``encoding=NAME kept=K of=N``, N the known-cause dumps replay names right as pasted.

    .venv/bin/python scripts/bench_replay_encodings.py [--show N]
"""

import sys

from hangwatch.diagnostics.reencode import main

if __name__ == "__main__":
    sys.exit(main())
