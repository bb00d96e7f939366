"""Kernel containment (cgroup v2) and the killer's per-pid decisions, on real processes.

The race: a trainer forks a child and an escaped, SIGTERM-ignoring grandchild
(setsid + double fork, like vLLM's EngineCore) just after the supervisor's
last look at the tree, and the supervisor is SIGKILLed before its next one.
With the tree walk nothing had recorded them; with a cgroup the guardian's
``cgroup.kill`` takes them anyway.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from waiting import alive, wait_for

from hangwatch.supervisor.contain import cgroup
from hangwatch.supervisor.contain.killer import TreeKiller
from hangwatch.supervisor.watch.proctree import ProcessTree

# Forks after the supervisor's first tick (interval 1 s), then reports the pids.
RACER = r"""
import os, signal, sys, time
pidfile = sys.argv[1]
time.sleep(0.3)
if os.fork() == 0:                      # a child in the trainer's own group
    time.sleep(60); os._exit(0)
r, w = os.pipe()
if os.fork() == 0:                      # escapes: new session, double fork, ignores SIGTERM
    os.setsid()
    if os.fork() == 0:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        os.write(w, str(os.getpid()).encode()); os.close(w)
        time.sleep(60); os._exit(0)
    os._exit(0)
escaped = os.read(r, 32).decode()
with open(pidfile + ".tmp", "w") as f:
    f.write(f"{os.getpid()} {escaped}\n")
