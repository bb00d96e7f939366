"""The cohort's store as a node uses it: every failure noted, every record sealed and every value read bounded.

``WatchedStore`` wraps the store client: it notes when its calls began failing, whichever
thread made them; it seals what this node writes and opens what it reads (``values.Sealer``:
the one bounded reader of every store value, and the MAC when the job has a secret), so a
value no node wrote reads as absent and is reported once per key (``on_ignored``); and once
the store is judged lost (``cut``) it makes no further call, each failing at once.
"""

from __future__ import annotations

import threading
from typing import Any, Callable

from hangwatch.supervisor.cohort.store import Store, StoreError
from hangwatch.supervisor.cohort.values import BadValue, Sealer


class WatchedStore:
    """The cohort's store, noting when its calls began failing, whichever thread made them.

    The store client serves one call at a time, each with a deadline of a third of the lease.
    While the store did not answer (node 0's host cut off, a frozen helper), the main loop's
    poll at every tick, late and so without a sleep between ticks, took the client back at
    once, and the lease thread, the one that judged a failing store lost, waited its turn:
    a real node whose helper was frozen for 30 s under an 8 s lease was never taken for cut
    off (its node 0 had given it up at 8 s); it stopped only once the store answered again.
    Every call now says when the store was seen failing, so the lease is judged on all of them.
    From when the failure was seen, not when the call began: a call in flight while this node was
    not running (SIGSTOP, a job suspended as a whole) fails once it is continued, its deadline
    passed in the pause, though the store answers the next call; counted from its start, the
    pause alone was a lease of failure, and the node was taken for cut off.
    """

    def __init__(self, store: Store, clock: Callable[[], float], sealer: Sealer | None = None) -> None:
        self.inner, self.clock = store, clock
        self.sealer = sealer or Sealer(None)
        self.failing_since: float | None = None
        #: when a call was last seen failing: the streak is as long as what was seen of it (a job
        #: suspended after one miss, with no call in flight, saw no failure in the pause)
        self.failed_at: float | None = None
        #: the store was judged lost: no call goes out any more (each would wait for its deadline)
        self.cut = False
        #: told (key, why) the first time a key's value is ignored (not one a node of this job wrote)
        self.on_ignored: Callable[[str, str], None] | None = None
        self.ignored: dict[str, str] = {}
        self._ignored_lock = threading.Lock()

    def _do(self, call: Callable[..., Any], *args: Any) -> Any:
        if self.cut:
            raise StoreError("the cohort store was judged lost: no further calls")
        began = self.clock()
        try:
            result = call(*args)
        except StoreError:
            self.failed_at = self.clock()
            if self.failing_since is None:
                # From the call's start when it failed within its own deadline (the store did not answer
                # from then on): counted from when the failure was seen, a partition was judged a third
                # of the lease late (the first call's deadline). A call that took longer than its
                # deadline waited for the client, or spanned a pause: counted from when it was seen.
                bound = getattr(self.inner, "timeout", None)
                prompt = isinstance(bound, (int, float)) and self.failed_at - began <= bound + 0.5
                self.failing_since = began if prompt else self.failed_at
            raise
        self.failing_since = None  # it answered
        return result

    def _open(self, key: str, raw: str | None) -> str | None:
        """The record's JSON text, or None: none there, or one no node of this job wrote (reported once)."""
        if raw is None:
            return None
        try:
            return self.sealer.unseal(key, raw)
        except BadValue as exc:
            self._report(key, exc.why)
            return None

    def _report(self, key: str, why: str) -> None:
        with self._ignored_lock:
            if key in self.ignored:
                return
            if len(self.ignored) < 1000:
                self.ignored[key] = why
        if self.on_ignored is not None:
            try:
                self.on_ignored(key, why)
            except Exception:  # noqa: BLE001  (a report that cannot be written must not stop a read)
                pass

    def set(self, key: str, value: str) -> None:
        self._do(self.inner.set, key, self.sealer.seal_text(key, value))

    def get(self, key: str) -> str | None:
        return self._open(key, self._do(self.inner.get, key))

    def add(self, key: str, amount: int = 1) -> int:
        return self._do(self.inner.add, key, amount)

    def compare_set(self, key: str, expected: str, desired: str) -> str:
        """First writer wins; a value under ``key`` that no node of this job wrote is no writer: ours
        replaces it (a stranger's record in every attempt's incident key must not silence them)."""
        sealed = self.sealer.seal_text(key, desired)
        stored = self._do(self.inner.compare_set, key, self.sealer.seal_text(key, expected) if expected else "", sealed)
        if stored == sealed:
            return desired
        opened = self._open(key, stored)
        if opened is None:
            self._do(self.inner.set, key, sealed)
            return desired
        return opened

    def close(self, wait: bool = True) -> None:
        """Close the client; ``wait=False`` (the store is lost): its helper is killed, not waited for."""
        if not wait and hasattr(self.inner, "kill"):
            self.inner.kill()
        self.inner.close()
