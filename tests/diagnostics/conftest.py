"""Fixtures for diagnostics tests: real hung Python trees, killed and reaped at teardown."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from diag_helpers import CMDLINE_SECRET, HUNG_TRAINER, SECRETS, HungTree, _all_in_replay, _tree_process


@pytest.fixture
def hung_tree(tmp_path):
    """Factory: ``hung_tree(n_children)`` starts a trainer hung in
    ``vllm/compilation/cuda_graph.py`` replay with ``n_children`` hung children;
    every process is SIGKILLed and reaped at teardown, and none may survive."""
    started: list[tuple[subprocess.Popen, list[int]]] = []

    def start(n_children: int = 0, *, secrets: bool = False, timeout: float = 20.0) -> HungTree:
        n = len(started)
        ready = tmp_path / f"ready-{n}"
        log = tmp_path / f"trainer-{n}.stdout"
        env = dict(os.environ, PYTHONUNBUFFERED="1", HANGWATCH_RUN_ID="test-run")
        argv = [sys.executable, str(HUNG_TRAINER), str(n_children), str(ready)]
        if secrets:
            env.update(SECRETS)
            argv += ["--api-key", CMDLINE_SECRET]
        with open(log, "w") as out:
            proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        started.append((proc, [proc.pid]))
        deadline = time.monotonic() + timeout
        while not ready.exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"hung trainer did not start: {log.read_text()}")
            time.sleep(0.02)
        child_pids = [int(p) for p in ready.read_text().split()]
        started[-1][1].extend(child_pids)
        pids = [proc.pid, *child_pids]
        # Wait until every process sits in replay's sleep: a half-started
        # interpreter gives py-spy "Failed to find python version".
        while not _all_in_replay(pids):
            if time.monotonic() > deadline:
                raise RuntimeError("hung trainer processes never reached replay()")
            time.sleep(0.05)
        tree = [_tree_process(psutil.Process(pid)) for pid in pids]
        return HungTree(proc, tree, log)

    yield start

    survivors = []
    for proc, pids in started:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass  # the group is already gone
        proc.wait(timeout=10)
        for pid in pids[1:]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 5
        for pid in pids:
            while psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE and time.monotonic() < deadline:
                time.sleep(0.02)
            if psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                survivors.append(pid)
    assert not survivors, f"processes survived the test: {survivors}"


