"""Declaring the supervisor our ptracer (Yama's PR_SET_PTRACER): the call, its argument, and
its harmless failure where Yama is absent."""

from __future__ import annotations

import errno
import os
import subprocess
import sys

import pytest

from hangwatch.contract import ptracer
from hangwatch.contract.env import SUPERVISOR_PID

pytestmark = pytest.mark.timeout(30)


class FakePrctl:
    def __init__(self, result: int = 0, errno_value: int = 0) -> None:
        self.calls: list[tuple[int, ...]] = []
        self.result, self.errno_value = result, errno_value

    def __call__(self, *args: int) -> int:
        self.calls.append(args)
        return self.result

    def errno(self) -> int:
        return self.errno_value


def test_the_supervisor_is_declared_with_pr_set_ptracer_and_its_pid():
    prctl = FakePrctl()
    assert ptracer.declare_ptracer(4242, prctl=prctl, errno_of=prctl.errno) == 0
    assert prctl.calls == [(0x59616D61, 4242, 0, 0, 0)], "PR_SET_PTRACER ('Yama'), then the tracer's pid"


def test_without_yama_the_call_fails_with_einval_and_nothing_raises():
    prctl = FakePrctl(result=-1, errno_value=errno.EINVAL)
    assert ptracer.declare_ptracer(4242, prctl=prctl, errno_of=prctl.errno) == errno.EINVAL


@pytest.mark.parametrize("value, declared", [("4242", 4242), ("", None), ("1", None), ("x1", None), ("-5", None)])
def test_the_supervisor_pid_comes_from_the_attempt_environment(value, declared):
    prctl = FakePrctl()
    got = ptracer.declare_supervisor({SUPERVISOR_PID: value} if value else {}, prctl=prctl, errno_of=prctl.errno)
    assert (got, [c[1] for c in prctl.calls]) == ((0, [declared]) if declared else (None, []))


def test_the_real_call_on_this_host_answers_without_raising():
    """Where Yama is present it succeeds; where it is absent the kernel says EINVAL."""
    yama = os.path.exists("/proc/sys/kernel/yama/ptrace_scope")
    code = subprocess.run([sys.executable, "-c", "from hangwatch.contract import ptracer;"
                           f"print(ptracer.declare_ptracer({os.getpid()}))"], capture_output=True, text=True, check=True)
    assert int(code.stdout) == (0 if yama else errno.EINVAL)