os.rename(pidfile + ".tmp", pidfile)
time.sleep(60)
"""


def _usable_cgroup() -> bool:
    try:
        containment, _ = cgroup.detect("auto", "probe")
    except Exception:
        return False
    if containment is None:
        return False
    containment.close()
    return True


needs_cgroup = pytest.mark.skipif(not _usable_cgroup(), reason="no writable cgroup v2 hierarchy with cgroup.kill")


def _wait_dead(pids: list[int], settle: float) -> None:
    """Give the guardian up to ``settle`` s to kill ``pids``."""
    deadline = time.monotonic() + settle
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)


def _reap_all(proc: subprocess.Popen, pids: list[int]) -> None:
    """Whatever a test started: the supervisor, and every pid its trainer reported."""
    if proc.poll() is None:
        proc.kill()
        proc.wait(10)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _start(tmp: Path, n: int, containment: str) -> tuple[subprocess.Popen, Path]:
    run = tmp / f"run-{n}"
    pidfile = tmp / f"pids-{n}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "hangwatch.cli", "run", "--run-dir", str(run), "--gpu-probe", "none",
         "--interval", "1", "--containment", containment, "--quiet", "--", sys.executable, "-c", RACER, str(pidfile)],
        cwd=tmp, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    return proc, pidfile


def _race(tmp: Path, n: int, containment: str, settle: float = 10.0) -> tuple[list[int], list[int]]:
    """(every pid the racer reported, those still alive after the supervisor's SIGKILL)."""
    proc, pidfile = _start(tmp, n, containment)
    pids: list[int] = []
    try:
        wait_for(lambda: pidfile.exists(), timeout=60, what="racer forked")
        pids = [int(p) for p in pidfile.read_text().split()]
        children = [c.pid for p in pids if alive(p) for c in psutil.Process(p).children()]
        pids += children
        proc.kill()  # right after the fork: the supervisor's next tick is ~0.5 s away
        proc.wait(10)
        _wait_dead(pids, settle)
        return pids, [p for p in pids if alive(p)]
    finally:
        _reap_all(proc, pids)


@pytest.mark.slow
@needs_cgroup
@pytest.mark.timeout(240)
def test_sigkill_right_after_fork_leaves_nothing_20_times(tmp_path):
    survivors: list[int] = []
    seen = 0
    with concurrent.futures.ThreadPoolExecutor(5) as pool:  # 5 supervisors side by side
        results = list(pool.map(lambda n: _race(tmp_path, n, "cgroup"), range(20)))
    for pids, left in results:
        seen += len(pids)
        survivors += left
    assert seen >= 20 * 3, "every racer reported its trainer, child and escaped grandchild"
    assert survivors == [], f"{len(survivors)} process(es) survived the supervisor's SIGKILL: {survivors}"
    # And the guardian removed each run's cgroup (only ours: other runs may be live).
    base = cgroup.base_dir()
    for n in range(20):
        first = json.loads((tmp_path / f"run-{n}" / "journal.jsonl").read_text().splitlines()[0])
        leftover = base / f"hangwatch-{first['run_id']}-{first['pid']}"
        wait_for(lambda: not leftover.exists(), timeout=30, what=f"{leftover} removed")


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_tree_fallback_guardian_kills_what_it_never_saw_fork_5_times(tmp_path):
    """Without a cgroup, the guardian kills what stayed in the trainer's session (forked after
    the last tick) and, by the attempt's mark in its environment, the escaped grandchild too
    (it survived every run before the mark)."""
    with concurrent.futures.ThreadPoolExecutor(5) as pool:
        results = list(pool.map(lambda n: _race(tmp_path, n, "tree", settle=3.0), range(5)))
    for pids, left in results:
        trainer, escaped, *children = pids
        assert children, "the racer's group-mate child was reported"
        assert left == [], f"survivors (trainer {trainer}, escaped {escaped}, children {children}): {left}"
    started = [line for line in (tmp_path / "run-0" / "journal.jsonl").read_text().splitlines()
               if '"run_started"' in line]
    assert '"containment":"tree"' in started[0]


# A worker that escapes (setsid + double fork, SIGTERM ignored) and, with ``bare``, execs with
# an empty environment (no attempt mark: only a look at the tree finds it); its pid to argv[1].
ESCAPE = r"""
def escape(bare):
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            with open(sys.argv[1], "a") as f:
                f.write(f"{os.getpid()}\n")
            if bare:
                os.execve("/bin/sleep", ["sleep", "120"], {})
            time.sleep(120); os._exit(0)
        os._exit(0)
    os.wait()
"""
# Beats, then hangs; 2 s later (the capture has begun: progress timeout 1 s) a worker escapes
# with its environment and one without: nobody looks at the tree until the capture ends.
SPAWNER = "import os, signal, sys, time\n" + ESCAPE + r"""
from hangwatch.trainer import beat
for step in range(4):
    beat(step=step, phase="train"); time.sleep(0.1)
time.sleep(2.0)
escape(bare=False)
escape(bare=True)
while True:
    time.sleep(1)
"""
PYSPY_HANG = Path(__file__).resolve().parents[2] / "diagnostics" / "fixtures" / "pyspy_hang.sh"


def _helpers_of(supervisor: int) -> list[int]:
    """The hanging py-spy stand-ins (``sleep 3600``) that this supervisor started (no other run's)."""
    found = []
    for proc in psutil.Process(supervisor).children():
        try:
            if proc.cmdline() == ["sleep", "3600"] and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc.pid)
        except psutil.Error:
            continue
    return found


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_sigkill_during_the_capture_leaves_neither_the_tree_nor_the_capture_helpers(tmp_path):
    """The supervisor dies while its capture waits on a hung py-spy: the workers that escaped
    while nobody looked (tree walk: by the attempt's mark, or the busy watcher's look for those
    without it) and the hung py-spy helpers (by the supervisor's mark, whatever the containment)
    used to survive it."""
    containment = "tree"
    pidfile = tmp_path / "escaped"
    proc = subprocess.Popen(
        [sys.executable, "-m", "hangwatch.cli", "run", "--run-dir", str(tmp_path / "run"), "--gpu-probe", "none",
         "--interval", "0.5", "--progress-timeout", "1", "--capture-timeout", "30", "--containment", containment,
         "--quiet", "--", sys.executable, "-c", SPAWNER, str(pidfile)],
        cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=dict(os.environ, HANGWATCH_PYSPY=str(PYSPY_HANG)))
    pids: list[int] = []
    try:
        journal = tmp_path / "run" / "journal.jsonl"
        wait_for(lambda: journal.exists() and '"incident"' in journal.read_text(), timeout=60, what="incident")
        wait_for(lambda: pidfile.exists() and len(pidfile.read_text().split()) == 2, timeout=30, what="escapes")
        time.sleep(1.0)  # the busy watcher's look (nobody else looks during the capture)
        helpers = _helpers_of(proc.pid)
        pids = [int(p) for p in pidfile.read_text().split()] + helpers
        assert '"capture"' not in journal.read_text(), "the capture still waits on the hung py-spy"
        assert helpers, "the capture is waiting on the hung py-spy stand-in"
        proc.kill()
        proc.wait(10)
        _wait_dead(pids, 5)
        assert [p for p in pids if alive(p)] == [], f"survivors of the SIGKILLed supervisor among {pids}"
    finally:
        _reap_all(proc, pids)


