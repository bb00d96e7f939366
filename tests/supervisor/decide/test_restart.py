"""The restart policy: stop rules, the per-hour cap, the backoff."""

from __future__ import annotations

import random

import pytest

from hangwatch.contract.verdict import VerdictKind
from hangwatch.supervisor.decide.restart import (
    EXIT_BUDGET,
    EXIT_NO_PROGRESS,
    AttemptOutcome,
    RestartPolicy,
    max_restarts,
    max_restarts_per_hour,
    no_checkpoint_progress,
)


pytestmark = pytest.mark.timeout(30)


def _outcome(attempt, kind=VerdictKind.STALL, ended_at=0.0, start=None, end=None):
    return AttemptOutcome(attempt, kind, ended_at, start, end)


def test_stop_rules_compose():
    rule = max_restarts(2) | no_checkpoint_progress(3)
    assert rule([_outcome(1), _outcome(2)], 0) is None
    assert rule([_outcome(1), _outcome(2), _outcome(3)], 0).exit_code == EXIT_BUDGET
    stuck = [_outcome(i, start=10, end=10) for i in (1, 2, 3)]
    assert (no_checkpoint_progress(3))(stuck, 0).exit_code == EXIT_NO_PROGRESS
    progressing = [_outcome(1, start=10, end=10), _outcome(2, start=10, end=20), _outcome(3, start=20, end=20)]
    assert (no_checkpoint_progress(3))(progressing, 0) is None


def test_per_hour_cap_counts_only_the_last_hour():
    rule = max_restarts_per_hour(2)
    old = [_outcome(i, ended_at=0.0) for i in range(5)]
    assert rule(old, now=7200.0) is None
    recent = [_outcome(i, ended_at=7000.0 + i) for i in range(3)]
    assert rule(old + recent, now=7200.0).exit_code == EXIT_BUDGET


def test_backoff_grows_and_is_capped():
    policy = RestartPolicy(max_restarts=100, max_restarts_per_hour=100, no_progress_limit=0, backoff_initial=1.0,
                           backoff_max=8.0, backoff_jitter=0.0, rng=random.Random(1))
    history, delays = [], []
    for i in range(1, 7):
        history.append(_outcome(i, kind=VerdictKind.CRASH, ended_at=float(i)))
        delays.append(policy.decide(history, 10.0).delay_s)
    assert delays == [1.0, 2.0, 4.0, 8.0, 8.0, 8.0]
    done = policy.decide(history + [_outcome(7, kind=VerdictKind.DONE)], 10.0)
    assert not done.restart and done.exit_code == 0


def test_a_one_off_hang_is_relaunched_without_backoff_but_repeats_back_off():
    policy = RestartPolicy(max_restarts=100, max_restarts_per_hour=100, no_progress_limit=0, backoff_initial=1.0,
                           backoff_max=8.0, backoff_jitter=1.0, rng=random.Random(1))
    for kind in (VerdictKind.STALL, VerdictKind.SILENT_HANG):
        first = policy.decide([_outcome(1, kind=kind, ended_at=5000.0)], 5000.0)
        assert first.restart and first.delay_s == 0.0 and "no backoff" in first.reason
    # Another hang within the hour is a repeated incident: backoff with jitter.
    again = policy.decide([_outcome(1, ended_at=4000.0), _outcome(2, ended_at=5000.0)], 5000.0)
    assert 2.0 <= again.delay_s <= 3.0
    # A hang hours after the last one is a one-off again.
    later = policy.decide([_outcome(1, ended_at=0.0), _outcome(2, ended_at=9000.0)], 9000.0)
    assert later.delay_s == 0.0
    # A crash is never relaunched without backoff.
    assert policy.decide([_outcome(1, kind=VerdictKind.CRASH, ended_at=5000.0)], 5000.0).delay_s >= 1.0
