"""Helpers for diagnostics tests: hung-tree plumbing, py-spy stand-ins, capture
requests with a realistic sample window. (Not conftest: several conftest.py
files share one module name, so tests import this instead.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from hangwatch.diagnostics.bundle import dumps_json, write_bundle
from hangwatch.contract.capture import CaptureRequest, TreeProcess
from hangwatch.contract.verdict import Verdict
from hangwatch.supervisor.decide.detector import Detector, DetectorConfig
from hangwatch.contract.heartbeat import Heartbeat
from hangwatch.contract.samples import DeviceSample, Sample

HERE = Path(__file__).resolve().parent
DATA = HERE / "data"
PASTED = DATA / "pasted"  # the corpus of real pasted dumps
FIXTURES = HERE / "fixtures"
HUNG_TRAINER = FIXTURES / "hung_trainer.py"
PYSPY_HANG = FIXTURES / "pyspy_hang.sh"
PYSPY_DENIED = FIXTURES / "pyspy_denied.sh"
ROOT = HERE.parents[1]

SECRETS = {
    "HF_TOKEN": "hf_QmT7xVb2LpR9sWc4KdNe8YuZa1",
    "DB_PASSWORD": "Tr0ub4dor-and-3",
    "WANDB_API_KEY": "9f8e7d6c5b4a39281706f5e4d3c2b1a098765432",
    "AWS_ACCESS_KEY_ID": "AKIAIOSFODNN7EXAMPLE",
}
CMDLINE_SECRET = "sk-proj-4hG7kL2mN9pQ5rS8tV1wX3yZ"


@dataclass
class HungTree:
    proc: subprocess.Popen
    tree: list[TreeProcess]
    log: Path

    @property
    def pids(self) -> list[int]:
        return [tp.pid for tp in self.tree]


def _tree_process(proc: psutil.Process) -> TreeProcess:
    return TreeProcess(
        pid=proc.pid,
        create_time=proc.create_time(),
        ppid=proc.ppid(),
        pgid=os.getpgid(proc.pid),
        sid=os.getsid(proc.pid),
        name=proc.name(),
        cmdline=tuple(proc.cmdline()),
    )


def _all_in_replay(pids: list[int]) -> bool:
    for pid in pids:
        try:
            wchan = Path(f"/proc/{pid}/wchan").read_text()
        except OSError:
            return False
        if "nanosleep" not in wchan:
            return False
    return True


def stall_samples(pid: int, *, n: int = 40, stall_at: int = 10, interval: float = 1.0, t0: float | None = None) -> list[Sample]:
    """Progress with a busy GPU and CPU until ``stall_at``, then GPU 100 %, CPU idle, no beats."""
    t0 = time.monotonic() - n * interval if t0 is None else t0
    wall0 = time.time() - n * interval
    out = []
    for i in range(n):
        stalled = i >= stall_at
        out.append(
            Sample(
                t=t0 + i * interval,
                wall=wall0 + i * interval,
                cpu_pct={pid: 0.3 if stalled else 85.0},
                gpu=(DeviceSample(0, 100.0 if stalled else 70.0, 40000.0, (pid,)),),
                heartbeat=Heartbeat(pid, min(i, stall_at - 1), 0.0, min(i, stall_at - 1), "generate"),
                tree_size=1,
            )
        )
    return out


def detect(samples: list[Sample], config: DetectorConfig) -> Verdict:
    det = Detector(config, start=samples[0].t)
    for s in samples:
        v = det.observe(s)
        if v is not None:
            return v
    raise AssertionError("detector did not fire on the stall samples")


def make_request(run_dir: Path, tree: HungTree | None, *, deadline_s: float = 30.0, extra: dict[str, Any] | None = None) -> CaptureRequest:
    config = DetectorConfig(stall_window=20.0)
    pid = tree.tree[0].pid if tree else 1
    samples = stall_samples(pid)
    log_paths: dict[str, Path] = {}
    if tree is not None:
        attempt_dir = tree.log.parent / "attempt-1"
        attempt_dir.mkdir(exist_ok=True)
        log_paths = {"stdout": tree.log, "stderr": tree.log, "attempt_dir": attempt_dir}
    return CaptureRequest(
        run_dir=run_dir,
        run_id="test-run",
        attempt=1,
        verdict=detect(samples, config),
        samples=samples,
        tree=tree.tree if tree else [],
        log_paths=log_paths,
        thresholds=config.to_json(),
        deadline=time.monotonic() + deadline_s,
        extra=extra or {},
    )


def run_cli(*args: str, ulimit_kib: int | None = None) -> subprocess.CompletedProcess:
    """Run ``hangwatch`` in a subprocess (under ``ulimit -v`` when ``ulimit_kib`` is given)."""
    cmd = [sys.executable, "-m", "hangwatch.cli", *args]
    if ulimit_kib is not None:
        cmd = ["bash", "-c", f'ulimit -v {ulimit_kib} && exec "$@"', "bash", *cmd]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60, cwd=ROOT)


def usage_error(capsys, *args: str) -> str:
    """Run the CLI in-process; it must refuse with one ``hangwatch: error:`` line (exit 2)."""
    from hangwatch.cli.main import main  # noqa: PLC0415

    capsys.readouterr()
    assert main(list(args)) == 2
    err = capsys.readouterr().err
    assert err.startswith("hangwatch: error:") and err.count("\n") == 1 and "Traceback" not in err, err
    return err


def chromium() -> str | None:
    import shutil  # noqa: PLC0415

    return shutil.which("chromium") or shutil.which("chromium-browser")


def synthetic_bundle(tmp_path, name="20260101T000000-attempt1-stall", window=20.0):
    """A bundle as capture writes it, with a stall starting at +10 s of 40 samples."""
    samples = stall_samples(4242, n=40, stall_at=10, t0=1000.0)
    config = DetectorConfig(stall_window=window)
    manifest = {
        "schema": 1, "kind": "hangwatch-incident", "run_id": "r", "attempt": 1,
        "verdict": {"kind": "stall", "onset": 1010.0, "detected_at": 1030.0, "latency_s": 20.0, "reason": "test"},
        "thresholds": config.to_json(), "captured": ["stacks", "samples"], "failed": {},
    }
    raw = (DATA / "cuda_graph_real.json").read_text().replace('"pid": 7764', '"pid": 4242')
    files = {
        "manifest.json": dumps_json(manifest),
        "samples.jsonl": "".join(json.dumps(s.to_json()) + "\n" for s in samples),
        "stacks/round-1/pid-4242.json": raw,
        "stacks/round-2/pid-4242.json": raw,
        "processes.json": dumps_json([{"pid": 4242, "ppid": 1, "name": "python", "state": "S", "cmdline": ["python", "grpo.py"]}]),
    }
    return write_bundle(tmp_path / "run" / "incidents" / name, files)


def pasted_verdict(name: str) -> str:
    """Replay's signature for the corpus dump ``name`` (``unknown`` when none matched)."""
    return _signature_of(PASTED / f"{name}.txt")