def test_detect_falls_back_or_refuses_without_a_cgroup(tmp_path):
    missing = tmp_path / "no-cgroup-here"
    containment, why = cgroup.detect("auto", "run1", base=missing)
    assert containment is None and "cannot create a cgroup" in why
    with pytest.raises(cgroup.CgroupError, match="--containment cgroup"):
        cgroup.detect("cgroup", "run1", base=missing)
    assert cgroup.detect("tree", "run1") == (None, "--containment tree")


def test_base_dir_reads_the_hybrid_layout(tmp_path):
    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text("31 23 0:28 / /sys/fs/cgroup rw - tmpfs tmpfs rw\n"
                         "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n")
    own = tmp_path / "cgroup"
    own.write_text("4:memory:/x\n0::/system.slice/job.scope\n")
    assert cgroup.base_dir(mountinfo, own) == Path("/sys/fs/cgroup/unified/system.slice/job.scope")


SETSID_ON_TERM = r"""
import os, signal, sys, time
if os.fork() == 0:
    def leave(*_):
        os.setsid()                 # leaves the group it was signalled through, and lives on
    signal.signal(signal.SIGTERM, leave)
    with open(sys.argv[1], "w") as f:
        f.write(str(os.getpid()))
    while True:
        time.sleep(0.1)
signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the group lives on: its killpg succeeds
time.sleep(60)
"""


@pytest.mark.timeout(60)
def test_a_child_that_setsids_on_sigterm_is_sigkilled_not_reported_unkillable(tmp_path):
    ready = tmp_path / "child"
    trainer = subprocess.Popen([sys.executable, "-c", SETSID_ON_TERM, str(ready)], start_new_session=True)
    child = None
    try:
        wait_for(ready.exists, what="child started")
        time.sleep(0.1)
        child = int(ready.read_text())
        tree = ProcessTree(exclude=lambda: ())
        report = TreeKiller(tree, lambda: trainer.poll(), poll_s=0.02).kill(grace=0.5, kill_timeout=3.0)
        assert report.confirmed, f"survivors: {report.survivors}"
        assert child in report.escalated
        assert not alive(child)
    finally:
        for pid in (trainer.pid, child):
            if pid:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        trainer.wait(10)


@needs_cgroup
@pytest.mark.timeout(30)
def test_resume_kills_what_a_dead_runs_cgroup_still_holds():
    """Supervisor and guardian both gone (a node-wide OOM kill): --resume empties the run's cgroups."""
    run = cgroup.Containment.create(cgroup.base_dir(), "stalerun01")
    attempt = run.new_attempt("attempt-001")
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        Path(attempt.procs_file).write_text(str(sleeper.pid))
        assert attempt.pids() == [sleeper.pid]
        assert cgroup.kill_stale("stalerun01") == [sleeper.pid]
        assert sleeper.wait(5) == -signal.SIGKILL
        assert not run.path.exists()
    finally:
        sleeper.kill()
        sleeper.wait(5)
        run.close()


