"""What kernel containment costs and buys.

    .venv/bin/python scripts/bench_containment.py [--procs 64] [--runs 20] [--moved-only]

1. Membership per tick: ``ProcessTree.members()`` by the tree walk and from the
   attempt cgroup's ``cgroup.procs``, for a tree of --procs sleeping processes,
   side by side in this process (best of 5 x 50 calls); the cgroup's cost as a
   ratio to the walk's.
2. The SIGKILL-right-after-fork race (the test in tests/supervisor/contain/test_containment.py)
   --runs times with each containment: processes that survived the supervisor.
3. The reaction race: a recorded member double-forks a bare worker (new session, empty
   environment) as soon as the supervisor's death takes its parent: workers that survived.
   Then the same for a member the supervisor adopted (an escaped worker whose parent is
   the supervisor itself, a subreaper), which reacts to the supervisor's own death.
4. Workers that move themselves (cgroup containment): one into a cgroup it makes below its
   attempt's, one out of it (an empty environment): those that outlived the run.

Needs a writable cgroup v2 hierarchy with cgroup.kill (root, or a delegated subtree).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "supervisor" / "contain"))

from hangwatch.supervisor.contain import cgroup  # noqa: E402
from hangwatch.supervisor.watch.proctree import ProcessTree  # noqa: E402


def membership(n: int) -> dict[str, float]:
    containment, why = cgroup.detect("cgroup", "bench")
    assert containment is not None, why
    cg = containment.new_attempt("attempt-001")
    procs = [subprocess.Popen(["sleep", "120"], preexec_fn=lambda: open(cg.procs_file, "w").write("0"))
             for _ in range(n)]
    try:
        trees = {"walk": ProcessTree(exclude=lambda: ()), "cgroup": ProcessTree(exclude=lambda: (), source=cg.pids)}
        for name, tree in trees.items():
            assert len(tree.members()) == n, (name, len(tree.members()))
        out = {}
        for name, tree in trees.items():
            best = float("inf")
            for _ in range(5):
                t0 = time.perf_counter()
                for _ in range(50):
                    tree.members()
                best = min(best, (time.perf_counter() - t0) / 50)
            out[name] = best
        return out
    finally:
        for p in procs:
            p.kill()
            p.wait()
        containment.close()


def race(runs: int, mode: str) -> tuple[int, int]:
    import test_containment as t  # noqa: PLC0415

    tmp = Path(tempfile.mkdtemp(prefix="hw-bench-race-"))
    with concurrent.futures.ThreadPoolExecutor(5) as pool:
        results = list(pool.map(lambda n: t._race(tmp, n, mode, settle=3.0), range(runs)))
    return sum(len(p) for p, _ in results), sum(len(s) for _, s in results)


# A member that reacts to its parent's death (the trainer dies with the supervisor) by
# double-forking a bare worker: new session, empty environment, the intermediate gone at once.
REACTOR = r"""
import os, sys, time
out = sys.argv[1]
root = os.getpid()
if os.fork() == 0:
    while os.getppid() == root:
        time.sleep(0.005)
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            os.execve("/bin/sh", ["sh", "-c", "echo $$ > " + out + ".tmp; mv " + out + ".tmp " + out + "; exec sleep 60"], {})
        os._exit(0)
    time.sleep(60); os._exit(0)
time.sleep(60)
"""


# The same reaction one level further out: an escaped worker (new session, its intermediate
# gone, so the supervisor, a subreaper, adopted it) double-forks the bare worker as soon as the
# supervisor's death takes its parent.
ADOPTED = r"""
import os, sys, time
out = sys.argv[1]
supervisor = os.getppid()
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        while os.getppid() != supervisor:
            time.sleep(0.005)
        while os.getppid() == supervisor:
            time.sleep(0.005)
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                os.execve("/bin/sh", ["sh", "-c", "echo $$ > " + out + ".tmp; mv " + out + ".tmp " + out + "; exec sleep 60"], {})
            os._exit(0)
        time.sleep(60); os._exit(0)
    os._exit(0)
