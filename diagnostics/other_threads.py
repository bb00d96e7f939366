"""Which other thread of a process explains a thread's wait. Pure.

A thread that joins another thread or waits for its event waits on what that thread
waits on; a lock acquire that native frames alone show may be any Python wait. Given the
deciding thread and the process's other (non-helper) threads, each function here names
the thread whose own wait is the better verdict, or None:

* ``lock_waiter``: a thread waiting on a lock (a join on a thread stuck in a lock-order
  deadlock);
* ``main_waits_elsewhere``: the main thread's own wait, when a thread the program started
  waits for it (a test runner's receiver, a pool's result thread);
* ``outside_waiter``: a thread blocked outside the process (a read, a child, a file lock).

``classify`` calls them; each returns ``(thread, frozen, signature, evidence)``.
"""

from __future__ import annotations

import re
from typing import Sequence

from hangwatch.diagnostics.signatures import Signature
from hangwatch.diagnostics.stacks import ThreadDump
from hangwatch.diagnostics.thread_roles import is_main
from hangwatch.diagnostics.waits import family_signature, guessed_wait, named_family, refine, wait_of

#: A thread that waits for another thread of its process to end or to signal it: the other
#: thread's wait is the cause.
WAITS_ON_A_THREAD = frozenset(("thread-join", "event-wait"))
#: Waits on a lock of some kind: held by a thread that will not release it.
_LOCK_WAITS = frozenset(("lock-wait", "import-lock", "gil-deadlock", "file-lock-wait", "fork-inherited-lock"))


def lock_waiter(t: ThreadDump, found: list, workers: list, signatures: Sequence[Signature]) -> tuple | None:
    """Another thread of the process that waits on a lock, when ``t`` joins a thread or
    waits for an event (a join on a thread stuck in a lock-order deadlock, an event whose
    setter waits for the import lock): that lock wait is why ``t`` waits. None when no
    other thread waits on a lock."""
    for x in found:
        if x[0] is not t and refine(x[2], x[0], signatures).id in _LOCK_WAITS:
            return x[0], x[1], refine(x[2], x[0], signatures), x[3]
    for other, frozen, _facts in workers:
        if other is t:
            continue
        w = wait_of(other)
        if w is not None and not w.weak and w.category in _LOCK_WAITS:
            return other, frozen, family_signature(w.category, signatures), other.telling_frames() or w.frames
    return None


def outside_waiter(t: ThreadDump, workers: list, signatures: Sequence[Signature]) -> tuple | None:
    """Another thread blocked outside the process (a socket, a child, a file lock), when
    ``t`` joins a thread or waits for an event: what the join waits for (a collector
    thread in a read the main thread joins). A sleeping thread is no answer (a poller, a
    heartbeat)."""
    for other, frozen, facts in workers:
        if other is t or facts.stalls:
            continue
        w = wait_of(other)
        if (w is not None and not w.weak and w.category in OUTSIDE and w.category != "sleep"
                and not any(_SERVER_IDLE.search(f.function) for f in w.frames)):
            return other, frozen, family_signature(w.category, signatures), other.telling_frames() or w.frames
    return None


#: A server's idle wait for its next client or event (a listening accept, a poll loop): no
#: thread joins on it.
_SERVER_IDLE = re.compile(r"(^|\.)(accept|select|poll|_poll|epoll\w*|serve\w*|_run_once|run_forever|handle_request)$")


#: Waits on something outside the process: a peer, a device, a child, a file, the clock.
OUTSIDE = frozenset(("socket-read", "subprocess-wait", "file-lock-wait", "store-wait", "cuda-synchronize-wait",
                      "nccl-collective-wait", "sleep"))


def main_waits_elsewhere(t: ThreadDump, workers: list, pid: int | None, signatures: Sequence[Signature],
                          only: frozenset[str] | None = None) -> tuple | None:
    """The main thread's own wait, when ``t``, a thread the program started, waits for
    another thread (an event, a join) and the main thread waits on something else, even
    only by its frames' names (a client's ``_connect`` cut above its socket call): a
    background thread waiting for the work the main thread runs (a test runner's
    receiver, a pool's result thread) waits on what the main thread waits on. ``only``:
    the families the main thread's wait must be in (shown, not guessed)."""
    if is_main(t, pid):
        return None
    for other, frozen, facts in workers:
        if other is t or not is_main(other, pid) or facts.stalls:
            continue
        w = guessed_wait(other)
        if w is None or w.weak or w.category in WAITS_ON_A_THREAD or (only is not None and (w.by_name or w.category not in only)):
            return None
        sig = named_family(w, signatures) if w.by_name else family_signature(w.category, signatures)
        return other, frozen, sig, other.telling_frames() or w.frames
    return None
