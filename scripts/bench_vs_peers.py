#!/usr/bin/env python3
"""hangwatch against a peer on the same hang: a 2-rank torchrun/gloo job on the CPU.

    .venv/bin/python scripts/bench_vs_peers.py [--runs 3] [--modes sleep,spin] [--nvrx auto|off] [--nvrx-site DIR]
                                               [--light] [--cold] [--heavy]

The job trains a tiny model on 2 ranks (gloo), beats after every step and saves a
checkpoint every 5 steps. In the first attempt, rank 1 hangs after step 12, either
sleeping (``sleep``) or spinning the CPU (``spin``: a retry loop, a busy-polling engine);
rank 0 then blocks in ``all_reduce``. A new attempt resumes from the newest checkpoint.

It runs under:

* hangwatch with its default options (``hangwatch run -- python -m torch.distributed.run ...``:
  the launcher is prewarmed by default; heartbeats through ``hangwatch.trainer``; no GPU probe,
  so only the progress rule can fire); ``--cold`` adds a column with ``--no-prewarm-launcher``
  (torchrun's cold start on every relaunch), ``--light`` one around a launcher that imports
  nothing;
* NVIDIA's resiliency launcher ``ft_launcher`` with its rank heartbeat client: the 0.7.0
  wheel (Python >= 3.12 only; the fault_tolerance package is pure Python) fetched with
  ``pip download --python-version 3.12 --no-deps``, unpacked into a separate directory with
  its dependencies (defusedxml, httpx, protobuf, grpcio) installed beside it; or a directory
  prepared by hand (``--nvrx-site DIR``: what goes on PYTHONPATH, with a VERSION file saying
  what it is); only when 0.7.0 cannot be had or cannot run, the newest release pip accepts
  here. The option names are the ones its ``--help`` shows (newer than 0.7.0: ``--ft-ignore-missing-cfg``;
  0.7.0 itself declares that flag without an option string, so it always runs without a config;
  before: ``--ignore-missing-fault-tol-cfg``). The output's first line says which peer ran, and why
  it is not 0.7.0 when it is not;
* otherwise plain ``torchrun --max-restarts``, which has no hang detection.

``--heavy`` is the variant with heavier rank imports: one rank, which imports
``transformers.modeling_utils`` (8-16 s on this machine) after torch, hangs (sleeping) after
step 12 and is relaunched. Columns: NVRx; hangwatch's default (``-- torchrun``: the launcher
prewarmed, the rank cold); hangwatch with the rank prewarmed (``--prewarm-import
torch,transformers.modeling_utils -- python train.py``: the warm process becomes the rank, its
imports done ahead); hangwatch cold (``--no-prewarm-launcher -- torchrun``). Its last lines are
the ratios of the prewarmed rank against NVRx and against the cold relaunch.

Both tools get a 5 s timeout and a 0.5 s check interval. Times are seconds after the
hang began (rank 1's own timestamp), median over the runs. The last lines are

    first_step_ratio_vs_nvrx_default=<hangwatch default / NVRx, first step of the new attempt, sleeping hang>
    first_step_ratio_vs_nvrx_default_spin=<the same, spinning hang>
    busy_hang_detected=yes|no   (hangwatch caught the spinning hang in every run)
    bundles_complete=yes|no     (every hangwatch run wrote a bundle with every process dumped in every round)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
TIMEOUT_S, INTERVAL_S = 5.0, 0.5
HANG_AT, STEPS, SAVE_EVERY, STEP_TIME = 12, 20, 5, 0.2
RUN_DEADLINE_S = 60.0  # after the hang: a tool that has not recovered by then did not

TRAIN = r'''
import json, os, sys, time
T0 = time.time()
OUT = os.environ["BENCH_OUT"]
RANK = int(os.environ["RANK"])
TOOL = os.environ["BENCH_TOOL"]
MODE = os.environ["BENCH_HANG"]
HANG_AT, STEPS, SAVE_EVERY, STEP_TIME = (int(os.environ["BENCH_HANG_AT"]), int(os.environ["BENCH_STEPS"]),
                                         int(os.environ["BENCH_SAVE_EVERY"]), float(os.environ["BENCH_STEP_TIME"]))

def log(event, **kw):
    with open(os.path.join(OUT, f"events-{RANK}.jsonl"), "a") as f:
        f.write(json.dumps({"event": event, "t": time.time(), "pid": os.getpid(), "rank": RANK, **kw}) + "\n")

log("start", t=T0)
from datetime import timedelta
import torch
import torch.distributed as dist
if os.environ.get("BENCH_HEAVY"):
    import transformers.modeling_utils  # the heavier rank imports of a real trainer
log("imported")
HANG_RANK = int(os.environ.get("WORLD_SIZE", "2")) - 1
if RANK != 0:
    # Under a launcher that hosts no store (the light one), rank 0 hosts it: connect only
    # once it listens, or TCPStore's connect backoff adds seconds. Under torchrun it
    # already listens.
    import socket
    while True:
        try:
            socket.create_connection((os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])), 0.2).close()
            break
        except OSError:
            time.sleep(0.02)
dist.init_process_group("gloo", timeout=timedelta(minutes=30))
log("rendezvous")
if TOOL == "hangwatch":
    from hangwatch.trainer import beat as _beat
    beat = lambda step: _beat(step=step, phase="train")
elif TOOL == "nvrx":
    from nvidia_resiliency_ext.fault_tolerance import RankMonitorClient
    client = RankMonitorClient()
    client.init_workload_monitoring()
    beat = lambda step: client.send_heartbeat()
else:
    beat = lambda step: None

ckdir = os.path.join(OUT, "ckpt")
done = sorted(int(d.split("-")[1]) for d in os.listdir(ckdir) if os.path.exists(os.path.join(ckdir, d, "done")))
start = done[-1] if done else 0
torch.manual_seed(0)
model = torch.nn.Linear(64, 64)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
if start:
    model.load_state_dict(torch.load(os.path.join(ckdir, f"checkpoint-{start}", "model.pt")))
first_attempt = not os.path.exists(os.path.join(OUT, "hung"))
log("loaded", start=start)
for step in range(start + 1, STEPS + 1):
    loss = model(torch.randn(32, 64)).pow(2).mean()
    loss.backward()
    for p in model.parameters():
        dist.all_reduce(p.grad)
    opt.step()
    opt.zero_grad()
    time.sleep(STEP_TIME)
    beat(step)
    log("step", step=step)
    if RANK == 0 and step % SAVE_EVERY == 0:
        d = os.path.join(ckdir, f"checkpoint-{step}")
        os.makedirs(d, exist_ok=True)
        torch.save(model.state_dict(), os.path.join(d, "model.pt"))
        open(os.path.join(d, "done"), "w").close()
    if first_attempt and RANK == HANG_RANK and step == HANG_AT:
        open(os.path.join(OUT, "hung"), "w").close()
        log("hang", mode=MODE)
        if MODE == "sleep":
            while True:
                time.sleep(3600)
        while True:
            pass
log("done")
dist.destroy_process_group()
'''


# A launcher that imports nothing heavy: what a warm (or light) launcher would gain over
# a cold torchrun, which imports torch before it starts any rank.
LIGHT = r'''
import os, signal, subprocess, sys, time
procs = []
for rank in range(2):
    env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2", LOCAL_WORLD_SIZE="2")
    procs.append(subprocess.Popen([sys.executable] + sys.argv[1:], env=env))
signal.signal(signal.SIGTERM, lambda *_: [p.terminate() for p in procs] and sys.exit(143))
while True:
    codes = [p.poll() for p in procs]
    if any(c not in (None, 0) for c in codes):
        for p in procs:
            p.kill()
        sys.exit(1)
    if all(c == 0 for c in codes):
        sys.exit(0)
    time.sleep(0.05)
'''


# -- NVRx ------------------------------------------------------------------------------------


NVRX_DEPS = ["defusedxml", "httpx", "protobuf", "grpcio"]  # what 0.7.0's fault_tolerance imports besides torch


def nvrx_site(choice: str, cache: Path, given: Path | None = None) -> tuple[Path | None, str]:
    """A directory to put on PYTHONPATH for ft_launcher, and which release it holds (and, for a
    fallback, why 0.7.0 did not run)."""
    if choice == "off":
        return None, "not tried (--nvrx off)"
    if given is not None:
        marker = given / "VERSION"
        version = marker.read_text().strip() if marker.is_file() else f"as given with --nvrx-site {given}"
        why = _cannot_run(given)
        if why is None:
            return given, version
        print(f"nvrx: --nvrx-site {given}: cannot run ({why}); trying the index")
    site = cache / "site"
    marker = site / "VERSION"
    if marker.is_file() and _cannot_run(site) is None:
        return site, marker.read_text().strip()
    wheels = cache / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    pip = [PY, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-d", str(wheels)]
    tries = [(pip + ["--python-version", "3.12", "nvidia-resiliency-ext==0.7.0"], "0.7.0 (cp312 wheel, unpacked)"),
             (pip + ["nvidia-resiliency-ext"], "newest release pip accepts for this Python")]
    fallback_why = ""
    for argv, what in tries:
        for old in wheels.glob("nvidia_resiliency_ext-*.whl"):
            old.unlink()
        got = subprocess.run(argv, capture_output=True, text=True, timeout=300)
        found = sorted(wheels.glob("nvidia_resiliency_ext-*.whl"))
        if got.returncode != 0 or not found:
            why = ((got.stderr or got.stdout).strip().splitlines() or ["no wheel"])[-1]
            print(f"nvrx: {what}: not available ({why})")
            fallback_why = fallback_why or f"0.7.0 not available: {why}"
            continue
        wheel = found[-1]
        shutil.rmtree(site, ignore_errors=True)
        with zipfile.ZipFile(wheel) as zf:  # a wheel is a zip; unpacking skips pip's tag check
            zf.extractall(site)
        dep = subprocess.run([PY, "-m", "pip", "install", "--target", str(site), *NVRX_DEPS],
                             capture_output=True, text=True, timeout=600)
        why = (f"its dependencies ({', '.join(NVRX_DEPS)}) could not be installed" if dep.returncode != 0
               else _cannot_run(site))
        if why is not None:
            print(f"nvrx: {wheel.name}: cannot run ({why})")
            fallback_why = fallback_why or f"0.7.0 cannot run: {why}"
            continue
        version = f"{wheel.name.split('-')[1]} ({what}: {wheel.name})"
        if fallback_why:
            version += f"; FALLBACK, {fallback_why}"
        marker.write_text(version)
        return site, version
    return None, "not installable here"


def _cannot_run(site: Path) -> str | None:
    """None when ft_launcher starts from ``site`` (its --help); otherwise its last error line."""
    got = subprocess.run([PY, "-m", "nvidia_resiliency_ext.fault_tolerance.launcher", "--help"],
                         env=dict(os.environ, PYTHONPATH=str(site)), capture_output=True, text=True, timeout=120)
    if got.returncode == 0:
        return None
    return ((got.stderr or got.stdout).strip().splitlines() or [f"exit {got.returncode}"])[-1][:200]


#: ``nvrx_ignore_missing_cfg``'s answer for a release that takes no option to run without a config
NO_OPTION = "(none: this release always runs without a config file)"


def nvrx_ignore_missing_cfg(site: Path) -> str:
    """The option that lets ft_launcher run without a config file, as this release names it."""
    got = subprocess.run([PY, "-m", "nvidia_resiliency_ext.fault_tolerance.launcher", "--help"],
                         env=dict(os.environ, PYTHONPATH=str(site)), capture_output=True, text=True, timeout=120)
    for option in ("--ft-ignore-missing-cfg", "--ignore-missing-fault-tol-cfg"):
        if option in got.stdout:
            return option
    # 0.7.0 declares the flag with no option string (a positional store_true, which argparse
    # always sets): that release runs without a config file as it is, and refuses either name.
    return NO_OPTION


# -- one run ---------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


#: what ``--heavy`` ranks import, and so what the prewarmed rank imports ahead
HEAVY_IMPORTS = "torch,transformers.modeling_utils"


def command(tool: str, work: Path, port: int, heavy: bool = False, ignore_cfg: str = "") -> list[str]:
    train = [str(work / "train.py")]
    nproc = "1" if heavy else "2"
    rdzv = ["--nproc-per-node", nproc, "--master-addr", "127.0.0.1", "--master-port", str(port)]
    torchrun = [PY, "-m", "torch.distributed.run"]
    if tool.startswith("hangwatch"):
        # torchrun as ``python -m torch.distributed.run`` (this venv may have no console script):
        # a launcher hangwatch prewarms by default.
        launcher = [*torchrun, *rdzv, "--max-restarts", "0"]
        options: list[str] = []
        if tool == "hangwatch-cold":
            options = ["--no-prewarm-launcher"]
        elif tool == "hangwatch-light":
            launcher = [PY, str(work / "light.py")]
        elif tool == "hangwatch-rank":
            launcher = [PY]  # the warm process becomes the rank, its imports done ahead
            options = ["--prewarm-import", HEAVY_IMPORTS]
        return [str(Path(PY).with_name("hangwatch")), "run", "--run-dir", str(work / "hw"), "--gpu-probe", "none",
                "--interval", str(INTERVAL_S), "--progress-timeout", str(TIMEOUT_S),
                "--stall-window", str(TIMEOUT_S), "--max-restarts", "3", "--quiet", *options,
                "--", *launcher, *train]
    if tool == "nvrx":
        return [PY, "-m", "nvidia_resiliency_ext.fault_tolerance.launcher", *rdzv, "--max-restarts", "3",
                "--monitor-interval", str(INTERVAL_S),
                "--ft-workload-check-interval", str(INTERVAL_S),
                "--ft-rank-heartbeat-timeout", str(TIMEOUT_S),
                "--ft-initial-rank-heartbeat-timeout", "120",
                "--ft-node-health-check-interval", "5", "--ft-enable-nic-monitor", "false",
                *([] if ignore_cfg == NO_OPTION else [ignore_cfg or "--ignore-missing-fault-tol-cfg"]), *train]
    return [*torchrun, *rdzv, "--max-restarts", "3", "--monitor-interval", str(INTERVAL_S), *train]


def events(work: Path) -> list[dict]:
    out = []
    for path in work.glob("events-*.jsonl"):
        for line in path.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                pass  # a line being written
    return sorted(out, key=lambda e: e["t"])


def run_once(tool: str, mode: str, site: Path | None, base: Path, index: int, heavy: bool = False,
             ignore_cfg: str = "") -> dict:
    work = base / f"{tool}-{mode}-{index}"
    (work / "ckpt").mkdir(parents=True)
    (work / "train.py").write_text(TRAIN)
    (work / "light.py").write_text(LIGHT)
    port = free_port()
    env = dict(os.environ, BENCH_OUT=str(work), BENCH_TOOL=tool.split("-")[0], MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(port), BENCH_HANG=mode, BENCH_HANG_AT=str(HANG_AT),
               BENCH_STEPS=str(STEPS), BENCH_SAVE_EVERY=str(SAVE_EVERY), BENCH_STEP_TIME=str(STEP_TIME),
               OMP_NUM_THREADS="1", WORLD_SIZE="1" if heavy else "2")
    if heavy:
        env["BENCH_HEAVY"] = "1"
    if tool == "hangwatch-rank":  # no launcher: the one rank's own rendezvous variables
        env.update(RANK="0", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1")
    if site and tool == "nvrx":
        env["PYTHONPATH"] = str(site)
    lines: list[tuple[float, str]] = []
    with open(work / "tool.log", "w") as log:
        proc = subprocess.Popen(command(tool, work, port, heavy, ignore_cfg), cwd=work, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, start_new_session=True)

        def read() -> None:
            for line in proc.stdout:  # stamp each line as it arrives
                lines.append((time.time(), line))
                log.write(f"{time.time():.3f} {line}")

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        hang_t = gone_t = None
        old_pids: list[int] = []
        deadline = time.time() + 120.0
        warm_rss = 0
        next_rss = 0.0
        try:
            while proc.poll() is None and time.time() < deadline:
                if tool in ("hangwatch", "hangwatch-rank") and time.time() >= next_rss and (hang_t is None or time.time() < hang_t + 4.0):
                    warm_rss = max(warm_rss, _warm_rss(proc.pid))  # idle: before the verdict can use it
                    next_rss = time.time() + 0.5
                evs = events(work)
                if hang_t is None:
                    hang = next((e for e in evs if e["event"] == "hang"), None)
                    if hang is not None:
                        hang_t = hang["t"]
                        old_pids = sorted({e["pid"] for e in evs if e["event"] == "start"})
                        deadline = hang_t + RUN_DEADLINE_S
                elif gone_t is None and not any(_alive(p) for p in old_pids):
                    gone_t = time.time()
                if any(e["event"] == "done" for e in evs if hang_t and e["t"] > hang_t):
                    deadline = min(deadline, time.time() + 10.0)
                time.sleep(0.02)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
            for pid in old_pids:
                if _alive(pid):
                    os.kill(pid, signal.SIGKILL)
            reader.join(5)
    r = measure(tool, work, hang_t, gone_t, lines)
    if tool in ("hangwatch", "hangwatch-rank"):
        r["warm_rss_mb"] = round(warm_rss / 2**20, 1) if warm_rss else None
    return r


def _warm_rss(supervisor: int) -> int:
    """RSS of the supervisor's warm launcher process, 0 when there is none."""
    try:
        for child in psutil.Process(supervisor).children():
            if "hangwatch.supervisor.contain.warmstart" in " ".join(child.cmdline()):
                return child.memory_info().rss
    except psutil.Error:
        pass
    return 0


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def measure(tool: str, work: Path, hang_t: float | None, gone_t: float | None, lines) -> dict:
    evs = events(work)
    r: dict = {"tool": tool, "hang": hang_t is not None}
    if hang_t is None:
        return r
    after = [e for e in evs if e["t"] > hang_t]
    new_pids = {e["pid"] for e in after if e["event"] == "start"}
    starts = [e["t"] for e in after if e["event"] == "start"]
    steps = [e["t"] for e in after if e["event"] == "step" and e["pid"] in new_pids]
    r["gone"] = gone_t - hang_t if gone_t else None
    r["ranks_started"] = min(starts) - hang_t if starts else None
    r["first_step"] = min(steps) - hang_t if steps else None
    r["finished"] = any(e["event"] == "done" for e in after)
    if tool.startswith("hangwatch"):
        journal = [json.loads(x) for x in (work / "hw" / "journal.jsonl").read_text().splitlines() if x.strip()]
        inc = next((j for j in journal if j["event"] == "incident"), None)
        cap = next((j for j in journal if j["event"] == "capture"), None)
        second = next((j for j in journal if j["event"] == "attempt_started" and j["attempt"] == 2), None)
        r["detection"] = inc["ts"] - hang_t if inc else None
        r["kill_decision"] = cap["ts"] - hang_t if cap else None
        r["relaunch"] = second["ts"] - hang_t if second else None
        r["launch"] = ((second.get("launch") or {}).get("mode") if second else None)
        r["bundle_rounds"] = _bundle_rounds(Path(cap["evidence_path"])) if cap and cap.get("evidence_path") else None
    else:
        hit = next((t for t, line in lines if t > hang_t and ("Did not get subsequent heartbeat" in line
                                                              or "FT timeout elapsed" in line)), None)
        r["detection"] = hit - hang_t if hit else None
        r["kill_decision"] = r["detection"]
        r["relaunch"] = r["ranks_started"]
    return r


