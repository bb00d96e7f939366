"""Shared fixtures: run the real ``hangwatch`` CLI in a subprocess, and make sure
nothing a test started survives it."""

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

# The fault-injection fixtures (faults, hw_faulty), for the tests beside each module they attack.
pytest_plugins = ["fault_injection"]

ROOT = Path(__file__).resolve().parents[1]
FAKE_TRAINER = ROOT / "tests" / "fixtures" / "fake_trainer.py"


class Hangwatch:
    """Runs ``python -m supervisor`` with fast settings; tracks every pid the fixture trainer reports."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.run_dir = tmp / "run"
        self.pidfile = tmp / "pids.txt"
        self.gpu_file = tmp / "gpu.json"
        self.ckpt = tmp / "ckpt"
        self.ckpt.mkdir()
        self.procs: list[subprocess.Popen] = []

    def fast_args(self, **overrides: str) -> list[str]:
        opts = {
            "--run-dir": str(self.run_dir),
            "--gpu-probe": f"file:{self.gpu_file}",
            "--interval": "0.2",
            "--stall-window": "2",
            "--grace": "0.5",
            "--backoff": "0.05",
            "--backoff-max": "0.1",
            "--capture-timeout": "10",
            "--gpu-release-timeout": "5",
        }
        opts.update(overrides)
        args = ["run"]
        for k, v in opts.items():
            if v is not None:
                args += [k, v]
        return args

    def trainer(self, *args: str) -> list[str]:
        return [sys.executable, str(FAKE_TRAINER), "--pidfile", str(self.pidfile), *args]

    def start(self, args: list[str]) -> subprocess.Popen:
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        proc = subprocess.Popen(
            [sys.executable, "-m", "hangwatch.cli", *args],
            cwd=self.tmp,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.procs.append(proc)
        return proc

    def run(self, args: list[str], timeout: float = 60) -> subprocess.CompletedProcess:
        proc = self.start(args)
        out, err = proc.communicate(timeout=timeout)
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)

    def journal(self) -> list[dict]:
        path = self.run_dir / "journal.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def events(self, name: str) -> list[dict]:
        return [r for r in self.journal() if r["event"] == name]

    def reported_pids(self) -> dict[str, list[int]]:
        roles: dict[str, list[int]] = {}
        if self.pidfile.exists():
            for line in self.pidfile.read_text().splitlines():
                role, pid = line.split()
                roles.setdefault(role, []).append(int(pid))
        return roles

    def alive(self, timeout: float = 3.0) -> list[int]:
        """Reported pids still running after up to ``timeout`` s (zombies count as dead)."""
        pids = [p for ps in self.reported_pids().values() for p in ps]
        deadline = time.monotonic() + timeout
        while True:
            left = [p for p in pids if _running(p)]
            if not left or time.monotonic() > deadline:
                return left
            time.sleep(0.05)

    def cleanup(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(5)
        for pid in [p for ps in self.reported_pids().values() for p in ps]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.fixture
def hw(tmp_path: Path):
    h = Hangwatch(tmp_path)
    yield h
    survivors = h.alive(timeout=0)
    h.cleanup()
    assert not survivors, f"processes survived the test: {survivors}"


def pytest_collection_modifyitems(config, items):
    """The fast tier (``pytest -m "not slow"``) leaves out every end-to-end run: each one starts the
    real CLI with real trainers for seconds to minutes. Slow tests elsewhere carry the mark themselves."""
    e2e = ROOT / "tests" / "e2e"
    for item in items:
        if e2e in Path(item.fspath).parents:
            item.add_marker(pytest.mark.slow)
