"""Containment against trainers that manage cgroups themselves, on real processes.

A trainer running as root may make cgroups of its own below its attempt's (a memory limit for a
data loader's workers) or move a process out of it (``systemd-run --scope``, a tool writing another
``cgroup.procs``). Membership came from the attempt's ``cgroup.procs`` alone: the first were never
sampled, captured or given the SIGTERM grace, and their cgroup was left behind; the second was out
of ``cgroup.kill``'s reach and of every look at the tree, and outlived the run.
"""

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
from fakes import FakeJournal
from waiting import alive, sigkill_all, wait_for

from hangwatch.supervisor.contain import cgroup
from hangwatch.supervisor.contain.cgroup import AttemptCgroup
from hangwatch.supervisor.watch.proctree import ProcessTree


def _usable_cgroup() -> bool:
    try:
        containment, _ = cgroup.detect("auto", "probe6")
    except Exception:  # noqa: BLE001
        return False
    if containment is None:
        return False
    containment.close()
    return True


needs_cgroup = pytest.mark.skipif(not _usable_cgroup(), reason="no writable cgroup v2 hierarchy with cgroup.kill")

# Two workers that ignore SIGTERM: one moves into a cgroup it makes below its attempt's, the other
# moves into the supervisor's own cgroup (out of the attempt's) and execs with an empty
# environment (no attempt mark). Their pids go to argv[1]; then the trainer exits 0.
MOVER = r"""
import os, signal, sys, time
def mine():
    for line in open("/proc/self/cgroup"):
        if line.startswith("0::"):
            return line[3:].strip()
mount = [l.split()[4] for l in open("/proc/self/mountinfo") if " - cgroup2 " in l][0]
attempt = mount + mine()
pids = []
for where in ("below", "out"):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        if where == "below":
            os.makedirs(attempt + "/workers", exist_ok=True)
            target = attempt + "/workers"
        else:
            target = os.path.dirname(os.path.dirname(attempt))
        with open(target + "/cgroup.procs", "w") as f:
            f.write("0")
        os.write(w, b"x"); os.close(w)
        if where == "below":
            while True:
                time.sleep(1)
        os.execve("/bin/sleep", ["sleep", "120"], {})
    os.close(w)
    os.read(r, 1)
    pids.append(pid)
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write(" ".join(map(str, pids)))
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
time.sleep(float(sys.argv[2]))
"""