def _bundle_rounds(path: Path) -> str | None:
    try:
        manifest = json.loads((path / "manifest.json").read_text())
    except (OSError, ValueError):
        return None
    rounds = manifest["stacks"]["rounds"]
    ok = all(r["ok"] == r["processes"] and r["processes"] > 0 for r in rounds)
    kinds = "+".join("early" if r.get("early") else "final" for r in rounds)
    return f"{len(rounds)} rounds ({kinds}), {'all' if ok else 'NOT all'} processes dumped"


# -- report ----------------------------------------------------------------------------------

ROWS = [("detection", "detection"), ("kill_decision", "kill decision"),
        ("gone", "hung attempt's processes all gone"), ("relaunch", "relaunch started"),
        ("ranks_started", "new ranks started"), ("first_step", "first training step of the new attempt")]


LABELS = {"hangwatch": "hangwatch default (`-- torchrun`)", "hangwatch-cold": "hangwatch `--no-prewarm-launcher` (cold)",
          "hangwatch-light": "hangwatch, light launcher",
          "hangwatch-rank": "hangwatch, rank prewarmed (`--prewarm-import ... -- python train.py`)"}


def med(results: list[dict], key: str) -> float | None:
    values = [r[key] for r in results if r.get(key) is not None]
    return statistics.median(values) if values and len(values) == len(results) else None


