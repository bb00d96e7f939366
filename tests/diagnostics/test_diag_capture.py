"""Capture end to end on real hung process trees, and its failure paths."""

from __future__ import annotations

import json
import time
from pathlib import Path

import psutil
import pytest

from hangwatch.contract import atomic

from diag_helpers import CMDLINE_SECRET, PYSPY_DENIED, PYSPY_HANG, SECRETS, make_request
from hangwatch.diagnostics.bundle import list_bundles, load_bundle, write_bundle
from hangwatch.diagnostics.capture import CaptureConfig, capture_incident

FAST = CaptureConfig(rounds=2, round_interval=0.5, pyspy_timeout=5.0)


def _manifest(path: Path) -> dict:
    return json.loads((path / "manifest.json").read_text())


@pytest.mark.timeout(60)
def test_capture_on_hung_tree_writes_complete_classified_bundle(hung_tree, tmp_path):
    tree = hung_tree(2)
    request = make_request(tmp_path / "run", tree)

    path = capture_incident(request, config=FAST)

    assert path.parent == tmp_path / "run" / "incidents"
    assert path.name.endswith("-attempt1-stall")
    m = _manifest(path)
    assert m["schema"] == 1 and m["run_id"] == "test-run" and m["attempt"] == 1
    assert m["verdict"]["kind"] == "stall"
    assert m["thresholds"]["stall_window"] == 20.0
    for step in ("stacks", "classification", "processes", "gpu", "versions", "environment", "logs", "samples"):
        assert step in m["captured"], (step, m["failed"])
    assert "stacks" not in m["failed"]
    for name in ("processes.json", "processes.txt", "gpu/state.json", "versions.json", "environment.json",
                 "samples.jsonl", "stacks/stacks.txt", "classification.json", "report.html", "logs/stdout.tail.txt"):
        assert (path / name).is_file(), name
    for pid in tree.pids:
        for r in (1, 2):
            raw = json.loads((path / f"stacks/round-{r}/pid-{pid}.json").read_text())
            assert raw and all("frames" in t for t in raw)
    assert [r["ok"] for r in m["stacks"]["rounds"]] == [3, 3]

    c = m["classification"]
    assert c["signature_id"] == "vllm-cuda-graph-replay"
    assert c["frozen"] is True and c["rounds"] == 2
    assert c["pid"] in tree.pids and c["thread"]["name"] == "MainThread"
    assert any(e.startswith("CUDAGraphWrapper.replay (cuda_graph.py:") for e in c["evidence"])
    assert len((path / "samples.jsonl").read_text().splitlines()) == len(request.samples)

    # Captured, not killed, and not left stopped by py-spy.
    for pid in tree.pids:
        assert psutil.Process(pid).status() not in (psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP)
    assert list_bundles(tmp_path / "run") == [path]


@pytest.mark.timeout(60)
def test_capture_returns_within_deadline_when_pyspy_never_returns(hung_tree, tmp_path, monkeypatch):
    tree = hung_tree(1)
    monkeypatch.setenv("HANGWATCH_PYSPY", str(PYSPY_HANG))
    request = make_request(tmp_path / "run", tree, deadline_s=5.0)

    started = time.monotonic()
    path = capture_incident(request, config=CaptureConfig(rounds=2, round_interval=0.5, pyspy_timeout=30.0, write_reserve=1.5))
    took = time.monotonic() - started

    assert took < 5.0, f"capture overran its deadline: {took:.1f} s"
    m = _manifest(path)
    assert "timeout" in m["failed"]["stacks"] and str(tree.pids[0]) in m["failed"]["stacks"]
    assert "processes" in m["captured"] and "samples" in m["captured"]
    assert m["classification"] is None
    # The stand-ins were killed with their process group, none left behind.
    leftovers = [p for p in psutil.process_iter(["cmdline"]) if str(PYSPY_HANG) in " ".join(p.info["cmdline"] or [])]
    assert not leftovers


@pytest.mark.timeout(60)
def test_capture_reports_ptrace_denied_with_the_fix(hung_tree, tmp_path):
    tree = hung_tree(0)
    request = make_request(tmp_path / "run", tree)

    path = capture_incident(request, config=CaptureConfig(rounds=2, round_interval=0.2, pyspy=str(PYSPY_DENIED)))

    m = _manifest(path)
    msg = m["failed"]["stacks"]
    assert "ptrace_denied" in msg and "SYS_PTRACE" in msg and "ptrace_scope" in msg
    assert len(m["stacks"]["rounds"]) == 1, "no second round once py-spy cannot attach"
    assert "processes" in m["captured"] and (path / "report.html").is_file()


