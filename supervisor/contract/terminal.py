"""Text for a terminal: control characters made visible.

Journals, heartbeats and bundles carry text the trainer (or whoever sent a bundle)
chose: a thread name, a phase, a log line. An escape sequence in it could retitle
the window, hide lines or worse once printed raw, so everything hangwatch prints
from such sources goes through ``terminal_safe``.
"""

from __future__ import annotations

import re

# C0 controls but tab and newline, DEL, and C1 controls (0x9b is a one-byte CSI).
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def terminal_safe(text: str) -> str:
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group(0)):02x}", text)


def one_line(text: str) -> str:
    """``terminal_safe`` for a field of a line-per-record text file: a newline or tab the
    source chose (a process's own command line, a thread's name) must not forge a record."""
    return terminal_safe(text).replace("\n", "\\n").replace("\t", "\\t")
