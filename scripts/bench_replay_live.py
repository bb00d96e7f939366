#!/usr/bin/env python3
"""Replay's accuracy on real stacks of real hangs (scripts/live_hangs/).

Each scenario in scripts/live_hangs/ is a small Python program that hangs in a
known way and states, at module level, the cause id expected for each of its
processes (``EXPECTED = {role: "id | id"}``; read here with ``ast``, never
imported). The bench runs each one under a neutral name (``train.py`` in a
private temporary directory), waits until every role has called ``hw.ready()``,
captures the stacks the ways users get them, kills the scenario's whole process
group, and replays every dump (copied to a neutral ``dNNN.txt``) through
``hangwatch replay --json``. A dump is right when its headline signature is one
of the expected ids (``other:*`` matches ``other:*``).

Capture methods (``--methods``, default all): ``pyspy`` (py-spy dump),
``pyspy-native`` (py-spy dump --native), ``pyspy-json`` (py-spy dump --json, the
primary role of scenarios with ``PYSPY_JSON``), ``pyspy-subprocesses`` (py-spy dump
--subprocesses of the root, scenarios with ``TREE``), ``faulthandler-usr1``
(faulthandler registered on SIGUSR1), ``faulthandler-later``
(faulthandler.dump_traceback_later), ``sigint`` (the Ctrl-C traceback of the
primary role) and ``gdb`` (thread apply all bt on the primary role, scenarios with
``GDB``). py-spy and gdb need ptrace rights (root or CAP_SYS_PTRACE; Yama's
ptrace_scope); methods whose tool is missing or cannot attach are skipped with
one line.

Output: one line per method ``method=NAME right=R of=N`` and a last line
``total right=R of=N``; ``--show`` adds each miss. Slow (about 10 minutes for all
scenarios on 2 CPUs); it is not part of the test suite.

    .venv/bin/python scripts/bench_replay_live.py [--only NAME[,NAME]] [--methods M[,M]] [--show]
"""

from __future__ import annotations

import argparse
import ast
import atexit
import collections
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from hangwatch.contract.tools import run_bounded
from hangwatch.diagnostics.pyspy import find_pyspy

HERE = Path(__file__).resolve().parent / "live_hangs"
SUPPORT = ("hw.py", "peer.py", "ask_user.py", "mods")  # copied next to each scenario
METHODS = ("pyspy", "pyspy-native", "pyspy-json", "pyspy-subprocesses",
           "faulthandler-usr1", "faulthandler-later", "sigint", "gdb")
PYSPY_METHODS = {m for m in METHODS if m.startswith("pyspy")}
READY_TIMEOUT = 120.0   # scenario start (torch imports, torchrun) on a loaded 2-CPU machine
SETTLE = 3.5            # after ready: let the hang set in and dump_traceback_later fire
TOOL_TIMEOUT = 90.0     # each py-spy / gdb call
REPLAY_TIMEOUT = 60.0   # each replay

_live_groups: set[int] = set()   # process groups started and not yet reaped


# --- scenarios ---------------------------------------------------------------------------

def load_scenario(path: Path) -> dict | None:
    """The module-level literal settings of a scenario, or None for a helper file."""
    tree = ast.parse(path.read_text(), str(path))
    cfg: dict = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
            if name in ("EXPECTED", "TREE", "WAIT_FOR", "GDB", "PYSPY_JSON", "LAUNCHER", "SETTLE"):
                cfg[name] = ast.literal_eval(node.value)
    if "EXPECTED" not in cfg:
        return None
    cfg["name"] = path.stem
    cfg["path"] = path
    return cfg


def all_scenarios() -> list[dict]:
    out = []
    for p in sorted(HERE.glob("*.py")):
        if p.name in SUPPORT:
            continue
        cfg = load_scenario(p)
        if cfg:
            out.append(cfg)
    return out


# --- processes ---------------------------------------------------------------------------

def run_tool(cmd: list[str], timeout: float) -> tuple[int, str, str]:
    """``cmd``'s exit code (-9 when it timed out or could not start), stdout and stderr."""
    r = run_bounded(cmd, timeout)
    why = f"timed out after {timeout:.0f}s" if r.timed_out else (r.error or r.stderr)
    return (r.returncode if r.returncode is not None and not r.timed_out else -9), r.stdout, why


def start_group(cmd: list[str], **kw) -> subprocess.Popen:
    p = subprocess.Popen(cmd, start_new_session=True, **kw)
    _live_groups.add(p.pid)
    return p