def ratio(results: dict, ours: str, theirs: str, mode: str) -> float | None:
    if (ours, mode) not in results or (theirs, mode) not in results:
        return None
    a, b = med(results[(ours, mode)], "first_step"), med(results[(theirs, mode)], "first_step")
    return a / b if a is not None and b else None


def shown_ratio(value: float | None) -> str:
    return f"{value:.3f}" if value is not None else "n/a"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--modes", default=None, help="sleep,spin (default; --heavy: sleep)")
    parser.add_argument("--nvrx", choices=["auto", "off"], default="auto")
    parser.add_argument("--nvrx-dir", type=Path, default=Path(tempfile.gettempdir()) / "hangwatch-bench-nvrx",
                        help="where the NVRx wheel is fetched and unpacked (kept between runs)")
    parser.add_argument("--nvrx-site", type=Path, default=None,
                        help="a directory prepared by hand to put on PYTHONPATH for ft_launcher (a VERSION file in it "
                             "says what it is); tried first")
    parser.add_argument("--keep", action="store_true", help="keep the work directories")
    parser.add_argument("--light", action="store_true",
                        help="also run hangwatch around a launcher that imports nothing (no torchrun at all)")
    parser.add_argument("--cold", action="store_true",
                        help="also run hangwatch with --no-prewarm-launcher (torchrun cold on every relaunch)")
    parser.add_argument("--heavy", action="store_true",
                        help="the variant with heavier rank imports: one rank importing transformers; adds the "
                             "prewarmed-rank and cold columns")
    args = parser.parse_args(argv)
    modes = (args.modes or ("sleep" if args.heavy else "sleep,spin")).split(",")

    if args.heavy:
        extra_tools: tuple[str, ...] = ("hangwatch-rank", "hangwatch-cold")
    else:
        extra_tools = (("hangwatch-cold",) if args.cold else ()) + (("hangwatch-light",) if args.light else ())
    site, version = nvrx_site(args.nvrx, args.nvrx_dir, args.nvrx_site)
    peer = "nvrx" if site else "torchrun"
    ignore_cfg = nvrx_ignore_missing_cfg(site) if site else ""
    print(f"peer: {'NVRx ft_launcher ' + version + ' (' + ignore_cfg + ')' if site else 'plain torchrun --max-restarts (no hang detection); NVRx ' + version}")
    if args.heavy:
        print(f"job: 1 rank importing {HEAVY_IMPORTS}, gloo, CPU; it hangs (sleeping) after step {HANG_AT}; "
              f"timeout {TIMEOUT_S:g} s, interval {INTERVAL_S:g} s; median of {args.runs}")
    else:
        print(f"job: 2 ranks, gloo, CPU; rank 1 hangs after step {HANG_AT}; timeout {TIMEOUT_S:g} s, "
              f"interval {INTERVAL_S:g} s; median of {args.runs}")
    print("hangwatch runs with its default options (the torchrun launcher prewarmed by default)")
    base = Path(tempfile.mkdtemp(prefix="hangwatch-bench-peers-"))
    results: dict[tuple[str, str], list[dict]] = {}
    try:
        for mode in modes:
            for i in range(args.runs):
                for tool in ("hangwatch", peer) + extra_tools:
                    r = run_once(tool, mode, site, base, i, args.heavy, ignore_cfg)
                    results.setdefault((tool, mode), []).append(r)
                    shown = {k: (round(v, 2) if isinstance(v, float) else v) for k, v in r.items()}
                    print(f"  {mode} run {i + 1} {tool}: {shown}", flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)
        else:
            print(f"work directories kept in {base}")

    complete = True
    ours_tools = [t for t in ("hangwatch",) + extra_tools if t.startswith("hangwatch")]
    for mode in modes:
        print()
        print(f"{mode} hang (s after the hang began, median of {args.runs}):")
        tools = (peer, "hangwatch") + extra_tools
        print("| | " + " | ".join(LABELS.get(t, t) for t in tools) + " |")
        print("|---" * (len(tools) + 1) + "|")
        for key, label in ROWS:
            cells = []
            for tool in tools:
                v = med(results[(tool, mode)], key)
                cells.append(f"{v:.2f}" if v is not None else "never")
            print(f"| {label} | " + " | ".join(cells) + " |")
        for tool in ours_tools:
            runs = results[(tool, mode)]
            bundles = [r.get("bundle_rounds") for r in runs]
            complete = complete and all(b and "NOT" not in b for b in bundles)
            launches = [r.get("launch") for r in runs]
            rss = [r["warm_rss_mb"] for r in runs if r.get("warm_rss_mb")]
            print(f"{tool}: bundles {sorted(set(b or 'none' for b in bundles))}; relaunches {launches}"
                  + (f"; idle warm process RSS {statistics.median(rss):.0f} MB" if rss else ""))

    if args.heavy:
        print(f"first_step_ratio_prewarmed_rank_vs_nvrx={shown_ratio(ratio(results, 'hangwatch-rank', peer, 'sleep'))}")
        print("first_step_ratio_prewarmed_rank_vs_hangwatch_cold="
              f"{shown_ratio(ratio(results, 'hangwatch-rank', 'hangwatch-cold', 'sleep'))}")
        print(f"first_step_ratio_vs_nvrx_default={shown_ratio(ratio(results, 'hangwatch', peer, 'sleep'))}")
        print(f"bundles_complete={'yes' if complete else 'no'}")
        return 0
    if peer == "nvrx":
        for tool, name in (("hangwatch-cold", "cold_torchrun"), ("hangwatch-light", "light_launcher")):
            value = ratio(results, tool, "nvrx", "sleep")
            if value is not None:
                print(f"first_step_ratio_vs_nvrx_{name}={value:.3f}")
    print(f"first_step_ratio_vs_nvrx_default={shown_ratio(ratio(results, 'hangwatch', 'nvrx', 'sleep'))}")
    print(f"first_step_ratio_vs_nvrx_default_spin={shown_ratio(ratio(results, 'hangwatch', 'nvrx', 'spin'))}")
    spin = results.get(("hangwatch", "spin"), [])
    busy = bool(spin) and all(r.get("detection") is not None and r.get("first_step") is not None for r in spin)
    print(f"busy_hang_detected={'yes' if busy else 'no'}")
    print(f"bundles_complete={'yes' if complete else 'no'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
