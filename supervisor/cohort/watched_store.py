"""The cohort's store, noting when its calls began failing, whichever thread made them (``WatchedStore``)."""

from __future__ import annotations

from typing import Any, Callable

from hangwatch.supervisor.cohort.store import Store, StoreError


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

    def __init__(self, store: Store, clock: Callable[[], float]) -> None:
        self.inner, self.clock = store, clock
        self.failing_since: float | None = None
        #: when a call was last seen failing: the streak is as long as what was seen of it (a job
        #: suspended after one miss, with no call in flight, saw no failure in the pause)
        self.failed_at: float | None = None

    def _do(self, call: Callable[..., Any], *args: Any) -> Any:
        try:
            result = call(*args)
        except StoreError:
            self.failed_at = self.clock()
            if self.failing_since is None:
                self.failing_since = self.failed_at
            raise
        self.failing_since = None  # it answered
        return result

    def set(self, key: str, value: str) -> None:
        self._do(self.inner.set, key, value)

    def get(self, key: str) -> str | None:
        return self._do(self.inner.get, key)

    def add(self, key: str, amount: int = 1) -> int:
        return self._do(self.inner.add, key, amount)

    def compare_set(self, key: str, expected: str, desired: str) -> str:
        return self._do(self.inner.compare_set, key, expected, desired)

    def close(self) -> None:
        self.inner.close()
