"""Two nodes in two network namespaces, each with its own address on a veth pair: the link between
them is cut during training and during an incident. Every node's ranks are killed within the lease,
two lease intervals and the capture deadline of the cut; both exit 75, nothing of the job is left,
and the job cut mid-incident resumes with ``--resume`` on both nodes.

Needs root and ``ip netns`` (CI runs as root); skipped with the reason elsewhere.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import uuid

import psutil
import pytest

from cohort_job import HANGWATCH, Job, _wait_training

pytestmark = [pytest.mark.slow]

LEASE = 15.0  # the default
INTERVAL = LEASE / 10
CAPTURE = 15.0  # Job's --capture-timeout
BOUND = LEASE + 2 * INTERVAL + CAPTURE


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)


def _netns_unavailable() -> str | None:
    if os.geteuid() != 0:
        return "network namespaces need root (CI runs as root)"
    if shutil.which("ip") is None:
        return "no `ip` command (iproute2)"
    probe = f"hwprobe{uuid.uuid4().hex[:6]}"
    try:
        _ip("netns", "add", probe)
    except (subprocess.CalledProcessError, OSError) as exc:
        return f"ip netns add failed here: {getattr(exc, 'stderr', b'') or exc!r}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True, timeout=30)
    return None


@pytest.fixture
def two_namespaces():
    why = _netns_unavailable()
    if why is not None:
        pytest.skip(why)
    tag = uuid.uuid4().hex[:6]
    ns = [f"hw{tag}a", f"hw{tag}b"]
    veth = [f"hw{tag}a0", f"hw{tag}b0"]
    subnet = f"10.{200 + int(tag[:2], 16) % 50}.{int(tag[2:4], 16)}"
    addrs = [f"{subnet}.1", f"{subnet}.2"]
    for n in ns:
        _ip("netns", "add", n)
    try:
        _ip("link", "add", veth[0], "type", "veth", "peer", "name", veth[1])
        for n, v, a in zip(ns, veth, addrs):
            _ip("link", "set", v, "netns", n)
            _ip("-n", n, "addr", "add", f"{a}/24", "dev", v)
            _ip("-n", n, "link", "set", v, "up")
            _ip("-n", n, "link", "set", "lo", "up")
        yield ns, veth, addrs
    finally:
        for n in ns:
            subprocess.run(["ip", "netns", "del", n], capture_output=True, timeout=30)


def _job(tmp_path, ns, veth, addrs, **kw) -> Job:
    return Job(tmp_path, 2, lease=LEASE, host=addrs[0], wrap={i: ["ip", "netns", "exec", ns[i]] for i in range(2)},
               envs={i: {"GLOO_SOCKET_IFNAME": veth[i]} for i in range(2)},
               # The namespaces' addresses are no name of this machine: torchrun would not know that node 0
               # hosts its rendezvous, and would tell the workers to reach node 0 at the machine's own name.
               launcher_args={i: ["--rdzv-conf", f"is_host={int(i == 0)}", "--local-addr", addrs[i]] for i in range(2)},
               **kw)


def _ranks(job: Job, node: int) -> list[psutil.Process]:
    found = []
    for proc in job.leftovers():
        try:
            if "cohort_trainer.py" in " ".join(proc.cmdline()) and proc.environ().get("TEST_NODE") == str(node):
                found.append(proc)
        except psutil.Error:
            continue
    return found


def _cut_and_time(job: Job, ns: list[str], veth: list[str]) -> tuple[float, dict[int, float]]:
    """Cut the link; when each node's ranks were gone, in seconds after the cut."""
    watched = {n: _ranks(job, n) for n in range(2)}
    assert all(watched.values()), "both nodes' ranks run before the cut"
    _ip("-n", ns[0], "link", "set", veth[0], "down")
    cut = time.monotonic()
    gone: dict[int, float] = {}
    while len(gone) < 2 and time.monotonic() - cut < BOUND + 60:
        for n, procs in watched.items():
            if n not in gone and not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in procs):
                gone[n] = time.monotonic() - cut
        time.sleep(0.2)
    return cut, gone


def _check_cut(job: Job, gone: dict[int, float]) -> None:
    codes = job.wait(120)
    print(f"ranks gone after the cut (s): {gone}; bound {BOUND:g} s")
    assert codes == [75, 75], [job.output(i) for i in range(2)]
    assert set(gone) == {0, 1}, gone
    for n, took in gone.items():
        assert took <= BOUND + 1.0, f"node {n}'s ranks killed {took:.1f} s after the cut (bound {BOUND:g} s)"
    for i in range(2):
        records = job.journal(i)
        lost = next(r for r in records if r["event"] == "member_lost")
        assert "unreachable" in lost["reason"] and "or the network between us failed" in lost["reason"], lost
        assert records[-1]["event"] == "run_finished" and records[-1]["exit_code"] == 75
    time.sleep(2)
    assert not job.leftovers(), [p.info for p in job.leftovers()]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("store", ["c10d", "authenticated"])
def test_a_link_cut_during_training_kills_every_nodes_ranks_within_the_lease(tmp_path, two_namespaces, store):
    """``authenticated``: with the job's secret, the store is hangwatch's own (``authstore``)."""
    ns, veth, addrs = two_namespaces
    extra = None
    if store == "authenticated":
        secret = tmp_path / "cohort.secret"
        secret.write_text("0123456789abcdef0123456789abcdef\n")
        secret.chmod(0o600)
        extra = {i: ["--cohort-secret-file", str(secret)] for i in range(2)}
    job = _job(tmp_path, ns, veth, addrs, steps=2000, extra=extra)
    try:
        _wait_training(job, 0)
        _wait_training(job, 1)
        time.sleep(2)
        _, gone = _cut_and_time(job, ns, veth)
        _check_cut(job, gone)
    finally:
        job.cleanup()


@pytest.mark.timeout(420)
def test_a_link_cut_during_an_incident_ends_cleanly_and_the_job_resumes(tmp_path, two_namespaces):
    ns, veth, addrs = two_namespaces
    job = _job(tmp_path, ns, veth, addrs, steps=12, wedge_node=1, wedge_step=5)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            journal = tmp_path / "run0" / "journal.jsonl"
            if journal.exists() and '"cohort_incident"' in journal.read_text():
                break
            time.sleep(0.2)
        else:
            pytest.fail("no incident on node 0")
        _, gone = _cut_and_time(job, ns, veth)
        _check_cut(job, gone)
    finally:
        job.cleanup()
    # The link back; every node resumes its own run together.
    _ip("-n", ns[0], "link", "set", veth[0], "up")
    resumed = []
    for i in range(2):
        env = dict(os.environ, TEST_NODE=str(i), GLOO_SOCKET_IFNAME=veth[i])
        env.pop("HANGWATCH_CONFIG", None)
        argv = ["ip", "netns", "exec", ns[i], HANGWATCH, "run", "--quiet", "--resume", str(tmp_path / f"run{i}"),
                "--cohort", job.procs[0].args[job.procs[0].args.index("--cohort") + 1],
                "--node-rank", str(i), "--nnodes", "2", "--lease-timeout", str(LEASE)]
        resumed.append(subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                        start_new_session=True))
    try:
        codes = [p.wait(timeout=240) for p in resumed]
        assert codes == [0, 0], [p.stdout.read().decode(errors="replace")[-3000:] for p in resumed]
        assert (job.ckpt / "finished-attempt-2").exists() or any(job.ckpt.glob("finished-attempt-*"))
    finally:
        for p in resumed:
            if p.poll() is None:
                os.killpg(p.pid, 9)
        job.cleanup()