def kill_group(p: subprocess.Popen) -> None:
    """SIGKILL the process group of ``p`` and every descendant (some may have left the group)."""
    procs = []
    try:
        import psutil  # noqa: PLC0415  (a hangwatch dependency)
        procs = psutil.Process(p.pid).children(recursive=True)
    except Exception:  # noqa: BLE001  (gone already, or no psutil)
        pass
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    for c in procs:
        try:
            c.kill()
        except Exception:  # noqa: BLE001, S110
            pass
    try:
        p.wait(10)
    except subprocess.TimeoutExpired:
        pass
    _live_groups.discard(p.pid)


def kill_all_groups() -> None:
    for pgid in list(_live_groups):
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        _live_groups.discard(pgid)


def leftovers(root: str) -> list[str]:
    """Processes still running from our private directory (cwd or command line under it)."""
    r = subprocess.run(["ps", "-eo", "pid=,args="], capture_output=True, text=True, timeout=30)
    left = [line.strip() for line in r.stdout.splitlines() if root in line and "ps -eo" not in line]
    for pid_dir in Path("/proc").glob("[0-9]*"):
        try:
            if os.readlink(pid_dir / "cwd").startswith(root):
                left.append(f"{pid_dir.name} (cwd under the bench's directory)")
        except OSError:
            pass
    return left


# --- tools -------------------------------------------------------------------------------

def probe_tools(methods: set[str], pyspy: str | None, workdir: Path) -> set[str]:
    """Drop the methods whose tool is absent or cannot attach, saying so in one line each."""
    wanted_pyspy = methods & PYSPY_METHODS
    if not wanted_pyspy and "gdb" not in methods:
        return methods
    sleeper = start_group([sys.executable, "-c", "import time; time.sleep(60)"], cwd=workdir,
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.5)
        if wanted_pyspy:
            if pyspy is None:
                print(f"skip {','.join(sorted(wanted_pyspy))}: py-spy not found ($HANGWATCH_PYSPY, PATH, or beside {sys.executable})")
                methods -= PYSPY_METHODS
            else:
                rc, out, err = run_tool([pyspy, "dump", "--pid", str(sleeper.pid)], 30)
                if rc != 0 or "Thread" not in out:
                    why = (err.strip().splitlines() or [f"rc={rc}"])[-1][:160]
                    print(f"skip {','.join(sorted(wanted_pyspy))}: py-spy cannot attach ({why}); needs root or CAP_SYS_PTRACE")
                    methods -= PYSPY_METHODS
        if "gdb" in methods:
            gdb = shutil.which("gdb")
            if gdb is None:
                print("skip gdb: gdb not found on PATH")
                methods.discard("gdb")
            else:
                rc, out, err = run_tool([gdb, "-p", str(sleeper.pid), "-batch", "-ex", "bt"], 60)
                if "#0" not in out:
                    why = ((err.strip().splitlines() or [f"rc={rc}"])[-1])[:160]
                    print(f"skip gdb: gdb cannot attach ({why}); needs root or CAP_SYS_PTRACE")
                    methods.discard("gdb")
    finally:
        kill_group(sleeper)
    return methods


# --- one scenario ------------------------------------------------------------------------

