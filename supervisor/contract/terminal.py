"""Text for a terminal: control characters made visible.

Journals, heartbeats and bundles carry text the trainer (or whoever sent a bundle)
chose: a thread name, a phase, a log line. An escape sequence in it could retitle
the window, hide lines or worse once printed raw, so everything hangwatch prints
from such sources goes through ``terminal_safe``.
"""

from __future__ import annotations

import re

# C0 controls but tab and newline, DEL, and C1 controls (0x9b is a one-byte CSI); and lone
# surrogates: a byte that was not UTF-8 in a name the trainer's user chose (a checkpoint folder
# ``checkpoint-5\xff``) is one in Python, and a UTF-8 terminal's stdout (strict outside the C
# locale) refused it: `hangwatch status` of that run was an internal error, exit 70.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]")


def _shown(char: str) -> str:
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def terminal_safe(text: str) -> str:
    return _CONTROL.sub(lambda m: _shown(m.group(0)), text)


def one_line(text: str) -> str:
    """``terminal_safe`` for a field of a line-per-record text file: a newline or tab the
    source chose (a process's own command line, a thread's name) must not forge a record."""
    return terminal_safe(text).replace("\n", "\\n").replace("\t", "\\t")
