"""Helpers and fixtures for the fault-injection tests (see docs/reliability.md), which sit beside
the module each attacks: tests/diagnostics/test_capture_faults.py,
tests/supervisor/decide/test_checkpoint_faults.py, tests/supervisor/contain/test_tree_faults.py.
tests/conftest.py loads it as a plugin: its fixtures ``faults`` and ``hw_faulty`` serve every test.

Every case checks the same invariants on top of its own: the journal is complete and
valid, and no checkpoint was touched. The ``hw`` fixture (tests/conftest.py) already
asserts that every pid the fixture trainer reported is dead at the end.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import psutil
import pytest
from run_checks import check_journal, snapshot
from waiting import wait_for

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"
DIAG_FIXTURES = ROOT / "tests" / "diagnostics" / "fixtures"
FAULTY = FIXTURES / "hangwatch_faulty.py"


def make_checkpoints(ckpt: Path) -> None:
    """checkpoint-3 complete; checkpoint-6 with a corrupt marker; checkpoint-9 half-written."""
    good = ckpt / "checkpoint-3"
    good.mkdir()
    (good / "trainer_state.json").write_text(json.dumps({"global_step": 3}))
    (good / "model.safetensors").write_bytes(b"\0" * 4096)
    corrupt = ckpt / "checkpoint-6"
    corrupt.mkdir()
    (corrupt / "trainer_state.json").write_text('{"global_step": 6, "log_hist')  # torn write
    (corrupt / "model.safetensors").write_bytes(b"\1" * 4096)
    half = ckpt / "checkpoint-9"
    half.mkdir()
    (half / "model.safetensors").write_bytes(b"\2" * 100)  # marker never written


def strays(cmd_part: str, since: float) -> list[psutil.Process]:
    """Processes created after ``since`` whose command line contains ``cmd_part``."""
    found = []
    for proc in psutil.process_iter(["cmdline", "create_time"]):
        try:
            if proc.info["create_time"] >= since and cmd_part in " ".join(proc.info["cmdline"] or []):
                if proc.status() != psutil.STATUS_ZOMBIE:
                    found.append(proc)
        except psutil.Error:
            continue
    return found


class Faults:
    snapshot = staticmethod(snapshot)
    make_checkpoints = staticmethod(make_checkpoints)
    check_journal = staticmethod(check_journal)
    strays = staticmethod(strays)
    wait_for = staticmethod(wait_for)
    FAULTY = FAULTY
    PYSPY_HANG = DIAG_FIXTURES / "pyspy_hang.sh"
    PYSPY_DENIED = DIAG_FIXTURES / "pyspy_denied.sh"


@pytest.fixture
def faults():
    return Faults


@pytest.fixture
def hw_faulty(hw):
    """``hw`` whose supervisor runs through tests/fixtures/hangwatch_faulty.py (an injected fault)."""
    def start(fault: str, args: list[str]):
        import os
        import subprocess

        env = dict(os.environ, PYTHONPATH=str(ROOT), HANGWATCH_FAULT=fault)
        proc = subprocess.Popen([sys.executable, str(FAULTY), *args], cwd=hw.tmp, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        hw.procs.append(proc)
        return proc
    hw.start_faulty = start
    return hw
