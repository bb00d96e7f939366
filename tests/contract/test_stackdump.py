"""The trainer's side of the in-process stacks: the signal, the file, the header, the fork."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hangwatch.contract import stackdump
from hangwatch.contract.env import ATTEMPT_DIR, IN_PROCESS_STACKS, STACKS_SIGNAL

pytestmark = pytest.mark.timeout(60)

RTMIN = int(signal.SIGRTMIN)


@pytest.mark.parametrize("text, number", [("SIGRTMIN+7", RTMIN + 7), ("rtmin+3", RTMIN + 3), ("SIGRTMAX-1", int(signal.SIGRTMAX) - 1),
                                          ("SIGWINCH", int(signal.SIGWINCH)), ("usr1", int(signal.SIGUSR1)), (str(RTMIN + 2), RTMIN + 2)])
def test_a_signal_by_name_number_or_real_time_offset(text, number):
    assert stackdump.parse_signal(text) == number


@pytest.mark.parametrize("text", ["SIGKILL", "SIGSEGV", "SIGTERM", "SIGINT", "SIGCHLD", "0", "999", "SIGNOPE", "RTMIN+99"])
def test_a_signal_the_process_needs_or_that_does_not_exist_is_refused(text):
    with pytest.raises(ValueError):
        stackdump.parse_signal(text)


def test_the_header_names_the_process_and_reads_back():
    header = stackdump.Header(4242, 123456, RTMIN + 7, "0x00007f0000000001", "3.11.7")
    assert stackdump.read_header(header.line()) == header
    assert stackdump.read_header("Thread 0x00007f (most recent call first):") is None
    assert stackdump.signal_name(RTMIN + 7) == "SIGRTMIN+7"


_TRAINER = """
import os, signal, sys, threading, time
{before}
import hangwatch.trainer
threading.Thread(target=lambda: time.sleep(60), name="loader", daemon=True).start()
print("ready", flush=True)
time.sleep(60)
"""


def _start(tmp_path: Path, before: str = "", **env: str) -> subprocess.Popen:
    environ = dict(os.environ, **{ATTEMPT_DIR: str(tmp_path)}, **env)
    proc = subprocess.Popen([sys.executable, "-c", _TRAINER.format(before=before)], env=environ,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    return proc


def _wait_for(path: Path, text: str, timeout: float = 10.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        content = path.read_text() if path.exists() else ""
        if text in content:
            return content
        time.sleep(0.02)
    raise AssertionError(f"{text!r} never appeared in {path}")


def test_importing_hangwatch_trainer_registers_a_private_dump_that_keeps_the_process_alive(tmp_path):
    proc = _start(tmp_path)
    try:
        path = stackdump.stack_file(tmp_path, proc.pid)
        assert path.stat().st_mode & 0o777 == 0o600
        header = stackdump.read_header(path.read_text().splitlines()[0])
        assert header is not None and header.pid == proc.pid and header.signal == RTMIN + 7
        assert header.start_ticks == stackdump.start_ticks(proc.pid)
        assert stackdump.catches(proc.pid, RTMIN + 7)
        os.kill(proc.pid, RTMIN + 7)
        text = _wait_for(path, "Current thread")
        assert "in <module>" in text and "threading.py" in text, "every thread, the main one included"
        time.sleep(0.2)
        assert proc.poll() is None, "a real-time signal with no handler before ours must not end the process"
    finally:
        proc.kill()
        proc.wait()


def test_a_handler_the_process_had_is_kept(tmp_path):
    before = ("signal.signal(signal.SIGRTMIN + 7, lambda *_: open(os.path.join(os.environ['HANGWATCH_ATTEMPT_DIR'],"
              " 'own-handler'), 'w').close())")
    proc = _start(tmp_path, before)
    try:
        os.kill(proc.pid, RTMIN + 7)
        _wait_for(stackdump.stack_file(tmp_path, proc.pid), "most recent call first")
        deadline = time.monotonic() + 10
        while not (tmp_path / "own-handler").exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert (tmp_path / "own-handler").exists(), "chained: the process's own handler ran too"
    finally:
        proc.kill()
        proc.wait()


def test_the_signal_is_configurable_and_off_registers_nothing(tmp_path):
    proc = _start(tmp_path, **{STACKS_SIGNAL: "SIGRTMIN+3"})
    try:
        header = stackdump.read_header(stackdump.stack_file(tmp_path, proc.pid).read_text().splitlines()[0])
        assert header is not None and header.signal == RTMIN + 3 and stackdump.catches(proc.pid, RTMIN + 3)
    finally:
        proc.kill()
        proc.wait()
    off = tmp_path / "off"
    off.mkdir()
    proc = _start(off, **{IN_PROCESS_STACKS: "off"})
    try:
        assert list(off.iterdir()) == [] and not stackdump.catches(proc.pid, RTMIN + 7)
    finally:
        proc.kill()
        proc.wait()


def test_a_link_planted_where_the_file_goes_is_never_followed(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("keep me\n")
    code = ("import os, sys; from hangwatch.contract import stackdump;"
            f"os.symlink({str(victim)!r}, str(stackdump.stack_file({str(tmp_path)!r}, os.getpid())));"
            f"print(stackdump.arm({{'HANGWATCH_ATTEMPT_DIR': {str(tmp_path)!r}}}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "None", "nothing armed: the trainer goes on without the fallback"
    assert victim.read_text() == "keep me\n"


def test_a_forked_child_dumps_into_its_own_file(tmp_path):
    before = ""
    code = _TRAINER.format(before=before).replace('print("ready", flush=True)', (
        "child = os.fork()\n"
        "if child == 0:\n"
        "    time.sleep(60)\n"
        "    os._exit(0)\n"
        "print(child, flush=True)\n"
        'print("ready", flush=True)'))
    environ = dict(os.environ, **{ATTEMPT_DIR: str(tmp_path)})
    proc = subprocess.Popen([sys.executable, "-c", code], env=environ, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        child = int(proc.stdout.readline())
        assert proc.stdout.readline() == "ready\n"
        path = stackdump.stack_file(tmp_path, child)
        _wait_for(path, f"pid={child} ")
        os.kill(child, RTMIN + 7)
        _wait_for(path, "most recent call first")
        assert "most recent call first" not in stackdump.stack_file(tmp_path, proc.pid).read_text()
    finally:
        proc.kill()
        proc.wait()
        try:
            os.kill(child, signal.SIGKILL)
        except (ProcessLookupError, NameError, UnboundLocalError):
            pass
