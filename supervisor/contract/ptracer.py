"""Declaring the supervisor our ptracer: Yama's ``prctl(PR_SET_PTRACER, pid)``.

Under ``kernel.yama.ptrace_scope=1`` (Ubuntu's default) a process may trace only its
descendants. The supervisor's py-spy is the supervisor's child, a sibling of the
trainer's processes, not an ancestor, so it is refused. A process can name one
process that may trace it anyway (with all of that process's descendants):
``PR_SET_PTRACER``. The launch does it for the trainer's root between fork and exec
(``supervisor.contain.launcher.child_setup``); every process that imports
``hangwatch.trainer``, and the engine worker, does it for itself with the
supervisor's pid from ``HANGWATCH_SUPERVISOR_PID`` (the declaration is not inherited
by a fork's child, which redeclares it: ``contract.stackdump``).

Where Yama is absent the call fails with ``EINVAL``, harmlessly: nothing then stops a
same-user tracer. Scope 2 (admin only) and 3 (none) ignore the declaration; there the
in-process stacks (``contract.stackdump``) are the evidence.

Standard library only (``hangwatch.trainer`` imports it at import time).
"""

from __future__ import annotations

import ctypes
import os
from typing import Callable, Mapping

from hangwatch.contract.env import SUPERVISOR_PID

#: ``'Yama'`` in ASCII, as <linux/prctl.h> spells it.
PR_SET_PTRACER = 0x59616D61

#: ``prctl(option, arg2, arg3, arg4, arg5) -> int`` (libc's, or a test's): 0 or -1 with errno set.
Prctl = Callable[[int, int, int, int, int], int]

_libc: ctypes.CDLL | None = None


def _libc_prctl() -> tuple[Prctl, Callable[[], int]]:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    return _libc.prctl, ctypes.get_errno


def declare_ptracer(tracer_pid: int, *, prctl: Prctl | None = None, errno_of: Callable[[], int] | None = None) -> int:
    """Let ``tracer_pid`` (and its descendants) ptrace this process; 0 on success, else the
    errno (``EINVAL`` where Yama is absent). Never raises for the kernel's answer."""
    if prctl is None:
        try:
            prctl, default_errno = _libc_prctl()
        except OSError as exc:  # no C library to load (not Linux): nothing to declare
            return exc.errno or -1
        errno_of = errno_of or default_errno
    if prctl(PR_SET_PTRACER, int(tracer_pid), 0, 0, 0) == 0:
        return 0
    return errno_of() if errno_of is not None else -1


def supervisor_pid(environ: Mapping[str, str]) -> int | None:
    """The supervisor's pid from the attempt's environment; None outside hangwatch or when malformed."""
    text = environ.get(SUPERVISOR_PID, "")
    return int(text) if text.isdigit() and int(text) > 1 else None


def declare_supervisor(environ: Mapping[str, str] | None = None, *, prctl: Prctl | None = None,
                       errno_of: Callable[[], int] | None = None) -> int | None:
    """``declare_ptracer`` for the supervisor named in ``environ`` (``os.environ``); None when
    this process does not run under hangwatch."""
    pid = supervisor_pid(os.environ if environ is None else environ)
    return None if pid is None else declare_ptracer(pid, prctl=prctl, errno_of=errno_of)
