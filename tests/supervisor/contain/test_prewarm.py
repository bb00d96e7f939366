"""The prewarmed launcher (--prewarm-launcher): the plan (pure), and real runs of the CLI around a
console script shaped like torchrun's (``#!python``, ``from X import main``) whose entry module
records where and with what it ran."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import psutil
import pytest
from waiting import wait_for

from hangwatch.contract import env as names
from hangwatch.supervisor.contain.prewarm import (Prewarmer, WarmPlan, gpu_mappings, known_launcher, plan, spawn_due,
                                                  warm_environment)

pytestmark = pytest.mark.timeout(60)

FAKE_TRAINER = Path(__file__).resolve().parents[2] / "fixtures" / "fake_trainer.py"

# The launcher's entry module: records its import (in the warm process: before any attempt) and
# its run into rec.jsonl beside it, then starts the trainer as torchrun starts ranks.
ENTRY = r'''
import json, os, signal, subprocess, sys, time
import psutil

REC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "rec.jsonl")

def rec(**kw):
    with open(REC, "a") as f:
        f.write(json.dumps({"pid": os.getpid(), **kw}) + "\n")

rec(ev="import", attempt=os.environ.get("HANGWATCH_ATTEMPT"), argv=sys.argv)

def main():
    import __main__
    attempt = os.environ.get("HANGWATCH_ATTEMPT")
    with open("/proc/self/cgroup") as f:
        cgroup = f.read()
    rec(ev="main", attempt=attempt, graphs=os.environ.get("HANGWATCH_CUDAGRAPHS"), argv=sys.argv,
        orig_argv=sys.orig_argv, path=sys.path, file=__main__.__file__, cwd=os.getcwd(), cgroup=cgroup,
        env={k: v for k, v in os.environ.items() if not k.startswith("HANGWATCH_")}, sid=os.getsid(0))
    trainer = subprocess.Popen([sys.executable, *sys.argv[1:]])
    if os.environ.get("KILL_WARM") and attempt == "1":
        # Kill the next attempt's warm process (the supervisor's other python child) once it exists.
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            warm = [p for p in psutil.Process(os.getppid()).children()
                    if "hangwatch.supervisor.contain.warmstart" in " ".join(p.cmdline())]
            if warm:
                warm[0].send_signal(signal.SIGKILL)
                rec(ev="killed_warm", warm=warm[0].pid)
                break
            time.sleep(0.02)
    return trainer.wait()
'''


@pytest.fixture
def launcher(tmp_path: Path) -> Path:
    """A console script like pip writes for torchrun, next to its entry module."""
    (tmp_path / "warm_entry.py").write_text(ENTRY)
    script = tmp_path / "launch"
    script.write_text(f"#!{sys.executable}\nimport sys\nfrom warm_entry import main\n"
                      "if __name__ == '__main__':\n    sys.exit(main())\n")
    script.chmod(0o755)
    return script


def _records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


# -- the plan (pure) -------------------------------------------------------------------------

HEADS = {
    "/venv/bin/torchrun": b"#!/venv/bin/python\nimport re\nimport sys\nfrom torch.distributed.run import main\n"
                          b"if __name__ == '__main__':\n    sys.exit(main())\n",
    "/venv/bin/python": b"\x7fELF...",
    "/bin/bash": b"\x7fELF...",
    "/venv/bin/wrapper": b"#!/bin/sh\nexec torchrun \"$@\"\n",
    "train.py": b"import torch\n",
    "/venv/bin/accelerate": b"#!/venv/bin/python\nimport sys\nfrom accelerate.commands.accelerate_cli import main\n"
                            b"if __name__ == '__main__':\n    sys.exit(main())\n",
    "/venv/bin/deepspeed": b"#!/venv/bin/python\nimport sys\nfrom deepspeed.launcher.runner import main\n"
                           b"if __name__ == '__main__':\n    sys.exit(main())\n",
}


def _plan(argv: list[str], extra: tuple[str, ...] = ()) -> WarmPlan | str:
    def which(name, _env):
        return name if "/" in name else {"torchrun": "/venv/bin/torchrun", "python": "/venv/bin/python",
                                          "bash": "/bin/bash", "wrapper": "/venv/bin/wrapper",
                                          "accelerate": "/venv/bin/accelerate",
                                          "deepspeed": "/venv/bin/deepspeed"}.get(name)
    return plan(argv, {}, extra, which=which, head=HEADS.get)


def test_plan_imports_a_console_scripts_entry_module_and_runs_the_script_as_a_cold_start_would():
    p = _plan(["torchrun", "--nproc-per-node", "2", "train.py"])
    assert isinstance(p, WarmPlan)
    assert (p.interpreter, p.kind, p.target, p.imports) == ("/venv/bin/python", "script", "/venv/bin/torchrun",
                                                            ("torch.distributed.run",))
    # The resume argument a relaunch adds changes nothing but argv.
    assert _plan(["torchrun", "--nproc-per-node", "2", "train.py", "--resume", "ck"]) == p
    argv, orig = p.argv(["torchrun", "x.py", "--resume", "ck"])
    assert argv == ["/venv/bin/torchrun", "x.py", "--resume", "ck"]
    assert orig == ["/venv/bin/python", "/venv/bin/torchrun", "x.py", "--resume", "ck"]


def test_plan_for_python_m_imports_the_parent_package_never_the_module_itself():
    p = _plan(["python", "-u", "-m", "torch.distributed.run", "--nproc-per-node", "2", "train.py"],
              extra=("torch.distributed.run", "numpy"))
    assert isinstance(p, WarmPlan)
    assert (p.kind, p.target, p.flags, p.imports) == ("module", "torch.distributed.run", ("-u",),
                                                      ("torch.distributed", "numpy"))
    assert p.argv(["python", "-u", "-m", "torch.distributed.run", "t.py"]) == (
        ["-m", "t.py"], ["python", "-u", "-m", "torch.distributed.run", "t.py"])


def test_plan_for_a_script_imports_only_what_is_asked_and_refuses_what_it_cannot_repeat():
    p = _plan(["python", "train.py", "--lr", "1"], extra=("torch",))
    assert isinstance(p, WarmPlan) and (p.kind, p.target, p.imports, p.skip) == ("script", "train.py", ("torch",), 2)
    assert "not a Python launcher" in _plan(["bash", "run.sh"])
    assert "not Python directly" in _plan(["wrapper", "x"])
    assert "interpreter option" in _plan(["python", "-c", "print(1)"])
    assert "not a readable file" in _plan(["python", "missing.py"])
    assert "not found" in _plan(["nosuchcommand"])


def test_the_warm_process_is_due_once_the_attempt_is_up_and_its_environment_lacks_only_attempt_variables():
    assert not spawn_due(now=5.0, launched_at=0.0, beat_seen=False)
    assert spawn_due(now=5.0, launched_at=0.0, beat_seen=True)
    assert spawn_due(now=30.0, launched_at=0.0, beat_seen=False)
    env = {"PATH": "/bin", names.ATTEMPT: "2", names.CUDAGRAPHS: "0", names.HEARTBEAT: "/x", names.CONFIG: "c.toml"}
    assert warm_environment(env) == {"PATH": "/bin", names.CONFIG: "c.toml"}


def _known(argv: list[str], extra: tuple[str, ...] = ()) -> str | None:
    p = _plan(argv, extra)
    assert isinstance(p, WarmPlan), p
    return known_launcher(p, argv)


def test_the_default_prewarms_only_launchers_known_not_to_touch_the_gpu_at_import():
    assert _known(["torchrun", "--nproc-per-node", "2", "train.py"]) is None
    assert _known(["python", "-m", "torch.distributed.run", "train.py"]) is None
    assert _known(["accelerate", "launch", "train.py"]) is None
    assert _known(["python", "train.py"], extra=("torch",)) is None  # nothing of a launcher's; torch: asked for
    assert _known(["python", "-m", "mytrainer"]) is None  # a top-level module: nothing imported ahead
    assert "accelerate.commands.accelerate_cli without 'launch'" in _known(["accelerate", "env"])
    assert "deepspeed.launcher.runner is not a launcher known" in _known(["deepspeed", "train.py"])
    assert "mypkg.train is not a launcher known" in _known(["python", "-m", "mypkg.train"])


MAPS_CPU = """\
7f00-7f10 r-xp 00000000 08:01 1 /venv/lib/python3.11/site-packages/torch/lib/libtorch_cpu.so
7f10-7f20 r-xp 00000000 08:01 2 /venv/lib/python3.11/site-packages/nvidia/cuda_runtime/lib/libcudart.so.12
7f20-7f30 r-xp 00000000 08:01 3 /venv/lib/python3.11/site-packages/nvidia/nccl/lib/libnccl.so.2
7f30-7f40 rw-p 00000000 00:00 0 [heap]
7f40-7f50 rw-p 00000000 00:00 0
"""
MAPS_GPU = MAPS_CPU + """\
7f50-7f60 r-xp 00000000 08:01 4 /usr/lib/x86_64-linux-gnu/libcuda.so.535.129.03
7f60-7f70 rw-s 00000000 00:05 5 /dev/nvidiactl
7f70-7f80 r-xp 00000000 08:01 6 /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1
"""


def test_gpu_mappings_tell_a_touched_gpu_from_runtime_libraries_a_cuda_torch_maps_at_import():
    assert gpu_mappings(MAPS_CPU) == ([], ["libcudart.so.12", "libnccl.so.2"])
    touch, runtime = gpu_mappings(MAPS_GPU)
    assert touch == ["/dev/nvidiactl", "libcuda.so.535.129.03", "libnvidia-ml.so.1"]
    assert runtime == ["libcudart.so.12", "libnccl.so.2"]
    assert gpu_mappings("garbage\n\n7f 7f 7f\n") == ([], [])


def _ready_prewarmer(tmp_path: Path, maps_text: str | None, **kw) -> tuple[Prewarmer, list, list[str]]:
    """A Prewarmer whose warm process (a plain python script: nothing imported) has said it is
    ready and been checked, with ``maps_text`` planted as its memory maps."""
    script = tmp_path / "train.py"
    script.write_text("print('ran')\n")
    events: list = []
    prewarm = Prewarmer(notify=lambda event, fields: events.append((event, fields)),
                        maps=lambda _pid: maps_text, rss=lambda _pid: 12.5, **kw)
    command = [sys.executable, str(script)]
    prewarm.launched(command, dict(os.environ))
    prewarm.tick(beat_seen=True)
    wait_for(lambda: (prewarm.tick(beat_seen=True), events)[1], 20, "the warm process ready and checked")
    return prewarm, events, command


def test_a_warm_process_with_a_gpu_library_mapped_is_discarded_and_the_relaunch_is_cold(tmp_path):
    prewarm, events, command = _ready_prewarmer(tmp_path, MAPS_GPU, mode="auto")
    try:
        (event, fields), = events
        assert event == "prewarm_discarded" and "libcuda.so.535.129.03" in fields["reason"]
        wait_for(lambda: not _running(fields["pid"]), 10, "the discarded warm process killed at once")
        trainer, how = prewarm.take(command, dict(os.environ, HANGWATCH_ATTEMPT="2"), tmp_path / "a2", echo=False)
        assert trainer is None and how["mode"] == "cold"
        assert "discarded" in how["reason"] and "GPU driver" in how["reason"]
    finally:
        prewarm.close()


def test_a_warm_process_without_one_is_journaled_ready_with_its_memory_and_used(tmp_path):
    prewarm, events, command = _ready_prewarmer(tmp_path, MAPS_CPU, mode="auto")
    try:
        (event, fields), = events
        assert event == "prewarm_ready" and fields["rss_mb"] == 12.5
        assert fields["cuda_runtime_libs"] == ["libcudart.so.12", "libnccl.so.2"]
        trainer, how = prewarm.take(command, dict(os.environ, HANGWATCH_ATTEMPT="2"), tmp_path / "a2", echo=False)
        assert trainer is not None and how["mode"] == "warm" and how["rss_mb"] == 12.5
        assert trainer.popen.wait(30) == 0
        trainer.join_output(5)
    finally:
        prewarm.close()


def test_unreadable_maps_mean_a_cold_relaunch(tmp_path):
    prewarm, events, command = _ready_prewarmer(tmp_path, None, mode="auto")
    try:
        assert events[0][0] == "prewarm_discarded" and "memory maps could not be read" in events[0][1]["reason"]
        trainer, how = prewarm.take(command, dict(os.environ), tmp_path / "a2", echo=False)
        assert trainer is None and how["mode"] == "cold"
    finally:
        prewarm.close()


def test_an_unknown_launcher_is_cold_by_default_and_warm_when_asked(tmp_path):
    script = tmp_path / "ds"
    script.write_text(f"#!{sys.executable}\nimport sys\nfrom no_such_launcher_mod.runner import main\n"
                      "if __name__ == '__main__':\n    sys.exit(main())\n")
    script.chmod(0o755)
    auto = Prewarmer(mode="auto")
    auto.launched([str(script), "x"], dict(os.environ))
    auto.tick(beat_seen=True)
    assert auto.warm_pid is None
    trainer, how = auto.take([str(script), "x"], dict(os.environ), tmp_path / "a2", echo=False)
    assert trainer is None and "no warm start by default" in how["reason"] and "--prewarm-launcher" in how["reason"]
    on = Prewarmer(mode="on")
    on.launched([str(script), "x"], dict(os.environ))
    on.tick(beat_seen=True)
    try:
        assert on.warm_pid is not None
    finally:
        on.close()


# -- real runs -------------------------------------------------------------------------------


def _args(hw, launcher: Path, *trainer: str, extra: tuple[str, ...] = ()) -> list[str]:
    return hw.fast_args() + ["--prewarm-launcher", "--quiet", *extra, "--", str(launcher), str(FAKE_TRAINER),
                             "--pidfile", str(hw.pidfile), *trainer]


@pytest.mark.slow
def test_a_relaunch_after_a_kill_goes_through_the_warm_process(hw, launcher):
    rec = hw.tmp / "rec.jsonl"  # written by the entry module
    result = hw.run(_args(hw, launcher, "--beats", "3", "--wedge", "--wedge-unless-graphs-off"))
    assert result.returncode == 0, result.stderr
    first, second = hw.events("attempt_started")
    assert first["launch"] == {"mode": "cold", "reason": "the first attempt"}
    assert second["launch"]["mode"] == "warm", second["launch"]

    records = _records(rec)
    mains = {r["attempt"]: r for r in records if r["ev"] == "main"}
    cold, warm = mains["1"], mains["2"]
    assert warm["pid"] == second["pid"]
    # The entry module was imported in the warm process before any attempt was its own, seeing
    # the command's argv as a cold import does...
    imported = next(r for r in records if r["ev"] == "import" and r["pid"] == warm["pid"])
    assert imported["attempt"] is None and imported["argv"] == cold["argv"]
    # ...and the attempt then ran with the attempt's environment and argv, as the cold one did.
    assert (cold["graphs"], warm["graphs"]) == ("1", "0")
    assert warm["argv"] == cold["argv"] and warm["argv"][0] == str(launcher)
    for key in ("orig_argv", "path", "file", "cwd", "env"):
        assert warm[key] == cold[key], key
    assert warm["sid"] == warm["pid"], "the warm root leads a session of its own, like a cold one"
    if hw.events("run_started")[0]["containment"] == "cgroup":
        assert "attempt-002" in warm["cgroup"]

    # It was alive before attempt 1 was killed, and was not part of what was killed.
    kill = hw.events("kill")[0]
    assert warm["pid"] not in kill["pids"]
    assert second["create_time"] < kill["ts"]

    # The warm process started for a third attempt that never came is gone with the run.
    unused = {r["pid"] for r in records if r["ev"] == "import"} - {r["pid"] for r in records if r["ev"] == "main"}
    assert unused, "attempt 2 got a warm process of its own"
    assert not [p for p in unused if _running(p)]


@pytest.mark.slow
@pytest.mark.parametrize("failure", ["killed", "import"])
def test_a_warm_process_that_died_or_could_not_import_means_a_cold_launch_that_says_why(hw, launcher, failure):
    rec = hw.tmp / "rec.jsonl"  # written by the entry module
    extra = ("--prewarm-import", "no_such_module_for_hangwatch_test") if failure == "import" else ()
    if failure == "killed":
        os.environ["KILL_WARM"] = "1"  # the CLI's environment (the fixture copies os.environ)
    try:
        result = hw.run(_args(hw, launcher, "--beats", "3", "--wedge", "--wedge-unless-graphs-off", extra=extra))
    finally:
        os.environ.pop("KILL_WARM", None)
    assert result.returncode == 0, result.stderr
    second = hw.events("attempt_started")[1]
    assert second["launch"]["mode"] == "cold"
    if failure == "killed":
        killed = next(r["warm"] for r in _records(rec) if r["ev"] == "killed_warm")
        assert "exited with -9" in second["launch"]["reason"]
        assert second["pid"] != killed
    else:
        assert "cannot import no_such_module_for_hangwatch_test" in second["launch"]["reason"]
    assert {r["attempt"] for r in _records(rec) if r["ev"] == "main"} == {"1", "2"}


@pytest.mark.slow
def test_an_unused_warm_process_dies_with_a_sigkilled_supervisor(hw, launcher):
    rec = hw.tmp / "rec.jsonl"  # written by the entry module
    proc = hw.start(_args(hw, launcher, "--beats", "2", "--hang"))
    wait_for(lambda: any(r["ev"] == "import" and r["attempt"] is None for r in _records(rec)), 20,
             "the warm process imported the entry module")
    warm = next(r["pid"] for r in _records(rec) if r["ev"] == "import" and r["attempt"] is None)
    assert _running(warm)
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    wait_for(lambda: not _running(warm), 10, "the warm process gone with its supervisor")
    wait_for(lambda: not hw.alive(timeout=0), 10, "the attempt's processes gone (the guardian's work)")


MODULE = r'''
import json, os, sys
if __name__ == "__main__":
    with open(os.environ["REC_FILE"], "a") as f:
        f.write(json.dumps({"pid": os.getpid(), "attempt": os.environ.get("HANGWATCH_ATTEMPT"), "argv": sys.argv,
                            "orig_argv": sys.orig_argv, "path0": sys.path[0], "file": __file__, "spec": __spec__.name,
                            "names": sorted(n for n in globals() if not n.startswith("__")),
                            "parent_loaded": "wpkg" in sys.modules}) + "\n")
'''


def test_python_m_through_the_warm_process_runs_the_module_as_a_cold_start_would(tmp_path):
    """In-process (no CLI): ``python -m wpkg.launch`` cold, then the same command through a warm process."""
    import subprocess  # noqa: PLC0415

    from hangwatch.supervisor.contain.prewarm import Prewarmer  # noqa: PLC0415

    (tmp_path / "wpkg").mkdir()
    (tmp_path / "wpkg" / "__init__.py").write_text("")
    (tmp_path / "wpkg" / "launch.py").write_text(MODULE)
    rec = tmp_path / "rec.jsonl"
    command = [sys.executable, "-m", "wpkg.launch", "--x", "1"]
    env = dict(os.environ, REC_FILE=str(rec))
    here = os.getcwd()
    os.chdir(tmp_path)  # -m finds wpkg in the working directory, cold or warm
    prewarm = Prewarmer()
    try:
        subprocess.run(command, env=dict(env, HANGWATCH_ATTEMPT="1"), timeout=30, check=True)
        prewarm.launched(command, env)
        prewarm.tick(beat_seen=True)
        trainer, how = prewarm.take(command + ["--resume"], dict(env, HANGWATCH_ATTEMPT="2"), tmp_path / "a2",
                                    echo=False)
        assert trainer is not None, how
        assert trainer.popen.wait(30) == 0
        trainer.join_output(5)
    finally:
        prewarm.close()
        os.chdir(here)
    cold, warm = _records(rec)
    assert (cold["attempt"], warm["attempt"]) == ("1", "2") and how["mode"] == "warm"
    assert warm["argv"] == cold["argv"] + ["--resume"] and warm["orig_argv"] == cold["orig_argv"] + ["--resume"]
    for key in ("path0", "file", "spec", "names"):
        assert warm[key] == cold[key], key
    assert warm["parent_loaded"], "the parent package was imported ahead"


@pytest.mark.slow
@pytest.mark.parametrize("option", [None, "--no-prewarm-launcher"])
def test_by_default_a_python_script_relaunches_warm_and_status_shows_which_path(hw, option):
    args = hw.fast_args() + ([option] if option else []) + ["--quiet", "--", sys.executable, str(FAKE_TRAINER),
                                                           "--pidfile", str(hw.pidfile), "--beats", "3", "--wedge",
                                                           "--wedge-unless-graphs-off"]
    result = hw.run(args)
    assert result.returncode == 0, result.stderr
    second = hw.events("attempt_started")[1]
    status = hw.run(["status", str(hw.run_dir)])
    assert status.returncode == 0, status.stderr
    if option is None:
        assert second["launch"]["mode"] == "warm", second["launch"]
        ready = hw.events("prewarm_ready")[0]
        assert ready["rss_mb"] > 0 and ready["pid"] == second["pid"]
        assert "launch   attempt 2: warm (prewarmed launcher, RSS" in status.stdout
    else:
        assert second["launch"] == {"mode": "cold", "reason": "prewarming is off (--no-prewarm-launcher)"}
        assert not hw.events("prewarm_ready")
        assert "attempt 2: cold (prewarming is off" in status.stdout
