#!/usr/bin/env python3
"""hangwatch against a peer on the same hang: a 2-rank torchrun/gloo job on the CPU.

    .venv/bin/python scripts/bench_vs_peers.py [--runs 3] [--modes sleep,spin] [--nvrx auto|off] [--light] [--cold]

The job trains a tiny model on 2 ranks (gloo), beats after every step and saves a
checkpoint every 5 steps. In the first attempt, rank 1 hangs after step 12, either
sleeping (``sleep``) or spinning the CPU (``spin``: a retry loop, a busy-polling engine);
rank 0 then blocks in ``all_reduce``. A new attempt resumes from the newest checkpoint.

It runs under:

* hangwatch (``hangwatch run --prewarm-launcher -- torchrun ...``, heartbeats through
  ``hangwatch.trainer``, no GPU probe, so only the progress rule can fire); ``--cold`` adds a
  column without ``--prewarm-launcher`` (torchrun's cold start on every relaunch), ``--light``
  one around a launcher that imports nothing;
* NVIDIA's resiliency launcher ``ft_launcher`` with its rank heartbeat client, when it can
  be installed: the 0.7.0 wheel (Python >= 3.12 only; the fault_tolerance package is pure
  Python) fetched with ``pip download --python-version 3.12 --no-deps`` and unpacked into a
  separate directory, else the newest release pip accepts here; the output says which ran;
* otherwise plain ``torchrun --max-restarts``, which has no hang detection.

Both tools get a 5 s timeout and a 0.5 s check interval. Times are seconds after the
hang began (rank 1's own timestamp), median over the runs. The last lines are

    first_step_ratio_vs_nvrx=<hangwatch / NVRx, first step of the new attempt, sleeping hang>
    busy_hang_detected=yes|no   (hangwatch caught the spinning hang in every run)
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
log("imported")
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
    if first_attempt and RANK == 1 and step == HANG_AT:
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


def nvrx_site(choice: str, cache: Path) -> tuple[Path | None, str]:
    """A directory to put on PYTHONPATH for ft_launcher, and which release it holds."""
    if choice == "off":
        return None, "not tried (--nvrx off)"
    site = cache / "site"
    marker = site / "VERSION"
    if marker.is_file():
        return site, marker.read_text().strip()
    wheels = cache / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    pip = [PY, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-d", str(wheels)]
    tries = [(pip + ["--python-version", "3.12", "nvidia-resiliency-ext==0.7.0"], "0.7.0 (cp312 wheel, unpacked)"),
             (pip + ["nvidia-resiliency-ext"], "newest release pip accepts for this Python")]
    for argv, what in tries:
        for old in wheels.glob("nvidia_resiliency_ext-*.whl"):
            old.unlink()
        got = subprocess.run(argv, capture_output=True, text=True, timeout=300)
        found = sorted(wheels.glob("nvidia_resiliency_ext-*.whl"))
        if got.returncode == 0 and found:
            break
        print(f"nvrx: {what}: not available ({(got.stderr or got.stdout).strip().splitlines()[-1:]})")
    else:
        return None, "not installable here"
    wheel = found[-1]
    shutil.rmtree(site, ignore_errors=True)
    with zipfile.ZipFile(wheel) as zf:  # a wheel is a zip; unpacking skips pip's tag check
        zf.extractall(site)
    dep = subprocess.run([PY, "-m", "pip", "install", "--no-deps", "--target", str(site), "defusedxml"],
                         capture_output=True, text=True, timeout=300)
    if dep.returncode != 0:
        return None, f"{wheel.name}: its dependency defusedxml could not be installed"
    version = f"{wheel.name.split('-')[1]} ({what}: {wheel.name})"
    marker.write_text(version)
    return site, version


# -- one run ---------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def command(tool: str, work: Path, port: int) -> list[str]:
    train = [str(work / "train.py")]
    rdzv = ["--nproc-per-node", "2", "--master-addr", "127.0.0.1", "--master-port", str(port)]
    torchrun = [PY, "-m", "torch.distributed.run"]
    if tool.startswith("hangwatch"):
        # The console script, as users type it (``-- torchrun``); its warm process imports its module.
        script = Path(PY).with_name("torchrun")
        launcher = ([*([str(script)] if script.exists() else torchrun), *rdzv, "--max-restarts", "0"]
                    if tool in ("hangwatch", "hangwatch-cold") else [PY, str(work / "light.py")])
        warm = ["--prewarm-launcher"] if tool == "hangwatch" else []
        return [str(Path(PY).with_name("hangwatch")), "run", "--run-dir", str(work / "hw"), "--gpu-probe", "none",
                "--interval", str(INTERVAL_S), "--progress-timeout", str(TIMEOUT_S),
                "--stall-window", str(TIMEOUT_S), "--max-restarts", "3", "--quiet", *warm,
                "--", *launcher, *train]
    if tool == "nvrx":
        return [PY, "-m", "nvidia_resiliency_ext.fault_tolerance.launcher", *rdzv, "--max-restarts", "3",
                "--monitor-interval", str(INTERVAL_S),
                "--ft-workload-check-interval", str(INTERVAL_S),
                "--ft-rank-heartbeat-timeout", str(TIMEOUT_S),
                "--ft-initial-rank-heartbeat-timeout", "120",
                "--ft-node-health-check-interval", "5", "--ft-enable-nic-monitor", "false",
                "--ignore-missing-fault-tol-cfg", *train]
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


def run_once(tool: str, mode: str, site: Path | None, base: Path, index: int) -> dict:
    work = base / f"{tool}-{mode}-{index}"
    (work / "ckpt").mkdir(parents=True)
    (work / "train.py").write_text(TRAIN)
    (work / "light.py").write_text(LIGHT)
    port = free_port()
    env = dict(os.environ, BENCH_OUT=str(work), BENCH_TOOL=tool.split("-")[0], MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(port), BENCH_HANG=mode, BENCH_HANG_AT=str(HANG_AT),
               BENCH_STEPS=str(STEPS), BENCH_SAVE_EVERY=str(SAVE_EVERY), BENCH_STEP_TIME=str(STEP_TIME),
               OMP_NUM_THREADS="1")
    if site and tool == "nvrx":
        env["PYTHONPATH"] = str(site)
    lines: list[tuple[float, str]] = []
    with open(work / "tool.log", "w") as log:
        proc = subprocess.Popen(command(tool, work, port), cwd=work, env=env, stdout=subprocess.PIPE,
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
                if tool == "hangwatch" and time.time() >= next_rss and (hang_t is None or time.time() < hang_t + 4.0):
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
    if tool == "hangwatch":
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


LABELS = {"hangwatch": "hangwatch (`--prewarm-launcher -- torchrun`)", "hangwatch-cold": "hangwatch (`-- torchrun`, cold)",
          "hangwatch-light": "hangwatch, light launcher"}


def med(results: list[dict], key: str) -> float | None:
    values = [r[key] for r in results if r.get(key) is not None]
    return statistics.median(values) if values and len(values) == len(results) else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--modes", default="sleep,spin")
    parser.add_argument("--nvrx", choices=["auto", "off"], default="auto")
    parser.add_argument("--nvrx-dir", type=Path, default=Path(tempfile.gettempdir()) / "hangwatch-bench-nvrx",
                        help="where the NVRx wheel is fetched and unpacked (kept between runs)")
    parser.add_argument("--keep", action="store_true", help="keep the work directories")
    parser.add_argument("--light", action="store_true",
                        help="also run hangwatch around a launcher that imports nothing (no torchrun at all)")
    parser.add_argument("--cold", action="store_true",
                        help="also run hangwatch without --prewarm-launcher (torchrun cold on every relaunch)")
    args = parser.parse_args(argv)

    extra_tools = (("hangwatch-cold",) if args.cold else ()) + (("hangwatch-light",) if args.light else ())
    site, version = nvrx_site(args.nvrx, args.nvrx_dir)
    peer = "nvrx" if site else "torchrun"
    print(f"peer: {'NVRx ft_launcher ' + version if site else 'plain torchrun --max-restarts (no hang detection); NVRx ' + version}")
    print(f"job: 2 ranks, gloo, CPU; rank 1 hangs after step {HANG_AT}; timeout {TIMEOUT_S:g} s, interval {INTERVAL_S:g} s; "
          f"median of {args.runs}")
    base = Path(tempfile.mkdtemp(prefix="hangwatch-bench-peers-"))
    results: dict[tuple[str, str], list[dict]] = {}
    try:
        for mode in args.modes.split(","):
            for i in range(args.runs):
                for tool in ("hangwatch", peer) + extra_tools:
                    r = run_once(tool, mode, site, base, i)
                    results.setdefault((tool, mode), []).append(r)
                    shown = {k: (round(v, 2) if isinstance(v, float) else v) for k, v in r.items()}
                    print(f"  {mode} run {i + 1} {tool}: {shown}", flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)
        else:
            print(f"work directories kept in {base}")

    for mode in args.modes.split(","):
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
        bundles = {r.get("bundle_rounds") for r in results[("hangwatch", mode)]}
        print(f"hangwatch bundles: {sorted(b or 'none' for b in bundles)}")
        launches = [r.get("launch") for r in results[("hangwatch", mode)]]
        rss = [r["warm_rss_mb"] for r in results[("hangwatch", mode)] if r.get("warm_rss_mb")]
        print(f"hangwatch relaunches: {launches}; idle warm launcher RSS: "
              f"{f'{statistics.median(rss):.0f} MB' if rss else 'not seen'}")

    ratio = "n/a"
    if peer == "nvrx" and ("hangwatch", "sleep") in results:
        ours, theirs = med(results[("hangwatch", "sleep")], "first_step"), med(results[("nvrx", "sleep")], "first_step")
        if ours is not None and theirs:
            ratio = f"{ours / theirs:.3f}"
    if peer == "nvrx" and ("hangwatch-cold", "sleep") in results:
        ours, theirs = (med(results[("hangwatch-cold", "sleep")], "first_step"),
                        med(results[("nvrx", "sleep")], "first_step"))
        if ours is not None and theirs:
            print(f"first_step_ratio_vs_nvrx_cold_torchrun={ours / theirs:.3f}")
    if peer == "nvrx" and ("hangwatch-light", "sleep") in results:
        ours, theirs = (med(results[("hangwatch-light", "sleep")], "first_step"),
                        med(results[("nvrx", "sleep")], "first_step"))
        if ours is not None and theirs:
            print(f"first_step_ratio_vs_nvrx_light_launcher={ours / theirs:.3f}")
    spin = results.get(("hangwatch", "spin"), [])
    busy = bool(spin) and all(r.get("detection") is not None and r.get("first_step") is not None for r in spin)
    print(f"first_step_ratio_vs_nvrx={ratio}")
    print(f"busy_hang_detected={'yes' if busy else 'no'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