# The trainer ignores SIGTERM; its child's SIGTERM handler hands off to a bare escaped worker,
# then stays busy, so the kill keeps its whole grace.
HANDS_OFF = "import os, signal, sys, time\n" + ESCAPE + r"""
from hangwatch.trainer import beat
def on_term(*_):
    escape(bare=True)
    end = time.time() + 30
    while time.time() < end:
        pass
if os.fork() == 0:
    signal.signal(signal.SIGTERM, on_term)
    while True:
        time.sleep(0.1)
signal.signal(signal.SIGTERM, signal.SIG_IGN)
for step in range(4):
    beat(step=step, phase="train"); time.sleep(0.1)
while True:
    time.sleep(1)
"""


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_sigkill_during_the_kill_takes_what_a_sigterm_handler_started(tmp_path):
    """Tree walk: the killer sees the worker a SIGTERM handler started during the grace, and the
    guardian must hear of it then, not when the kill is over (it survived a supervisor SIGKILLed
    in the grace)."""
    pidfile = tmp_path / "escaped"
    proc = subprocess.Popen(
        [sys.executable, "-m", "hangwatch.cli", "run", "--run-dir", str(tmp_path / "run"), "--gpu-probe", "none",
         "--interval", "0.5", "--progress-timeout", "1", "--capture-timeout", "5", "--grace", "20",
         "--containment", "tree", "--quiet", "--", sys.executable, "-c", HANDS_OFF, str(pidfile)],
        cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    pids: list[int] = []
    try:
        wait_for(pidfile.exists, timeout=60, what="the SIGTERM handler's worker")
        time.sleep(0.3)  # the killer's next poll (every 0.05 s) has seen it
        pids = [int(p) for p in pidfile.read_text().split()]
        proc.kill()
        proc.wait(10)
        _wait_dead(pids, 5)
        assert [p for p in pids if alive(p)] == [], f"survivors of the SIGKILLed supervisor among {pids}"
    finally:
        _reap_all(proc, pids)


@pytest.mark.timeout(30)
def test_the_guardian_never_kills_a_group_whose_id_went_to_a_stranger():
    """A recorded group or session whose members all died, its id then handed to a stranger's
    new group (pid reuse within a tick): the stranger, born after our first member, used to be
    killed as a member of "our" group. Simulated with a stranger whose own group id is listed."""
    from hangwatch.contract.procid import ProcKey
    from hangwatch.supervisor.contain import guardian_process as guardian

    gone = ProcKey(4_000_000, time.time() - 10)  # our recorded member, dead: nobody holds its pid
    stranger = subprocess.Popen(["sleep", "30"], start_new_session=True)
    ours = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        time.sleep(0.1)
        mine = ProcKey(ours.pid, psutil.Process(ours.pid).create_time())
        killed = guardian.kill_state({"members": [[gone.pid, gone.create_time], [mine.pid, mine.create_time]],
                                      "groups": [stranger.pid, ours.pid], "sessions": [stranger.pid]}, grace=2.0)
        assert stranger.poll() is None and stranger.pid not in killed, "a stranger's group was killed"
        assert ours.wait(5) == -signal.SIGKILL, "the group still led by our member is ours"
    finally:
        for proc in (stranger, ours):
            proc.kill()
            proc.wait(5)


WARM_RACER = """
import os, signal, sys, time
pidfile = sys.argv[1]
if os.environ.get("HANGWATCH_ATTEMPT") == "1":  # attempt 1 beats and fails: attempt 2 starts warm
    from hangwatch.trainer import beat
    beat(step=0, phase="train"); time.sleep(4); sys.exit(1)
r, w = os.pipe()
if os.fork() == 0:  # escapes: new session, double fork, ignores SIGTERM
    os.setsid()
    if os.fork() == 0:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        os.write(w, str(os.getpid()).encode()); os.close(w)
        time.sleep(60); os._exit(0)
    os._exit(0)
escaped = os.read(r, 32).decode()
with open(pidfile + ".tmp", "w") as f:
    f.write(f"{os.getpid()} {escaped}")
os.rename(pidfile + ".tmp", pidfile)
time.sleep(60)
"""


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_tree_fallback_guardian_kills_what_a_warm_launcher_forked(tmp_path):
    """--prewarm-launcher: the warm root's environment was fixed before it knew the attempt, so
    nothing it forks carries the attempt's mark; its escaped worker survived a SIGKILLed
    supervisor until the warm process got a mark of its own."""
    pidfile, racer = tmp_path / "pids", tmp_path / "racer.py"
    racer.write_text(WARM_RACER)  # a script file: a warm launcher runs scripts and modules, not -c
    proc = subprocess.Popen(
        [sys.executable, "-m", "hangwatch.cli", "run", "--run-dir", str(tmp_path / "run"), "--gpu-probe", "none",
         "--interval", "1", "--containment", "tree", "--backoff", "0", "--max-restarts", "2", "--prewarm-launcher",
         "--quiet", "--", sys.executable, str(racer), str(pidfile)],
        cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    pids: list[int] = []
    try:
        wait_for(lambda: pidfile.exists(), timeout=60, what="the warm attempt forked")
        pids = [int(p) for p in pidfile.read_text().split()]
        proc.kill()
        proc.wait(10)
        wait_for(lambda: not any(alive(p) for p in pids), timeout=10, what=f"{pids} killed by the guardian")
        started = [json.loads(line) for line in (tmp_path / "run" / "journal.jsonl").read_text().splitlines()
                   if '"attempt_started"' in line]
        assert started[-1]["launch"]["mode"] == "warm"
    finally:
        _reap_all(proc, pids)


pytestmark = pytest.mark.timeout(60)


def _own_cgroup_writable() -> bool:
    from hangwatch.supervisor.contain import cgroup

    if os.geteuid() != 0:
        return False
    try:
        containment, _ = cgroup.detect("auto", "probe")
    except Exception:
        return False
    if containment is None:
        return False
    containment.close()
    return True


@pytest.mark.skipif(not _own_cgroup_writable(), reason="needs root and a writable cgroup v2 hierarchy")
def test_no_containment_claimed_below_a_cgroup_another_user_controls() -> None:
    """Root's supervisor started from a cgroup delegated to another user (their
    ``user@UID.service``: a terminal or tmux of theirs): the attempt's cgroup was made below
    theirs, and they moved root's trainer out of it into a cgroup of their own, then froze and
    killed it through that cgroup's files (reproduced as a second user; the attempt's kill no
    longer reached it). Such a cgroup is refused: ``auto`` falls back to the tree walk and says
    why, ``cgroup`` is an error."""
    from hangwatch.supervisor.contain import cgroup

    delegated = cgroup.base_dir() / f"hw-delegated-{os.getpid()}"
    delegated.mkdir()
    try:
        for path in (delegated, delegated / "cgroup.procs", delegated / "cgroup.subtree_control"):
            os.chown(path, 65534, 65534)  # what systemd's delegation does for a user's subtree
        containment, why = cgroup.detect("auto", "delegated", base=delegated)
        if containment is not None:
            containment.close()
        assert containment is None and "uid 65534" in (why or "")
        with pytest.raises(cgroup.CgroupError, match="controlled by uid 65534"):
            cgroup.detect("cgroup", "delegated", base=delegated)
        from hangwatch.cli.commands.doctor import check_cgroup

        assert check_cgroup(delegated).status == "warn"  # doctor judges it as run does
    finally:
        for child in sorted(delegated.glob("hangwatch-*/*"), reverse=True) + sorted(delegated.glob("hangwatch-*")):
            child.rmdir()
        delegated.rmdir()