@pytest.mark.timeout(60)
def test_capture_without_pyspy_goes_on(hung_tree, tmp_path):
    tree = hung_tree(0)
    path = capture_incident(make_request(tmp_path / "run", tree), config=CaptureConfig(pyspy=str(tmp_path / "no-such-py-spy")))
    m = _manifest(path)
    assert "missing" in m["failed"]["stacks"] and "HANGWATCH_PYSPY" in m["failed"]["stacks"]
    assert {"processes", "environment", "samples"} <= set(m["captured"])


@pytest.mark.timeout(60)
def test_no_secret_reaches_any_bundle_file(hung_tree, tmp_path):
    tree = hung_tree(0, secrets=True)
    attempt_dir = tree.log.parent / "attempt-1"
    attempt_dir.mkdir(exist_ok=True)
    (attempt_dir / "engine-0.log").write_text(
        f"INFO loading model with token {SECRETS['HF_TOKEN']}\n"
        f"export AWS_ACCESS_KEY_ID={SECRETS['AWS_ACCESS_KEY_ID']}\n"
        f"wandb: api_key={SECRETS['WANDB_API_KEY']}\n"
    )
    request = make_request(tmp_path / "run", tree)

    path = capture_incident(request, config=FAST)

    planted = [*SECRETS.values(), CMDLINE_SECRET]
    for file in path.rglob("*"):
        if file.is_file():
            data = file.read_bytes()
            for secret in planted:
                assert secret.encode() not in data, f"{secret!r} leaked into {file.relative_to(path)}"
    env = json.loads((path / "environment.json").read_text())
    assert env["HF_TOKEN"] == "[REDACTED]" and env["HANGWATCH_RUN_ID"] == "test-run"
    assert (path / "logs" / "engine-0.tail.txt").is_file()
    rows = json.loads((path / "processes.json").read_text())
    cmd = rows[0]["cmdline"]
    assert cmd[cmd.index("--api-key") + 1] == "[REDACTED]"


@pytest.mark.timeout(30)
def test_crash_while_writing_leaves_no_half_bundle(tmp_path, monkeypatch):
    calls = {"n": 0}
    real = atomic.os.fsync

    def failing(fd):
        # The disk fills up while the third file of the bundle is being written.
        calls["n"] += 1
        if calls["n"] == 3:
            raise OSError(28, "No space left on device")
        return real(fd)

    monkeypatch.setattr(atomic.os, "fsync", failing)
    incidents = tmp_path / "run" / "incidents"
    with pytest.raises(OSError):
        write_bundle(incidents / "20260101T000000-attempt1-stall", {"manifest.json": "{}", "a.txt": "a", "b.txt": "b", "c.txt": "c"})
    assert list(incidents.iterdir()) == []
    assert list_bundles(tmp_path / "run") == []


@pytest.mark.timeout(30)
def test_readers_skip_an_interrupted_write(tmp_path):
    """A process killed mid-write leaves only the hidden temporary directory."""
    incidents = tmp_path / "run" / "incidents"
    (incidents / ".20260101T000000-attempt1-stall.tmp-abc").mkdir(parents=True)
    (incidents / ".20260101T000000-attempt1-stall.tmp-abc" / "manifest.json").write_text("{")
    done = write_bundle(incidents / "20260101T000001-attempt2-stall", {"manifest.json": "{}"})
    again = write_bundle(incidents / "20260101T000001-attempt2-stall", {"manifest.json": "{}"})
    assert again.name == "20260101T000001-attempt2-stall-2"
    assert list_bundles(tmp_path / "run") == [done, again]
    assert load_bundle(done).manifest == {}


@pytest.mark.timeout(60)
def test_a_stopped_tree_process_is_continued(hung_tree, tmp_path):
    """py-spy can leave its target stopped; capture sends SIGCONT to tree processes."""
    import os  # noqa: PLC0415
    import signal  # noqa: PLC0415

    tree = hung_tree(1)
    child = tree.pids[1]
    os.kill(child, signal.SIGSTOP)
    deadline = time.monotonic() + 5
    while psutil.Process(child).status() != psutil.STATUS_STOPPED and time.monotonic() < deadline:
        time.sleep(0.02)

    path = capture_incident(make_request(tmp_path / "run", tree), config=CaptureConfig(rounds=1, pyspy_timeout=5.0))

    assert child in _manifest(path)["stacks"]["resumed_stopped_pids"]
    assert psutil.Process(child).status() != psutil.STATUS_STOPPED


@pytest.mark.timeout(30)
def test_capture_of_an_empty_tree_still_writes_a_bundle(tmp_path):
    from hangwatch.cli.main import main  # noqa: PLC0415

    path = capture_incident(make_request(tmp_path / "run", None), config=FAST)
    m = _manifest(path)
    assert m["classification"] is None and "samples" in m["captured"] and (path / "report.html").is_file()
    assert main(["report", str(path)]) == 0
    assert "No stacks were captured" in (path / "report.html").read_text()