@pytest.mark.slow
@needs_cgroup
@pytest.mark.timeout(60)
def test_workers_in_the_trainers_own_cgroups_are_members_killed_and_their_cgroups_removed(tmp_path: Path) -> None:
    pidfile = tmp_path / "pids"
    run = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "hangwatch.cli", "run", "--run-dir", str(run), "--gpu-probe", "none",
         "--interval", "0.2", "--grace", "0.5", "--containment", "cgroup", "--quiet", "--",
         sys.executable, "-c", MOVER, str(pidfile), "1.0"],
        cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=50)
    pids = [int(p) for p in pidfile.read_text().split()] if pidfile.exists() else []
    try:
        assert proc.returncode == 0, proc.stderr.decode()[-2000:]
        assert len(pids) == 2, "the trainer reported both workers"
        below, out = pids
        deadline = time.monotonic() + 10
        while any(alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not alive(out), "the worker that left the attempt's cgroup outlived the run"
        assert not alive(below), "the worker in the trainer's own cgroup outlived the run"
        records = [json.loads(line) for line in (run / "journal.jsonl").read_text().splitlines()]
        kill = next(r for r in records if r["event"] == "kill")
        targets = {t["pid"] for t in kill["targets"]}
        assert {below, out} <= targets, f"both workers are the done-kill's targets: {sorted(targets)}"
        first = records[0]
        leftover = cgroup.base_dir() / f"hangwatch-{first['run_id']}-{first['pid']}"
        wait_for(lambda: not leftover.exists(), timeout=10, what=f"{leftover} removed with the cgroup the trainer made")
    finally:
        sigkill_all(pids)


@needs_cgroup
@pytest.mark.timeout(30)
def test_membership_reads_the_cgroups_below_the_attempts_and_the_walk(tmp_path: Path) -> None:
    """In-process: a child cgroup's process is a member; so is a child of ours that left the cgroup."""
    containment, why = cgroup.detect("cgroup", "round6")
    assert containment is not None, why
    attempt = containment.new_attempt("attempt-001")
    procs: list[subprocess.Popen] = []
    try:
        inside = subprocess.Popen(["sleep", "60"])
        procs.append(inside)
        (attempt.path / "sub" / "deeper").mkdir(parents=True)
        (attempt.path / "sub" / "deeper" / "cgroup.procs").write_text(str(inside.pid))
        assert attempt.pids() == [inside.pid]
        outside = subprocess.Popen(["sleep", "60"])  # our child, never in the attempt's cgroup
        procs.append(outside)
        tree = ProcessTree(source=attempt.pids)
        assert {inside.pid, outside.pid} <= {p.pid for p in tree.members()}
        assert attempt.kill()
        inside.wait(10)
        assert AttemptCgroup(attempt.path).remove(timeout=5), "removed with the cgroups below it"
        assert not attempt.path.exists()
    finally:
        for p in procs:
            p.kill()
            p.wait(10)
        containment.close()


@pytest.mark.slow
@pytest.mark.timeout(40)
def test_a_guardian_that_could_not_arm_at_the_start_is_armed_later_and_kills_the_tree(monkeypatch) -> None:
    """The first start fails (a fork refused under a process limit, a start slower than its
    timeout on a loaded node): the run used to go on with no guardian at all. Now the keeper
    tries again, the new guardian is told the latest state, and it kills it when we are gone."""
    import structlog

    from hangwatch.cli.run_wiring import start_guardian
    from hangwatch.supervisor.contain import guardian

    real_spawn = guardian._spawn
    calls = []

    def flaky_spawn(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise guardian.GuardianError("the guardian did not arm (no confirmation within 10 s)")
        return real_spawn(*args, **kwargs)

    monkeypatch.setattr(guardian, "_spawn", flaky_spawn)
    journal = FakeJournal()
    supervisor = type("S", (), {"tree": None, "journal": journal})()
    member = subprocess.Popen(["sleep", "60"])
    keeper = None
    try:
        keeper, said = start_guardian(supervisor, structlog.get_logger("test"))
        assert said.startswith("unavailable: "), said
        assert keeper is not None and not keeper.armed()
        # Told while no guardian listens: the one armed later must hear it.
        keeper.send({"members": [[member.pid, psutil.Process(member.pid).create_time()]]})
        wait_for(keeper.armed, timeout=20, what="a guardian armed on the retry")
        assert journal.events == ["guardian_rearmed"]
        assert journal.records[0]["pid"] == keeper.proc.pid
        keeper._stopping.set()  # no re-arm from here: the pipe's end below is our "death"
        keeper.proc.stdin.close()
        member.wait(15)
        assert member.returncode == -signal.SIGKILL, "the late guardian killed the member it was told before it armed"
    finally:
        member.kill()
        member.wait(10)
        if keeper is not None:
            guardian.stop(keeper)


# Runs a warm process and takes it as attempt 2's root with the given parent-death signal, as the
# supervisor does; prints the root's pid, then waits to be SIGKILLed (the supervisor's death).
WARM_DRIVER = r"""
import os, signal, sys, time
from pathlib import Path
from hangwatch.supervisor.contain.prewarm import Prewarmer
command = [sys.executable, sys.argv[1], sys.argv[3]]
prewarm = Prewarmer()
prewarm.launched(command, dict(os.environ))
prewarm.tick(beat_seen=True)
trainer, how = prewarm.take(command, dict(os.environ, HANGWATCH_ATTEMPT="2"), Path(sys.argv[2]), echo=False,
                            death_signal=signal.SIGSTOP)
print("ROOT", trainer.pid if trainer is not None else f"cold: {how}", flush=True)
time.sleep(60)
"""
ROOT = "import sys, time\nopen(sys.argv[1], 'w').write('up')\ntime.sleep(60)\n"


@pytest.mark.timeout(60)
def test_a_warm_root_is_stopped_not_killed_by_the_supervisors_death_while_a_guardian_is_armed(tmp_path: Path) -> None:
    """--prewarm-launcher with the tree walk: the warm root kept the SIGKILL it was spawned with, so
    the supervisor's death orphaned its children at once (the race row 14g closed for cold roots).
    Now it takes the root's signal when it is told the attempt: stopped, it waits for the guardian."""
    (tmp_path / "root.py").write_text(ROOT)
    up = tmp_path / "up"
    driver = subprocess.Popen([sys.executable, "-c", WARM_DRIVER, str(tmp_path / "root.py"), str(tmp_path / "a2"), str(up)],
                              cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    root = None
    try:
        assert driver.stdout is not None
        line = ""
        for raw in driver.stdout:  # its log lines come first; EOF if it died
            line = raw.decode().strip()
            if line.startswith("ROOT "):
                break
        assert line[5:].isdigit(), (line, driver.stderr.read().decode()[-2000:] if driver.poll() is not None else "")
        root = int(line[5:])
        wait_for(up.exists, timeout=30, what="the warm root runs the attempt")
        driver.kill()
        driver.wait(10)
        wait_for(lambda: not alive(root) or psutil.Process(root).status() == psutil.STATUS_STOPPED, timeout=15,
                 what="the root stopped (or killed) by its parent-death signal")
        assert alive(root), "the warm root was killed by the supervisor's death, not stopped for the guardian"
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait(10)
        if root is not None:
            sigkill_all([root])


def test_the_tree_gives_a_warm_launch_the_same_parent_death_signal_as_a_cold_one(tmp_path: Path) -> None:
    from hangwatch.supervisor.watch.probes import NoProbe
    from hangwatch.supervisor.contain.tree_ops import LocalTree

    asked: list[int] = []

    class Warm:
        warm_mark = None

        def take(self, *args, death_signal, **kwargs):
            asked.append(death_signal)
            return None, {"mode": "cold", "reason": "test"}

        def launched(self, argv, env):
            pass

        def close(self):
            pass

    tree = LocalTree(tmp_path, NoProbe(), echo=False)
    tree.prewarm = Warm()  # type: ignore[assignment]
    tree._guardian, tree._guardian_armed = (lambda state: None), (lambda: True)
    try:
        trainer = tree.launch(["true"], dict(os.environ), tmp_path / "attempt-001")
        trainer.popen.wait(10)
        assert asked == [signal.SIGSTOP], "a tree walk with an armed guardian: SIGSTOP, warm or cold"
    finally:
        tree.close()


@needs_cgroup
@pytest.mark.timeout(30)
def test_with_a_cgroup_the_busy_watcher_tells_the_guardian_of_a_descendant_outside_it(tmp_path: Path) -> None:
    """No tick looks during a capture or a backoff; with the tree walk a watcher thread does, and
    tells the guardian. With a cgroup it did not look at all: a worker that moved out of the
    attempt's cgroup meanwhile (and cleared its environment) was unknown to the guardian."""
    from hangwatch.supervisor.watch.probes import NoProbe
    from hangwatch.supervisor.contain.tree_ops import LocalTree

    containment, why = cgroup.detect("cgroup", "round6w")
    assert containment is not None, why
    tree = LocalTree(tmp_path, NoProbe(), echo=False, containment=containment)
    told: list[dict] = []
    tree.attach_guardian(told.append, lambda: True)
    trainer = outside = None
    try:
        trainer = tree.launch(["sleep", "60"], dict(os.environ), tmp_path / "attempt-001")
        outside = subprocess.Popen(["sleep", "60"])  # a descendant of ours, not in the attempt's cgroup
        tree._last_look = time.monotonic() - 60  # no tick has looked for a while (a capture)

        def told_of_it() -> bool:
            return any(outside.pid in [m[0] for m in state["members"]] for state in list(told))

        wait_for(told_of_it, timeout=10, what="the watcher told the guardian of the worker outside the cgroup")
        assert told[-1]["cgroup"] == str(containment.current.path)
    finally:
        for proc in (outside, trainer.popen if trainer is not None else None):
            if proc is not None:
                proc.kill()
                proc.wait(10)
        tree.close()