def text_verdict(tmp_path: Path, text: str) -> str:
    """Replay's signature for ``text`` pasted into a file."""
    path = tmp_path / "paste.txt"
    path.write_text(text)
    return _signature_of(path)


def _signature_of(path: Path) -> str:
    from hangwatch.diagnostics.replay import analyse
    from hangwatch.diagnostics.signatures import load_signatures

    (incident,) = analyse([path], load_signatures())
    return incident.classification.signature_id or "unknown"


def one_process(text: str):
    """A paste read as exactly one process: the parse report and that process."""
    from hangwatch.diagnostics.pastes import read_text  # noqa: PLC0415

    report = read_text(text)
    assert len(report.processes) == 1, report.processes
    return report, report.processes[0]


def thread_functions(text: str) -> list[list[str]]:
    """Each thread of a paste as its functions, innermost first, over every process read."""
    from hangwatch.diagnostics.pastes import read_text  # noqa: PLC0415

    return [[f.function for f in t.frames] for p in read_text(text).processes for t in p.threads]


def frame_texts(thread) -> list[str]:
    """A thread's frames as replay renders them, innermost first."""
    return [f.render() for f in thread.frames]


def pyspy_dump_json(pid: int, frames: int = 3) -> list[dict]:
    """One process's py-spy JSON dump (what a bundle's stacks/round-R/pid-P.json holds)."""
    return [{"pid": pid, "thread_id": 1, "os_thread_id": pid, "thread_name": "MainThread", "owns_gil": False,
             "active": False, "frames": [{"name": f"f{i}", "filename": "/srv/train.py", "line": i + 1}
                                         for i in range(frames)]}]


MINIMAL_MANIFEST = {"schema": 1, "kind": "hangwatch-incident", "verdict": {"kind": "stall", "reason": "r"}}


def write_minimal_bundle(tmp_path: Path, files: dict[str, object]) -> Path:
    """A bundle directory of ``files`` (text, or JSON-encoded) beside a minimal manifest."""
    root = tmp_path / "bundle"
    for name, data in {"manifest.json": MINIMAL_MANIFEST, **files}.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(data if isinstance(data, str) else json.dumps(data))
    return root
