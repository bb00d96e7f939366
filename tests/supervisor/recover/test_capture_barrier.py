"""How long a node of a cohort waits for the other nodes' captures before its kill (``barrier_wait``)."""

from __future__ import annotations

import pytest

from hangwatch.supervisor.decide.attempt import CAPTURE_SLACK_S
from hangwatch.supervisor.recover.incident import barrier_wait

pytestmark = pytest.mark.timeout(10)


def test_the_wait_ends_when_the_latest_capture_can_have_ended():
    # Own capture began at 100 and took 0.5 s; the others began within two ticks and end by their deadline.
    assert barrier_wait(100.0, 100.5, 15.0, 1.0) == pytest.approx(2.0 + 15.0 + CAPTURE_SLACK_S - 0.5)


def test_an_own_capture_that_ran_to_its_deadline_leaves_only_the_ticks_margin():
    assert barrier_wait(100.0, 100.0 + 15.0 + CAPTURE_SLACK_S, 15.0, 0.5) == pytest.approx(1.0)
    assert barrier_wait(100.0, 200.0, 15.0, 0.5) == 0.0  # never negative
