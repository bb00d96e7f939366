"""The capture's in-process fallback: which processes it may signal, the dump read back within
the deadline (a fake clock), and a faulthandler dump turned into bundle stacks."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from hangwatch.contract.capture import TreeProcess
from hangwatch.contract.stackdump import Header, stack_file, start_ticks
from hangwatch.diagnostics import inprocess
from hangwatch.diagnostics.pyspy import parse_json

pytestmark = pytest.mark.timeout(60)

SIG = int(signal.SIGRTMIN) + 7
MAIN = "0x00007f0000000a00"
DUMP = f"""Thread 0x00007f0000000b00 (most recent call first):
  File "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", line 2501 in all_reduce
  File "/app/loader.py", line 12 in fetch
  File "/usr/lib/python3.11/threading.py", line 1002 in _bootstrap

Current thread {MAIN} (most recent call first):
  File "/venv/lib/python3.11/site-packages/vllm/compilation/cuda_graph.py", line 120 in __call__
  File "/app/train.py", line 40 in step
  File "/app/train.py", line 60 in <module>
"""


def test_a_faulthandler_dump_becomes_the_bundles_stacks_with_the_main_thread_named():
    header = Header(4242, 1, SIG, MAIN, "3.11.7")
    dump = inprocess.parse_dump(DUMP, header, 4242, round_no=1)
    assert dump.pid == 4242 and dump.python == "3.11.7"
    main, other = dump.threads
    assert main.name == "MainThread" and main.frames[0].function == "__call__" and main.frames[-1].line == 60
    assert other.ident == "0x00007f0000000b00" and other.frames[0].function == "all_reduce"
    again = parse_json(json.dumps(inprocess.as_pyspy_json(dump)))
    assert again.threads == dump.threads, "stored in py-spy's JSON shape, read back by the bundle's reader unchanged"


def test_a_dump_without_a_stack_is_refused():
    from hangwatch.diagnostics.errors import InputError

    with pytest.raises(InputError):
        inprocess.parse_dump("nothing here\n", None, 1)


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += max(seconds, 0.001)


@pytest.fixture
def catcher(tmp_path):
    """A live process that catches SIG (as a registered trainer does), and its tree entry."""
    proc = subprocess.Popen([sys.executable, "-c", "import signal, sys, time\n"
                             f"signal.signal({SIG}, lambda *_: None)\nprint('r', flush=True)\ntime.sleep(60)"],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline() == "r\n"
    p = psutil.Process(proc.pid)
    tp = TreeProcess(proc.pid, p.create_time(), p.ppid(), os.getpgid(proc.pid), os.getsid(proc.pid), p.name(), ())
    yield proc, tp
    proc.kill()
    proc.wait()


def _register(tmp_path: Path, tp: TreeProcess, *, ticks: int | None = None, sig: int = SIG) -> Path:
    path = stack_file(tmp_path, tp.pid)
    header = Header(tp.pid, start_ticks(tp.pid) if ticks is None else ticks, sig, MAIN, "3.11.7")
    path.write_text(header.line())
    return path


def test_the_dump_is_read_back_once_it_has_settled_within_the_deadline(tmp_path, catcher):
    _, tp = catcher
    path = _register(tmp_path, tp)
    clock, sent = FakeClock(), []

    def send(pidfd: int, number: int) -> None:  # the handler's write, as faulthandler makes it
        sent.append(number)
        with open(path, "a") as handle:
            handle.write(DUMP)

    (result,) = inprocess.collect([tp], tmp_path, 2, clock() + 3.0, clock=clock, sleep=clock.sleep, send=send)
    assert sent == [SIG], "one signal, the one the header names"
    assert result.problem is None and result.round == 2 and result.signal == "SIGRTMIN+7"
    assert result.dump is not None and result.dump.threads[0].name == "MainThread"
    assert result.raw == DUMP, "only what was appended after the header"
    assert result.duration_s >= inprocess.SETTLE_S


def test_no_dump_by_the_deadline_is_said_and_the_wait_ends_there(tmp_path, catcher):
    _, tp = catcher
    _register(tmp_path, tp)
    clock = FakeClock()
    deadline = clock() + 1.5
    (result,) = inprocess.collect([tp], tmp_path, 1, deadline, clock=clock, sleep=clock.sleep, send=lambda fd, n: None)
    assert result.dump is None and result.problem == "no_dump" and "SIGRTMIN+7" in result.message
    assert deadline <= clock.now <= deadline + inprocess.POLL_S


@pytest.mark.parametrize("case, problem", [("no file", "unregistered"), ("earlier process", "stale"),
                                           ("other signal", "not_caught"), ("someone else's header", "unreadable"),
                                           ("a link", "unreadable"), ("not in the tree any more", "stale")])
def test_a_process_not_proven_to_have_registered_is_never_signalled(tmp_path, catcher, case, problem):
    _, tp = catcher
    if case == "earlier process":
        _register(tmp_path, tp, ticks=1)
    elif case == "other signal":
        _register(tmp_path, tp, sig=SIG + 1)
    elif case == "someone else's header":
        stack_file(tmp_path, tp.pid).write_text(Header(tp.pid + 1, 1, SIG, MAIN, "3.11").line())
    elif case == "a link":
        real = _register(tmp_path, tp)
        real.rename(tmp_path / "elsewhere")
        stack_file(tmp_path, tp.pid).symlink_to(tmp_path / "elsewhere")
    elif case == "not in the tree any more":
        _register(tmp_path, tp)
        tp = TreeProcess(tp.pid, tp.create_time - 100, tp.ppid, tp.pgid, tp.sid, tp.name)
    sent: list[int] = []
    clock = FakeClock()
    (result,) = inprocess.collect([tp], tmp_path, 1, clock() + 1.0, clock=clock, sleep=clock.sleep,
                                  send=lambda fd, n: sent.append(n))
    assert (result.problem, sent) == (problem, [])


def test_a_real_registered_process_answers_the_real_signal(tmp_path):
    code = ("import os, time\nimport hangwatch.trainer\nprint('r', flush=True)\ntime.sleep(60)\n")
    proc = subprocess.Popen([sys.executable, "-c", code], env=dict(os.environ, HANGWATCH_ATTEMPT_DIR=str(tmp_path)),
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "r\n"
        p = psutil.Process(proc.pid)
        tp = TreeProcess(proc.pid, p.create_time(), p.ppid(), os.getpgid(proc.pid), os.getsid(proc.pid), p.name(), ())
        (result,) = inprocess.collect([tp], tmp_path, 1, time.monotonic() + 5.0)
        assert result.dump is not None, result.message
        assert [t.name for t in result.dump.threads] == ["MainThread"]
        assert result.dump.threads[0].frames[0].function == "<module>"
        assert proc.poll() is None
    finally:
        proc.kill()
        proc.wait()
