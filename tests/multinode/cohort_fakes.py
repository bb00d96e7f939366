"""Shared by the in-process cohort tests: a fake clock, and two joined nodes on one store."""

from __future__ import annotations

import threading
import time

from hangwatch.supervisor.cohort.membership import Membership
from hangwatch.supervisor.cohort.node import Cohort


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.now += s
        time.sleep(0.002)  # lets the other nodes' threads run while fake time flies


def node(store, rank: int, clock: Clock) -> Cohort:
    # lease_interval: the lease thread never wakes in the test (its judgement is renew's, called there)
    return Cohort(store, Membership(rank, 2, "127.0.0.1", 29600, "job"), {"a": 1}, lease_interval=3600,
                  lease_timeout=10, barrier_timeout=30, clock=clock, sleep=clock.sleep, wall=clock)


def join_all(nodes: list[Cohort]) -> None:
    threads = [threading.Thread(target=n.join, kwargs={"timeout": 1e6}) for n in nodes]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=20)
    assert all(n._generation for n in nodes)