def capture(cfg: dict, job: Path, methods: set[str], pyspy: str | None, log) -> list[dict]:
    """Run one scenario, return its dumps as {role, method, expected, text}."""
    run = job / "run"
    run.mkdir(parents=True)
    shutil.copy(cfg["path"], job / "train.py")
    for s in SUPPORT:
        src = HERE / s
        (shutil.copytree if src.is_dir() else shutil.copy)(src, job / s)
    env = dict(os.environ, LIVE_HANG_RUN=str(run), PYTHONUNBUFFERED="1")
    env.pop("PYTHONPATH", None)
    if cfg.get("LAUNCHER"):
        launcher = list(cfg["LAUNCHER"])
        beside = Path(sys.executable).parent / launcher[0]
        if launcher[0] == "torchrun":
            launcher[:1] = [str(beside)] if beside.exists() else [sys.executable, "-m", "torch.distributed.run"]
        cmd = [*launcher, "train.py"]
    else:
        cmd = [sys.executable, str(job / "train.py")]
    roles = list(cfg["EXPECTED"])
    want = roles + list(cfg.get("WAIT_FOR", []))
    dumps: list[dict] = []

    def keep(role, method, expected, text):
        if text.strip():
            dumps.append(dict(role=role, method=method, expected=expected, text=text))
        else:
            log(f"  {cfg['name']} {role} {method}: empty")

    err_path = job / "stderr.txt"
    with open(err_path, "wb") as err, open(job / "stdout.txt", "wb") as out:
        root = start_group(cmd, cwd=job, env=env, stdin=subprocess.PIPE, stdout=out, stderr=err)
        try:
            pids: dict[str, int] = {}
            deadline = time.monotonic() + READY_TIMEOUT
            while time.monotonic() < deadline and len(pids) < len(want) and root.poll() is None:
                for r in want:
                    t = run / f"{r}.target"
                    if r not in pids and t.exists():
                        pids[r] = int(t.read_text())
                time.sleep(0.3)
            if len(pids) < len(want):
                tail = err_path.read_text(errors="replace")[-300:].strip().replace("\n", " | ")
                log(f"scenario {cfg['name']}: not ready after {READY_TIMEOUT:.0f}s (ready: {sorted(pids)}; "
                    f"exit code {root.poll()}; stderr: {tail})", always=True)
                return dumps
            time.sleep(cfg.get("SETTLE", SETTLE))
            for i, role in enumerate(roles):
                pid, exp = pids[role], cfg["EXPECTED"][role]
                for method, flags in (("pyspy", []), ("pyspy-native", ["--native"]), ("pyspy-json", ["--json"])):
                    if method not in methods or (method == "pyspy-json" and not (cfg.get("PYSPY_JSON") and i == 0)):
                        continue
                    rc, o, e = run_tool([pyspy, "dump", *flags, "--pid", str(pid)], TOOL_TIMEOUT)
                    keep(role, method, exp, o) if rc == 0 else log(f"  {role} {method} rc={rc} {e.strip()[:160]}")
                if "faulthandler-usr1" in methods and (run / f"{pid}.fh").exists():
                    try:
                        os.kill(pid, signal.SIGUSR1)
                        time.sleep(1.0)
                        keep(role, "faulthandler-usr1", exp, (run / f"{pid}.fh").read_text(errors="replace"))
                    except ProcessLookupError:
                        log(f"  {role} faulthandler-usr1: process gone")
                if "faulthandler-later" in methods and (run / f"{pid}.fhlater").exists():
                    keep(role, "faulthandler-later", exp, (run / f"{pid}.fhlater").read_text(errors="replace"))
                if "gdb" in methods and cfg.get("GDB") and i == 0:
                    rc, o, e = run_tool(["gdb", "-p", str(pid), "-batch", "-ex", "thread apply all bt"], TOOL_TIMEOUT)
                    keep(role, "gdb", exp, o + e if o.strip() else "")
            if "pyspy-subprocesses" in methods and cfg.get("TREE"):
                rc, o, e = run_tool([pyspy, "dump", "--subprocesses", "--pid", str(root.pid)], TOOL_TIMEOUT + 30)
                keep("tree", "pyspy-subprocesses", cfg["TREE"], o) if rc == 0 else log(f"  tree rc={rc} {e.strip()[:160]}")
            if "sigint" in methods:
                # Ctrl-C of the primary process last: it may end it
                role = roles[0]
                err.flush()
                pos = err_path.stat().st_size
                try:
                    os.kill(pids[role], signal.SIGINT)
                except ProcessLookupError:
                    pass
                time.sleep(2.5)
                with open(err_path, "rb") as f:
                    f.seek(pos)
                    t = f.read().decode(errors="replace")
                if "Traceback" in t or "KeyboardInterrupt" in t:
                    keep(role, "sigint", cfg["EXPECTED"][role], t)
                else:
                    log(f"  {role} sigint: no traceback")
        finally:
            kill_group(root)
    return dumps


def replay(path: Path) -> tuple[str | None, str]:
    """The headline signature id of ``hangwatch replay --json PATH`` (None when none), and any problem."""
    code = "import sys; from hangwatch.cli.main import main; sys.argv[0] = 'hangwatch'; sys.exit(main())"
    rc, out, err = run_tool([sys.executable, "-c", code, "replay", "--json", str(path)], REPLAY_TIMEOUT)
    try:
        incident = json.loads(out)["incidents"][0]
        return incident.get("signature_id"), ""
    except (ValueError, KeyError, IndexError, TypeError):
        return None, f"replay rc={rc}: {(err.strip().splitlines() or ['no output'])[-1][:160]}"


def right(expected: str, got: str | None) -> bool:
    alts = [a.strip() for a in expected.split("|")]
    return got in alts or (got or "").startswith("other:") and any(a.startswith("other:") for a in alts)


def _interrupt(signum, frame):
    raise KeyboardInterrupt


