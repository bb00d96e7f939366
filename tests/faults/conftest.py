"""Helpers for the fault-injection suite (see docs/reliability.md).

Every case checks the same invariants on top of its own: the journal is complete and
valid, and no checkpoint was touched. The ``hw`` fixture (tests/conftest.py) already
asserts that every pid the fixture trainer reported is dead at the end.
"""

from __future__ import annotations

import hashlib
import json
import signal
import sys
import time
from pathlib import Path

import psutil
import pytest
from waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
DIAG_FIXTURES = ROOT / "tests" / "diagnostics" / "fixtures"
FAULTY = FIXTURES / "hangwatch_faulty.py"


def snapshot(directory: Path) -> dict[str, tuple[int, int, str]]:
    """Every file under ``directory``: (mtime_ns, size, sha256), by relative path."""
    out = {}
    for path in sorted(directory.rglob("*")):
        if path.is_file():
            st = path.stat()
            out[str(path.relative_to(directory))] = (st.st_mtime_ns, st.st_size, hashlib.sha256(path.read_bytes()).hexdigest())
        elif path.is_dir():
            out[str(path.relative_to(directory)) + "/"] = (path.stat().st_mtime_ns, 0, "")
    return out


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


def check_journal(run_dir: Path, *, supervisor_killed: bool = False) -> list[dict]:
    """Every line parses and has event/ts/run_id; one run_id; attempts paired; run_finished last."""
    lines = (run_dir / "journal.jsonl").read_text().splitlines()
    assert lines, "empty journal"
    records = []
    for n, line in enumerate(lines, 1):
        try:
            r = json.loads(line)
        except ValueError as exc:
            raise AssertionError(f"journal line {n} does not parse: {line!r}") from exc
        for key in ("event", "ts", "run_id"):
            assert key in r, f"journal line {n} has no {key!r}: {r}"
        records.append(r)
    assert len({r["run_id"] for r in records}) == 1, "several run_ids"
    ts = [r["ts"] for r in records]
    assert ts == sorted(ts), "journal timestamps go backwards"
    started = [r["attempt"] for r in records if r["event"] == "attempt_started"]
    ended = [r["attempt"] for r in records if r["event"] == "attempt_ended"]
    finished = [r for r in records if r["event"] == "run_finished"]
    if supervisor_killed:
        assert not finished
        assert ended == started[: len(ended)]
    else:
        assert started == ended, f"attempt_started {started} vs attempt_ended {ended}"
        assert len(finished) == 1 and records[-1]["event"] == "run_finished", "run_finished must be last, once"
    for r in records:
        if r["event"] == "incident":
            following = [x for x in records if x["event"] in ("capture", "kill") and x.get("attempt") == r["attempt"]]
            assert [x["event"] for x in following][:2] == ["capture", "kill"], "incident without capture then kill"
    return records


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
