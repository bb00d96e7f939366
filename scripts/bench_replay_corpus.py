#!/usr/bin/env python3
"""Replay's accuracy on the corpus of real pasted dumps (tests/diagnostics/data/pasted/).

Last line: ``dumps=N parsed=P known_cause=K right=R``. Options as for
``python -m hangwatch.diagnostics.corpus`` (``--subset tuning|heldout``, ``-v``).

    .venv/bin/python scripts/bench_replay_corpus.py [-v] [--subset heldout]
"""

import sys

from hangwatch.diagnostics.corpus import main

if __name__ == "__main__":
    sys.exit(main())