# --- main --------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", help="comma-separated scenario names (default: all); --list shows them")
    ap.add_argument("--methods", help=f"comma-separated capture methods (default: all of {','.join(METHODS)})")
    ap.add_argument("--show", action="store_true", help="print each miss: scenario, role, method, expected, got")
    ap.add_argument("--list", action="store_true", help="list the scenarios and their expected causes, and exit")
    ap.add_argument("--keep", metavar="DIR", type=Path,
                    help="also write each captured dump into DIR (a new or empty folder) as "
                         "SCENARIO.ROLE.METHOD.txt, its expected cause in a .expected file beside it, "
                         "to replay them again without rerunning the programs")
    ap.add_argument("-v", "--verbose", action="store_true", help="print capture progress")
    args = ap.parse_args(argv)
    if args.keep is not None and args.keep.exists() and (not args.keep.is_dir() or any(args.keep.iterdir())):
        ap.error(f"--keep {args.keep}: not an empty folder; name a new or empty one")

    scenarios = all_scenarios()
    if args.list:
        for s in scenarios:
            print(s["name"], json.dumps(s["EXPECTED"]))
        return 0
    if args.only:
        names = [n.strip() for n in args.only.split(",") if n.strip()]
        known = {s["name"] for s in scenarios}
        unknown = [n for n in names if n not in known]
        if unknown:
            ap.error(f"unknown scenario(s): {', '.join(unknown)} (see --list)")
        scenarios = [s for s in scenarios if s["name"] in names]
    methods = set(METHODS)
    if args.methods:
        methods = {m.strip() for m in args.methods.split(",") if m.strip()}
        bad = methods - set(METHODS)
        if bad:
            ap.error(f"unknown method(s): {', '.join(sorted(bad))}; choose from {','.join(METHODS)}")
    if args.keep is not None:
        try:
            args.keep.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as exc:
            ap.error(f"--keep {args.keep}: cannot create it ({exc.strerror})")

    def log(msg, always=False):
        if always or args.verbose:
            print(msg, file=sys.stderr, flush=True)

    # A job started in the background (`&`) inherits SIGINT ignored, and so would every
    # scenario (no Ctrl-C traceback): give SIGINT a handler, which exec resets to default.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _interrupt)
    atexit.register(kill_all_groups)

    base = Path(tempfile.mkdtemp())   # mode 0700
    rows = []
    t0 = time.monotonic()
    try:
        pyspy = find_pyspy()
        methods = probe_tools(methods, pyspy, base)
        n = 0
        for k, cfg in enumerate(scenarios):
            t = time.monotonic()
            job = base / "jobs" / f"j{k:02d}"
            job.mkdir(parents=True)
            try:
                dumps = capture(cfg, job, methods, pyspy, log)
            except KeyboardInterrupt:
                raise
            except Exception as exc:  # noqa: BLE001  (one scenario's failure does not end the bench)
                log(f"scenario {cfg['name']}: capture failed: {exc!r}", always=True)
                dumps = []
            ddir = base / "dumps"
            ddir.mkdir(exist_ok=True)
            for d in dumps:
                n += 1
                p = ddir / f"d{n:03d}{'.json' if d['method'] == 'pyspy-json' else '.txt'}"
                p.write_text(d["text"])
                if args.keep is not None:
                    kept = args.keep / f"{cfg['name']}.{d['role']}.{d['method']}{p.suffix}"
                    for path, text in ((kept, d["text"]), (kept.with_suffix(".expected"), d["expected"] + "\n")):
                        path.write_text(text)
                        path.chmod(0o600)
                got, problem = replay(p)
                rows.append(dict(scenario=cfg["name"], role=d["role"], method=d["method"],
                                 expected=d["expected"], got=got, ok=right(d["expected"], got), problem=problem))
            log(f"{cfg['name']}: {len(dumps)} dumps, {time.monotonic() - t:.1f}s")
    except KeyboardInterrupt:
        print("interrupted: killing the scenarios' processes", file=sys.stderr)
        kill_all_groups()
        shutil.rmtree(base, ignore_errors=True)
        return 130
    finally:
        kill_all_groups()
        left = leftovers(str(base))
        if left:
            print(f"left running ({len(left)}), killing:\n  " + "\n  ".join(left[:20]), file=sys.stderr)
            for line in left:
                try:
                    os.kill(int(line.split()[0]), signal.SIGKILL)
                except (ValueError, ProcessLookupError, PermissionError):
                    pass
        shutil.rmtree(base, ignore_errors=True)

    tot, ok = collections.Counter(), collections.Counter()
    for r in rows:
        tot[r["method"]] += 1
        ok[r["method"]] += r["ok"]
    if args.show:
        for r in rows:
            if not r["ok"]:
                print(f"MISS scenario={r['scenario']} role={r['role']} method={r['method']} "
                      f"expected={r['expected']!r} got={r['got']}" + (f" ({r['problem']})" if r["problem"] else ""))
    for m in METHODS:
        if m in tot:
            print(f"method={m} right={ok[m]} of={tot[m]}")
    print(f"total right={sum(ok.values())} of={sum(tot.values())}")
    log(f"scenarios={len(scenarios)} seconds={time.monotonic() - t0:.0f}", always=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
