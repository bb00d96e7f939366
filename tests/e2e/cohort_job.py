"""One real multi-node job on this machine for the end-to-end tests: N `hangwatch run --cohort`
supervisors, each wrapping `torchrun --rdzv-backend c10d` with CPU ranks on gloo, a shared
checkpoint dir and a simulated GPU file per node (``Job``), and the waits the tests share."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

ROOT = Path(__file__).resolve().parents[2]
TRAINER = ROOT / "tests" / "fixtures" / "cohort_trainer.py"
HANGWATCH = str(Path(sys.executable).parent / "hangwatch")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Job:
    def __init__(self, tmp: Path, nnodes: int, *, wedge_node: int = -1, wedge_step: int = -1, steps: int = 10,
                 lease: float = 8.0, extra: dict[int, list[str]] | None = None, crash_node: int = -1,
                 after: dict[int, float] | None = None, before: dict[int, float] | None = None,
                 host: str = "127.0.0.1", wrap: dict[int, list[str]] | None = None,
                 envs: dict[int, dict[str, str]] | None = None, launcher_args: dict[int, list[str]] | None = None) -> None:
        """``host``: node 0's address (the store's and torchrun's rendezvous); ``wrap``: a node's
        supervisor runs under this command (``ip netns exec NS``); ``envs``: a node's extra variables;
        ``launcher_args``: a node's extra torchrun options."""
        self.tmp, self.nnodes = tmp, nnodes
        self.ckpt = tmp / "ckpt"
        store, rdzv = _free_port(), _free_port()
        self.procs: list[subprocess.Popen] = []
        for i in range(nnodes):
            argv = [HANGWATCH, "run", "--quiet", "--run-dir", str(tmp / f"run{i}"),
                    "--gpu-probe", f"file:{tmp / f'sim{i}.json'}", "--interval", "0.5", "--stall-window", "4",
                    "--progress-timeout", "120", "--grace", "2", "--backoff", "0.1", "--capture-timeout", "15",
                    "--checkpoint-dir", str(self.ckpt), "--cohort", f"{host}:{store}", "--node-rank", str(i),
                    "--nnodes", str(nnodes), "--lease-timeout", str(lease), *(extra or {}).get(i, []), "--",
                    sys.executable, "-m", "torch.distributed.run", "--nnodes", str(nnodes), "--nproc-per-node", "1",
                    "--rdzv-backend", "c10d", "--rdzv-endpoint", f"{host}:{rdzv}", "--rdzv-id", "job",
                    *(launcher_args or {}).get(i, []),
                    str(TRAINER), "--ckpt", str(self.ckpt), "--steps", str(steps),
                    "--wedge-node", str(wedge_node), "--wedge-step", str(wedge_step), "--crash-node", str(crash_node)]
            if i in (after or {}):  # this node's command goes on after torchrun (a final upload, say)
                cut = argv.index("--") + 1
                argv[cut:] = ["sh", "-c", f'"$0" "$@" && sleep {after[i]}', *argv[cut:]]
            if i in (before or {}):  # this node's launcher starts later (another node hosts torchrun's rendezvous)
                cut = argv.index("--") + 1
                argv[cut:] = ["sh", "-c", f'sleep {before[i]} && exec "$0" "$@"', *argv[cut:]]
            argv = [*(wrap or {}).get(i, []), *argv]
            env = dict(os.environ, TEST_NODE=str(i), **(envs or {}).get(i, {}))
            env.pop("HANGWATCH_CONFIG", None)
            self.procs.append(subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                               start_new_session=True))

    def wait(self, timeout: float) -> list[int]:
        deadline = time.monotonic() + timeout
        codes = []
        for p in self.procs:
            try:
                codes.append(p.wait(timeout=max(1.0, deadline - time.monotonic())))
            except subprocess.TimeoutExpired:
                codes.append(None)
        return codes

    def journal(self, i: int) -> list[dict]:
        return [json.loads(line) for line in (self.tmp / f"run{i}" / "journal.jsonl").read_text().splitlines()]

    def output(self, i: int) -> str:
        p = self.procs[i]
        return p.stdout.read().decode(errors="replace")[-3000:] if p.stdout and p.poll() is not None else ""

    def leftovers(self) -> list[psutil.Process]:
        """Every process still alive that was started for this job (trainers, torchrun agents)."""
        found = []
        for proc in psutil.process_iter(["cmdline"]):
            try:
                if str(self.ckpt) in " ".join(proc.info["cmdline"] or []) and proc.status() != psutil.STATUS_ZOMBIE:
                    found.append(proc)
            except psutil.Error:
                continue
        return found

    def cleanup(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=10)
        for proc in self.leftovers():
            proc.kill()


def _wait_training(job: Job, node: int) -> None:
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        journal = job.tmp / f"run{node}" / "journal.jsonl"
        if journal.exists() and "first_heartbeat" in journal.read_text():
            return
        time.sleep(0.5)
    pytest.fail(f"node {node} never started training")


#: what a stranger who reached the store's port writes to it, each on a connection of its own
HOSTILE_PAYLOADS = {
    "deep": b"[" * 400_000 + b"]" * 400_000,
    "huge": b"x" * (3 << 20),
    "not-utf8": b"\xff\xfe" * 64,
    "non-finite": b'{"attempt": 2, "node": 0, "kind": "stall", "reason": "x", "wall": NaN}' + b" " * 64,
    "forged-incident": json.dumps({"op": "set", "key": "incident/1", "value": json.dumps(
        {"attempt": 1, "node": 0, "kind": "stall", "reason": "forged", "wall": 1.0})}).encode(),
    "forged-stop": json.dumps({"op": "set", "key": "stop", "value": '{"node": 0, "signal": 15}'}).encode(),
}


def stranger_attacks(host: str, port: int) -> dict[str, str]:
    """Everything a stranger without the job's secret tries on an authenticated store's port, and what
    it got: "refused" (a c10d client that would list, overwrite and delete keys) or "dropped" (the
    connection closed by the store before any request was read); anything else is a way in."""
    import datetime

    results: dict[str, str] = {}
    try:
        from torch.distributed import TCPStore

        c10d = TCPStore(host, port, None, False, datetime.timedelta(seconds=5), wait_for_workers=False)
    except Exception:  # noqa: BLE001  (any failure to connect is the store refusing)
        results["c10d"] = "refused"
    else:
        try:
            keys = c10d.list_keys()
            c10d.delete_key(keys[0])
            results["c10d"] = f"listed {len(keys)} keys and deleted one"
        except Exception as exc:  # noqa: BLE001
            results["c10d"] = f"connected, then {type(exc).__name__}"
    try:
        for name, payload in HOSTILE_PAYLOADS.items():
            with socket.create_connection((host, port), timeout=10) as sock:
                try:
                    sock.sendall(payload)
                    while sock.recv(65536):
                        pass  # the greeting, then nothing until the store drops us
                    results[name] = "dropped"
                except (BrokenPipeError, ConnectionResetError):
                    results[name] = "dropped"
                except TimeoutError:
                    results[name] = "kept open"
        flood = [socket.create_connection((host, port), timeout=10) for _ in range(200)]  # more than it serves
        time.sleep(2.0)
        for sock in flood:
            sock.close()
    except ConnectionRefusedError:
        results["store"] = "gone"  # node 0 stopped (a test that ends the job on purpose)
    return results
