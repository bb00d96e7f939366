"""How hangwatch starts its own helper processes (guardian, engine worker).

``python -P -m hangwatch...``: ``-P`` keeps the working directory off
``sys.path``, so a ``hangwatch/`` folder (or anything else) in the user's
working directory cannot stand in for our module, and the helper runs the
installed hangwatch or nothing.
"""

from __future__ import annotations

import sys


def module_command(module: str, python: str | None = None, *flags: str) -> list[str]:
    return [python or sys.executable, "-P", *flags, "-m", module]
