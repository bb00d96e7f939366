"""Cohort round 6: a stop while a node joins the cohort (it may wait minutes for the others)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from hangwatch.supervisor.cohort.errors import CohortRefused
from hangwatch.supervisor.cohort.node import Cohort
from hangwatch.supervisor.cohort.store import MemoryStore

from test_cohort_faults import _node

pytestmark = pytest.mark.timeout(60)

HANGWATCH = str(Path(sys.executable).with_name("hangwatch"))


def _until(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.02)


def _joining(nodes: list[Cohort]) -> tuple[dict[int, BaseException], list[threading.Thread]]:
    errors: dict[int, BaseException] = {}

    def join(node: Cohort) -> None:
        try:
            node.join(timeout=60)
        except BaseException as exc:  # noqa: BLE001
            errors[node.me.node_rank] = exc

    threads = [threading.Thread(target=join, args=(n,), daemon=True) for n in nodes]
    for t in threads:
        t.start()
    return errors, threads


@pytest.mark.parametrize("victim", [0, 1])
def test_a_node_stopped_while_joining_is_named_by_the_others_at_once(victim):
    """Nodes 0 and 1 of 3 wait for node 2; one of them is stopped (SIGTERM). It was killed unsaid:
    the other waited out its join timeout (minutes) and said only "nodes [2] did not join"."""
    store = MemoryStore()
    nodes = [_node(store, rank, 3) for rank in (0, 1)]
    errors, threads = _joining(nodes)
    _until(lambda: all(n._generation for n in nodes)
           and all(store.data.get(nodes[0]._key("join", r)) for r in (0, 1)), 10, "nodes 0 and 1 joined")
    nodes[victim].leave_joining(signal.SIGTERM)  # what the supervisor's stop does while it joins
    other = nodes[1 - victim]
    threads[1 - victim].join(timeout=10)
    assert not threads[1 - victim].is_alive(), "the other node still waits for node 2"
    assert isinstance(errors[other.me.node_rank], CohortRefused)
    assert f"node {victim}'s supervisor was stopped (SIGTERM) while it was joining" in str(errors[other.me.node_rank])
    for n in nodes:
        n._stop.set()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_supervisor_stopped_while_joining_exits_with_the_signal_and_status_says_so(tmp_path):
    """Node 0 waiting for node 1, and node 1 waiting for a node 0 not up yet, are stopped: both were
    killed by the signal (no word on stderr; status said "refused at start")."""
    procs = {}
    for rank, sig in ((0, signal.SIGTERM), (1, signal.SIGINT)):
        env = dict(os.environ)
        env.pop("HANGWATCH_CONFIG", None)
        argv = [HANGWATCH, "run", "--quiet", "--run-dir", str(tmp_path / f"run{rank}"), "--gpu-probe", "none",
                "--cohort", f"127.0.0.1:{_free_port()}", "--node-rank", str(rank), "--nnodes", "2",
                "--join-timeout", "60", "--", "true"]
        procs[rank] = (subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                        start_new_session=True), sig)
    try:
        for rank, (proc, sig) in procs.items():
            log = tmp_path / f"run{rank}" / "hangwatch.log"  # its "cohort" line: the join's handlers are set
            _until(lambda: log.exists() and '"cohort"' in log.read_text(), 30, f"node {rank} joining")
            proc.send_signal(sig)
        for rank, (proc, sig) in procs.items():
            _, err = proc.communicate(timeout=30)
            assert proc.returncode == 128 + sig, err
            assert f"stopped by {sig.name} while joining the cohort" in err
            status = subprocess.run([HANGWATCH, "status", "--json", str(tmp_path / f"run{rank}")],
                                    capture_output=True, text=True, timeout=30)
            state = json.loads(status.stdout)["state"]
            assert f"stopped by {sig.name} while joining the cohort" in state and f"exit {128 + sig}" in state
    finally:
        for proc, _ in procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)


def _fingerprint(checkpoint_dir: str) -> dict:
    from hangwatch.supervisor.cohort.membership import settings_fingerprint
    from hangwatch.supervisor.config import SETTINGS, build

    values = {**{k: d for k, (_t, d) in SETTINGS.items()}, "checkpoint_dir": checkpoint_dir}
    return settings_fingerprint(build(values, ["python", "train.py"]), 2, checkpoint_dir)


def _join_pair(fp0: dict, fp1: dict) -> dict[int, BaseException]:
    from hangwatch.supervisor.cohort.membership import Membership

    store = MemoryStore()
    nodes = [Cohort(store, Membership(i, 2, "127.0.0.1", 29600, "job"), fp, lease_interval=3600, lease_timeout=10,
                    barrier_timeout=30) for i, fp in enumerate((fp0, fp1))]
    errors, threads = _joining(nodes)
    for t in threads:
        t.join(timeout=20)
    for n in nodes:
        n._stop.set()
    return errors


def test_the_same_checkpoint_path_resolved_through_other_links_on_each_node_is_one_setting(tmp_path):
    """``--checkpoint-dir /scratch/ckpt`` on every node, /scratch a link to each node's own disk: the
    nodes were refused ("settings differ", the resolved paths). Either match is one folder; two
    paths that match neither way are still refused."""
    (tmp_path / "disk0").mkdir()
    (tmp_path / "disk1").mkdir()
    scratch = tmp_path / "scratch"
    scratch.symlink_to(tmp_path / "disk0")
    on_node0 = _fingerprint(str(scratch / "ckpt"))
    scratch.unlink()
    scratch.symlink_to(tmp_path / "disk1")  # node 1's /scratch
    on_node1 = _fingerprint(str(scratch / "ckpt"))
    assert on_node0["checkpoint_dir"] != on_node1["checkpoint_dir"]
    assert _join_pair(on_node0, on_node1) == {}
    # Two spellings of one folder (a link to it) still match by the resolved path.
    assert _join_pair(on_node0, _fingerprint(str(tmp_path / "disk0" / "ckpt"))) == {}
    other = _join_pair(on_node0, _fingerprint(str(tmp_path / "disk0" / "other")))
    assert "settings differ" in str(other[1]) and "checkpoint_dir" in str(other[1])
    assert "checkpoint_dir_given" not in str(other[1])