time.sleep(60)
"""


def reaction(runs: int, mode: str, program: str = REACTOR) -> tuple[int, int]:
    """Each run: the supervisor SIGKILLed once the member is recorded; whether the bare worker
    it forks in reaction survives (the tree walk's remaining gap; a cgroup holds it)."""
    import psutil  # noqa: PLC0415

    tmp = Path(tempfile.mkdtemp(prefix="hw-bench-reaction-"))

    def one(n: int) -> int:
        out = tmp / f"worker-{n}"
        proc = subprocess.Popen(
            [sys.executable, "-m", "hangwatch.cli", "run", "--run-dir", str(tmp / f"run-{n}"), "--gpu-probe", "none",
             "--interval", "0.5", "--containment", mode, "--quiet", "--", sys.executable, "-c", program, str(out)],
            cwd=tmp, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        tree = tmp / f"run-{n}" / "tree.json"
        while time.monotonic() < deadline and not (tree.exists() and tree.read_text().count("\"pid\"") >= 2):
            time.sleep(0.05)  # root and member recorded
        proc.kill()
        proc.wait(10)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not out.exists():
            time.sleep(0.05)
        time.sleep(3.0)
        try:
            pid = int(out.read_text())
            alive = psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
            psutil.Process(pid).kill()
        except (OSError, ValueError, psutil.Error):
            return 0
        return int(alive)

    with concurrent.futures.ThreadPoolExecutor(5) as pool:
        survived = sum(pool.map(one, range(runs)))
    return runs, survived


def moved(runs: int) -> tuple[int, int]:
    """Each run (``--containment cgroup``): the trainer's two SIGTERM-ignoring workers move
    themselves, one into a cgroup it makes below its attempt's, one out of it into the
    supervisor's own cgroup (with an empty environment: no mark); the trainer exits 0.
    Returns (workers, those alive 3 s after ``hangwatch run`` returned)."""
    import psutil  # noqa: PLC0415
    import test_trainer_managed_cgroups as t  # noqa: PLC0415

    tmp = Path(tempfile.mkdtemp(prefix="hw-bench-moved-"))

    def one(n: int) -> tuple[int, int]:
        pidfile = tmp / f"pids-{n}"
        subprocess.run(
            [sys.executable, "-m", "hangwatch.cli", "run", "--run-dir", str(tmp / f"run-{n}"), "--gpu-probe", "none",
             "--interval", "0.2", "--grace", "0.5", "--containment", "cgroup", "--quiet", "--",
             sys.executable, "-c", t.MOVER, str(pidfile), "1.0"],
            cwd=tmp, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)
        pids = [int(x) for x in pidfile.read_text().split()] if pidfile.exists() else []
        time.sleep(3.0)
        alive = [p for p in pids if t._alive(p)]
        for pid in alive:
            try:
                psutil.Process(pid).kill()
            except psutil.Error:
                pass
        return len(pids), len(alive)

    with concurrent.futures.ThreadPoolExecutor(5) as pool:
        results = list(pool.map(one, range(runs)))
    return sum(n for n, _ in results), sum(a for _, a in results)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--procs", type=int, default=64)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--moved-only", action="store_true", help="only the membership cost and the moved workers")
    args = parser.parse_args()
    m = membership(args.procs)
    print(f"membership of a {args.procs}-process tree per tick: walk {m['walk'] * 1e3:.2f} ms, "
          f"cgroup (its cgroups and the walk) {m['cgroup'] * 1e3:.2f} ms, ratio cgroup/walk {m['cgroup'] / m['walk']:.2f}")
    for mode in () if args.moved_only else ("cgroup", "tree"):
        total, survivors = race(args.runs, mode)
        print(f"race x{args.runs}, --containment {mode}: {survivors} of {total} processes survived the supervisor's SIGKILL")
    total, survivors = moved(args.runs)
    print(f"moved x{args.runs}, --containment cgroup: {survivors} of {total} workers that moved themselves (below "
          "the attempt's cgroup, or out of it) outlived the run")
    if args.moved_only:
        return 0
    for name, program in (("reaction", REACTOR), ("adopted reaction", ADOPTED)):
        for mode in ("cgroup", "tree"):
            total, survivors = reaction(args.runs, mode, program)
            print(f"{name} x{args.runs}, --containment {mode}: {survivors} of {total} bare workers forked after the "
                  "supervisor's SIGKILL survived")
    return 0


if __name__ == "__main__":
    sys.exit(main())
