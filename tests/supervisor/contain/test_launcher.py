"""What the trainer's root runs between fork and exec (``launcher.child_setup``)."""

from __future__ import annotations

import os
import signal

import pytest

from hangwatch.supervisor.contain import launcher

pytestmark = pytest.mark.timeout(30)


class FakeLibc:
    def __init__(self) -> None:
        self.calls: list[tuple[int, ...]] = []

    def prctl(self, *args: int) -> int:
        self.calls.append(args)
        return -1 if args[0] == 0x59616D61 else 0  # as without Yama: EINVAL, which must not matter


def test_the_root_declares_the_supervisor_its_ptracer_and_a_refusal_does_not_stop_it(monkeypatch):
    """Under ptrace_scope=1 the supervisor's py-spy (its child, the trainer's sibling) may then
    attach to the root; where Yama is absent the call fails and the trainer starts all the same."""
    fake = FakeLibc()
    monkeypatch.setattr(launcher, "_libc", fake)
    setup = launcher.child_setup(None, signal.SIGKILL)
    supervisor = os.getpid()
    monkeypatch.setattr(os, "getppid", lambda: supervisor)  # as in the forked child
    setup()
    assert (launcher.PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) in fake.calls
    assert (0x59616D61, supervisor, 0, 0, 0) in fake.calls
