"""The kept batch in the incident bundle: which records are copied, how, and what is refused."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import psutil

from hangwatch.contract.batch import InflightFile, make_record
from hangwatch.contract.capture import CaptureRequest, TreeProcess
from hangwatch.contract.verdict import Verdict, VerdictKind
from hangwatch.diagnostics.batch import MAX_RECORDS, kept_batches

HF_TOKEN = "hf_QmT7xVb2LpR9sWc4KdNe8YuZa1"


def keep(directory, pid, *, prompts=("hello",), wall=100.0, **kwargs):
    record = make_record(engine="fake", engine_kwargs={"seed": 0, **kwargs}, prompts=list(prompts), n=1, seed=3,
                         sampling={"max_tokens": 4}, source="worker", pid=pid, wall=wall)
    assert InflightFile(directory, pid=pid).write(record)


def test_the_oldest_request_in_flight_of_the_tree_becomes_batch_json_and_the_others_stay_beside_it(tmp_path):
    keep(tmp_path, 11, prompts=["newer"], wall=200.0)
    keep(tmp_path, 12, prompts=["oldest"], wall=100.0)
    keep(tmp_path, 13, prompts=["a dead worker's"], wall=50.0)
    files, problems = kept_batches(tmp_path, {11, 12})
    assert problems == []
    assert sorted(files) == ["batch.json", "batches/pid-11.json"]
    assert json.loads(files["batch.json"])["request"]["prompts"] == ["oldest"]
    assert json.loads(files["batches/pid-11.json"])["request"]["prompts"] == ["newer"]


def test_the_kept_batch_is_redacted_like_the_rest_of_the_bundle_and_keeps_its_token_ids(tmp_path):
    record = make_record(engine="vllm", engine_kwargs={"model": "/models/m", "hf_token": HF_TOKEN},
                         prompts=[f"my key is {HF_TOKEN}", {"prompt_token_ids": [5, 6, 7]}], n=1, seed=1,
                         sampling={"stop_token_ids": [2]}, source="worker", pid=5)
    InflightFile(tmp_path, pid=5).write(record)
    files, _ = kept_batches(tmp_path, None)
    text = files["batch.json"]
    assert HF_TOKEN not in text and "[REDACTED]" in text
    kept = json.loads(text)
    assert kept["engine_kwargs"]["hf_token"] == "[REDACTED]" and kept["engine_kwargs"]["model"] == "/models/m"
    assert kept["request"]["prompts"][1] == {"prompt_ids": [5, 6, 7]}
    assert kept["request"]["sampling"] == {"stop_ids": [2]}


def test_a_corrupt_record_is_a_problem_line_and_a_symlinked_one_is_never_read(tmp_path):
    (tmp_path / "inflight-7.json").write_text("{half a rec")
    secret = tmp_path / "secret.json"
    secret.write_text(json.dumps({"kind": "hangwatch-batch", "request": {"prompts": ["private"]}}))
    (tmp_path / "inflight-8.json").symlink_to(secret)
    (tmp_path / "inflight-x.json").write_text("{}")  # not our name: ignored
    files, problems = kept_batches(tmp_path, None)
    assert files == {}
    assert len(problems) == 1 and problems[0].startswith("pid 7:") and "not valid JSON" in problems[0]


def test_no_attempt_dir_or_no_record_gives_no_batch(tmp_path):
    assert kept_batches(None) == ({}, [])
    assert kept_batches(tmp_path / "missing") == ({}, [])
    assert kept_batches(tmp_path) == ({}, [])


def test_at_most_a_bounded_number_of_records_is_copied(tmp_path):
    for pid in range(1, MAX_RECORDS + 4):
        keep(tmp_path, pid, wall=float(pid))
    files, problems = kept_batches(tmp_path, None)
    assert len(files) == MAX_RECORDS and "3 more" in problems[0]


def test_the_capture_puts_the_batch_in_flight_into_the_bundle(tmp_path):
    from hangwatch.diagnostics.capture import capture_incident  # noqa: PLC0415

    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        proc = psutil.Process(sleeper.pid)
        attempt_dir = tmp_path / "attempt-1"
        attempt_dir.mkdir(mode=0o700)
        keep(attempt_dir, sleeper.pid, prompts=["the wedged request"])
        keep(attempt_dir, 999_999_999, prompts=["not in the tree"])
        tp = TreeProcess(sleeper.pid, proc.create_time(), os.getpid(), os.getpgid(sleeper.pid),
                         os.getsid(sleeper.pid), proc.name(), tuple(proc.cmdline()))
        now = time.monotonic()
        verdict = Verdict(kind=VerdictKind.STALL, detected_at=now, onset=now, reason="engine step")
        bundle = capture_incident(CaptureRequest(
            run_dir=tmp_path, run_id="r", attempt=1, verdict=verdict, samples=[], tree=[tp],
            log_paths={"attempt_dir": attempt_dir}, thresholds={}, deadline=now + 30,
            extra={"capture": {"rounds": 1}}))
    finally:
        sleeper.kill()
        sleeper.wait()
    assert json.loads((bundle / "batch.json").read_text())["request"]["prompts"] == ["the wedged request"]
    assert not (bundle / "batches").exists()
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert "batch" in manifest["captured"] and "batch" not in manifest["failed"]
