"""End-to-end: the incident's stacks where the kernel refuses py-spy (in-process dumps), and
nothing changed where py-spy may attach. Real supervisor, real processes, real kernel refusal."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from hangwatch.contract.exitcodes import EXIT_BUDGET

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parents[2]
TRAINER = ROOT / "tests" / "fixtures" / "nondumpable_trainer.py"
CAPSH = shutil.which("capsh") or ("/usr/sbin/capsh" if os.path.exists("/usr/sbin/capsh") else None)


def _run(hw, *trainer_args: str, drop_ptrace: bool, stacks: str | None = None) -> subprocess.CompletedProcess:
    args = hw.fast_args(**{"--gpu-probe": "none", "--progress-timeout": "1.5", "--max-restarts": "0",
                           "--capture-timeout": "20", "--in-process-stacks": stacks})
    cli = [sys.executable, "-m", "hangwatch.cli", *args, "--", sys.executable, str(TRAINER), str(hw.pidfile), *trainer_args]
    if drop_ptrace:
        # Out of the bounding and effective sets: no process of the supervisor's may trace a
        # non-dumpable one, root or not.
        cli = [CAPSH, "--drop=cap_sys_ptrace", "--", "-c", 'exec "$0" "$@"', *cli]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run(cli, cwd=hw.tmp, env=env, capture_output=True, text=True, timeout=90)
    return proc


def _bundle(hw) -> Path:
    (bundle,) = [p for p in (hw.run_dir / "incidents").iterdir() if not p.name.startswith(".")]
    return bundle


def _replay(bundle: Path) -> dict:
    out = subprocess.run([sys.executable, "-m", "hangwatch.cli", "replay", "--json", str(bundle)], capture_output=True,
                         text=True, timeout=60, env=dict(os.environ, PYTHONPATH=str(ROOT)), check=True)
    return json.loads(out.stdout)


@pytest.mark.skipif(CAPSH is None, reason="capsh (libcap2-bin) is not installed: cannot drop CAP_SYS_PTRACE")
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root: capsh drops a capability only a privileged process holds")
def test_where_the_kernel_refuses_py_spy_every_thread_comes_from_the_processes_themselves(hw):
    result = _run(hw, drop_ptrace=True)
    assert result.returncode == EXIT_BUDGET, result.stderr
    assert [i["kind"] for i in hw.events("incident")] == ["silent_hang"]
    pids = hw.reported_pids()
    trainer, worker = pids["trainer"][0], pids["worker"][0]
    bundle = _bundle(hw)
    manifest = json.loads((bundle / "manifest.json").read_text())
    first = manifest["stacks"]["rounds"][0]
    refused = {d["pid"]: d["problem"] for d in first["dumps"]}
    assert refused == {trainer: "ptrace_denied", worker: "ptrace_denied"}, "the kernel refused py-spy"
    methods = {m["pid"]: m for m in manifest["stacks"]["methods"]}
    for pid in (trainer, worker):
        assert methods[pid]["method"] == "in-process" and "ptrace_denied" in methods[pid]["why"]
        threads = json.loads((bundle / "stacks" / "round-1" / f"pid-{pid}.json").read_text())
        functions = {t["thread_name"] or "other": [f["name"] for f in t["frames"]] for t in threads}
        assert set(functions) == {"MainThread", "other"}, "every Python thread of the process"
        assert "prefetch_loop" in functions["other"]
        assert ("execute_model" if pid == trainer else "all_reduce_stand_in") in functions["MainThread"]
        assert (bundle / "stacks" / "in-process" / f"pid-{pid}-round-1.txt").is_file()
    assert "stacks" in manifest["captured"]
    report = (bundle / "report.html").read_text()
    assert "execute_model" in report and "in-process" in report

    replayed = _replay(bundle)
    (incident,) = replayed["incidents"]
    # Classified as a py-spy bundle of the same hang is (the next test, and tests/diagnostics).
    assert (incident["signature_id"], incident["pid"], incident["thread"]) == ("vllm-cuda-graph-replay", trainer, "MainThread")
    assert incident["stack_methods"] == {"in-process": 2}
    rows = {r["pid"]: r for r in replayed["processes"]}
    assert rows[trainer]["state"] != "not dumped" and rows[worker]["state"] != "not dumped"
    assert not hw.alive()


@pytest.mark.skipif(CAPSH is None, reason="capsh (libcap2-bin) is not installed: cannot drop CAP_SYS_PTRACE")
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root: capsh drops a capability only a privileged process holds")
@pytest.mark.parametrize("stacks, method", [("all", "in-process"), (None, "none")])
def test_processes_that_never_import_hangwatch_are_covered_only_with_in_process_stacks_all(hw, stacks, method):
    result = _run(hw, "--plain", drop_ptrace=True, stacks=stacks)
    assert result.returncode == EXIT_BUDGET, result.stderr
    pids = hw.reported_pids()
    manifest = json.loads((_bundle(hw) / "manifest.json").read_text())
    methods = {m["pid"]: m for m in manifest["stacks"]["methods"]}
    for pid in (pids["trainer"][0], pids["worker"][0]):
        assert methods[pid]["method"] == method
        if method == "none":
            assert "unregistered" in methods[pid]["why"] and "--in-process-stacks all" in methods[pid]["why"]
    env = hw.events("attempt_started")[0]["env"]
    assert ("startup-hook" in env.get("PYTHONPATH", "")) == (stacks == "all")
    assert not hw.alive()


def test_where_py_spy_may_attach_it_is_used_and_no_process_is_signalled(hw):
    result = _run(hw, "--dumpable", drop_ptrace=False)
    assert result.returncode == EXIT_BUDGET, result.stderr
    pids = hw.reported_pids()
    bundle = _bundle(hw)
    manifest = json.loads((bundle / "manifest.json").read_text())
    methods = {m["pid"]: m["method"] for m in manifest["stacks"]["methods"]}
    assert methods[pids["trainer"][0]] == methods[pids["worker"][0]] == "py-spy"
    assert not any("in_process" in r for r in manifest["stacks"]["rounds"])
    assert not (bundle / "stacks" / "in-process").exists()
    attempt = hw.run_dir / "attempts" / "attempt-001"
    for pid in (pids["trainer"][0], pids["worker"][0]):
        text = (attempt / f"stacks-pid-{pid}.txt").read_text()
        assert text.count("\n") == 1 and "most recent call first" not in text, "the handler never ran"
    replayed = _replay(bundle)
    assert replayed["incidents"][0]["stack_methods"] == {"py-spy": 2}
    incident = replayed["incidents"][0]
    assert (incident["signature_id"], incident["pid"], incident["thread"]) == ("vllm-cuda-graph-replay", pids["trainer"][0],
                                                                            "MainThread")
    assert not hw.alive()
