"""Capture end to end on real hung process trees, and its failure paths; the early py-spy
round taken while the hang builds; a trainer argument that is not UTF-8."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from diag_helpers import CMDLINE_SECRET, make_request, PYSPY_DENIED, PYSPY_HANG, ROOT, SECRETS
from hangwatch.contract import atomic
from hangwatch.diagnostics.bundle import list_bundles, load_bundle, write_bundle
from hangwatch.diagnostics.capture import capture_incident, CaptureConfig, EarlyRound, IncidentCapture


FAST = CaptureConfig(rounds=2, round_interval=0.5, pyspy_timeout=5.0)


def _manifest(path: Path) -> dict:
    return json.loads((path / "manifest.json").read_text())


@pytest.mark.slow
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


@pytest.mark.slow
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


@pytest.mark.timeout(90)
def test_an_early_round_makes_the_capture_take_one_final_round_without_waiting(hung_tree, tmp_path):
    tree = hung_tree(1)
    # A round interval far longer than the test would take: any wait would show.
    config = CaptureConfig(rounds=2, round_interval=30.0, pyspy_timeout=10.0)
    hook = IncidentCapture(config)
    early = hook.early_round(tree.tree, time.monotonic() + 20.0)
    assert isinstance(early, EarlyRound) and early.processes == 2
    assert all(r.round == 1 and r.dump is not None for r in early.results)

    path = capture_incident(make_request(tmp_path / "run", tree, deadline_s=60.0, extra={"early_round": early}),
                            config=config)

    m = json.loads((path / "manifest.json").read_text())
    rounds = m["stacks"]["rounds"]
    assert [(r["round"], r.get("early", False)) for r in rounds] == [(1, True), (2, False)]
    assert all(r["taken_at"].endswith("Z") for r in rounds) and rounds[0]["taken_at"] <= rounds[1]["taken_at"]
    assert rounds[0]["started_s"] <= 0.0  # before the capture began
    assert rounds[1]["started_s"] < config.round_interval, "the final round did not wait for the interval"
    assert m["stacks"]["skipped"] == []
    for pid in tree.pids:
        assert (path / f"stacks/round-1/pid-{pid}.json").is_file() and (path / f"stacks/round-2/pid-{pid}.json").is_file()
    c = m["classification"]
    assert c["signature_id"] == "vllm-cuda-graph-replay" and c["frozen"] is True and c["rounds"] == 2


@pytest.mark.timeout(60)
def test_without_an_early_round_the_capture_takes_both_rounds_itself(hung_tree, tmp_path):
    tree = hung_tree(0)
    path = capture_incident(make_request(tmp_path / "run", tree, extra={"early_round": "not a round"}),
                            config=CaptureConfig(rounds=2, round_interval=0.2, pyspy_timeout=5.0))
    rounds = json.loads((path / "manifest.json").read_text())["stacks"]["rounds"]
    assert [(r["round"], r.get("early", False)) for r in rounds] == [(1, False), (2, False)]
    assert all("taken_at" in r for r in rounds)


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_a_trainer_argument_that_is_not_utf8_never_costs_the_capture_or_the_report(tmp_path):
    """The trainer's user chose an argument with a byte that is not UTF-8 (a file name in
    Latin-1). Python reads it as a lone surrogate, which a plain .encode() refuses: the whole
    diagnostics capture failed (stacks, process table, report: the journal's capture was
    'UnicodeEncodeError', only the samples-only bundle was left), and `hangwatch report` of a
    bundle holding it was refused as malformed input. Now the byte is shown as \\udcff."""
    from hangwatch.contract.capture import CaptureRequest, TreeProcess
    from hangwatch.contract.verdict import Verdict, VerdictKind
    from hangwatch.diagnostics.capture import capture_incident

    trainer = subprocess.Popen([sys.executable.encode(), b"-c", b"import time; time.sleep(60)", b"data-\xff.bin"])
    try:
        proc = psutil.Process(trainer.pid)
        deadline = time.monotonic() + 20
        while len(proc.cmdline()) < 4 and time.monotonic() < deadline:  # until it has exec'd
            time.sleep(0.01)
        tp = TreeProcess(trainer.pid, proc.create_time(), os.getpid(), os.getpgid(trainer.pid), os.getsid(trainer.pid),
                         proc.name(), tuple(proc.cmdline()))
        assert "\udcff" in tp.cmdline[-1]
        run_dir = tmp_path / "run"
        run_dir.mkdir(mode=0o700)
        now = time.monotonic()
        verdict = Verdict(kind=VerdictKind.SILENT_HANG, detected_at=now, onset=now, reason="no heartbeat progress")
        bundle = capture_incident(CaptureRequest(run_dir=run_dir, run_id="r", attempt=1, verdict=verdict, samples=[],
                                                 tree=[tp], log_paths={}, thresholds={}, deadline=now + 60))
    finally:
        trainer.kill()
        trainer.wait()
    table = (bundle / "processes.txt").read_text()
    assert "data-\\udcff.bin" in table
    assert "data-\\udcff.bin" in (bundle / "report.html").read_text()

    out = tmp_path / "again.html"
    done = subprocess.run([sys.executable, "-m", "hangwatch.cli", "report", str(bundle), "-o", str(out)],
                          capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert "data-\\udcff.bin" in out.read_text()


def _registered_trainer(tmp_path: Path):
    """A process that imports hangwatch.trainer under an attempt dir (so it registered its
    in-process dump), blocked in a sleep with a second thread; as the capture's HungTree."""
    from diag_helpers import HungTree, _tree_process

    log = tmp_path / "trainer.log"
    attempt_dir = tmp_path / "attempt-1"
    attempt_dir.mkdir()
    code = ("import threading, time\nimport hangwatch.trainer\n"
            "def fetch():\n    time.sleep(60)\n"
            "threading.Thread(target=fetch, daemon=True).start()\nprint('r', flush=True)\ntime.sleep(60)\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                            env=dict(os.environ, HANGWATCH_ATTEMPT_DIR=str(attempt_dir)))
    assert proc.stdout is not None and proc.stdout.readline() == "r\n"
    log.write_text("")
    return HungTree(proc, [_tree_process(psutil.Process(proc.pid))], log), attempt_dir


@pytest.mark.timeout(60)
def test_a_process_py_spy_is_denied_gives_its_own_stacks(tmp_path):
    tree, attempt_dir = _registered_trainer(tmp_path)
    try:
        path = capture_incident(make_request(tmp_path / "run", tree),
                                config=CaptureConfig(rounds=2, round_interval=0.2, pyspy=str(PYSPY_DENIED)))
        m = _manifest(path)
        (method,) = m["stacks"]["methods"]
        assert method["method"] == "in-process" and method["rounds"] == [1] and "ptrace_denied" in method["why"]
        assert m["stacks"]["rounds"][0]["in_process"][0]["ok"] is True
        assert "stacks" in m["captured"] and "stacks" not in m["failed"], "the process's stacks are in the bundle"
        bundle = load_bundle(path)
        (dump,) = bundle.dumps()
        assert sorted(t.name for t in dump.threads) == ["", "MainThread"]
        assert any(f.function == "fetch" for t in dump.threads for f in t.frames)
        assert (path / "stacks" / "in-process" / f"pid-{tree.proc.pid}-round-1.txt").is_file()
        assert tree.proc.poll() is None, "asked, not killed"
    finally:
        tree.proc.kill()
        tree.proc.wait()


@pytest.mark.timeout(60)
def test_with_py_spy_working_no_process_is_signalled(tmp_path):
    tree, attempt_dir = _registered_trainer(tmp_path)
    try:
        path = capture_incident(make_request(tmp_path / "run", tree), config=FAST)
        m = _manifest(path)
        assert [x["method"] for x in m["stacks"]["methods"]] == ["py-spy"]
        assert not any("in_process" in r for r in m["stacks"]["rounds"])
        dump_file = attempt_dir / f"stacks-pid-{tree.proc.pid}.txt"
        assert dump_file.read_text().count("\n") == 1, "only the header: no signal was sent"
    finally:
        tree.proc.kill()
        tree.proc.wait()
