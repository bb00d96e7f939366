"""Redaction that keeps JSON valid, and the trainer's ``info`` redacted in the journal.

A bundle's JSON files were redacted as text: the value after a sensitive key became a bare
``[REDACTED]``, so ``"pass_at_1": 0.25`` (the part PASS; pass@k is a common RL metric a
trainer beats) or ``"auth": {...}`` left ``samples.jsonl`` or ``manifest.json`` unparseable,
and ``hangwatch replay``/``report`` refused the bundle. And the trainer's ``info`` (the
kwargs its engine was built with, say) went into the journal in clear, though the journal's
copy of the command is redacted.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from diag_helpers import ROOT, synthetic_bundle
from hangwatch.cli.main import main
from hangwatch.contract.journal import read_journal
from hangwatch.contract.redact import MARK, redact_value
from hangwatch.diagnostics.bundle import dumps_json, load_bundle, write_bundle

SECRETS = ("hunter2-engine-secret", "pa55w0rd-in-url", "hf_AbCdEfGhIjKlMnOpQrSt")


def _info() -> dict:
    return {"pass_at_1": 0.25, "auth": {"mode": "oidc"}, "api_keys": ["k1"], "secret_sauce": True,
            "engine_kwargs": {"model": "m", "hf_token": SECRETS[0]},
            "wandb": f"https://user:{SECRETS[1]}@wandb.example.com", "note": f"token {SECRETS[2]}"}


def test_redact_value_keeps_the_shape_and_hides_every_secret():
    clean = redact_value(_info())
    text = json.dumps(clean)
    assert not any(s in text for s in SECRETS), text
    assert clean["pass_at_1"] == MARK and clean["auth"] == MARK and clean["api_keys"] == MARK
    assert clean["secret_sauce"] is True  # a bool holds nothing to hide
    assert clean["engine_kwargs"]["model"] == "m"
    deep: list = []
    for _ in range(300):
        deep = [deep]
    json.dumps(redact_value(deep))  # bounded, never a RecursionError


@pytest.mark.timeout(60)
def test_a_bundle_whose_json_holds_sensitive_keys_stays_readable_and_redacted(tmp_path):
    bundle = synthetic_bundle(tmp_path)
    samples = [json.loads(line) for line in (bundle / "samples.jsonl").read_text().splitlines()]
    for s in samples:
        s["heartbeat"] = {"pid": 4242, "seq": 1, "ts": s["t"], "step": 3, "phase": "train", "info": _info()}
    manifest = json.loads((bundle / "manifest.json").read_text())
    manifest["verdict"]["evidence"] = {"monkey_patch": [1, 2], "info": _info()}
    files = {name: (bundle / name).read_text() for name in ("processes.json", "stacks/round-1/pid-4242.json")}
    files["manifest.json"] = dumps_json(manifest)
    files["samples.jsonl"] = "".join(json.dumps(s) + "\n" for s in samples)
    written = write_bundle(tmp_path / "out" / "b", files)
    for name in files:
        text = (written / name).read_text()
        assert not any(s in text for s in SECRETS), (name, text[:2000])
    loaded = load_bundle(written)
    assert len(loaded.samples()) == len(samples)  # the old text redaction: "line 1: Expecting value"
    assert loaded.manifest["verdict"]["evidence"]["monkey_patch"] == MARK
    assert main(["replay", str(written)]) == 0
    assert main(["report", str(written)]) == 0


@pytest.mark.timeout(60)
def test_the_trainers_info_is_journaled_redacted(tmp_path):
    run_dir = tmp_path / "run"
    # The trainer waits (bounded) until the supervisor has journaled its beat, then exits.
    trainer = ("import os, time; from hangwatch.trainer import beat\n"
               f"beat(step=1, phase='train', **{_info()!r})\n"
               "journal = os.path.join(os.environ['HANGWATCH_RUN_DIR'], 'journal.jsonl')\n"
               "deadline = time.monotonic() + 30\n"
               "while time.monotonic() < deadline and '\"event\":\"trainer' + '_info' not in open(journal).read():\n"
               "    time.sleep(0.05)\n")
    done = subprocess.run([sys.executable, "-m", "hangwatch.cli", "run", "--quiet", "--run-dir", str(run_dir),
                           "--gpu-probe", "none", "--interval", "0.2", "--", sys.executable, "-c", trainer],
                          capture_output=True, text=True, timeout=50, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    records = [r for r in read_journal(run_dir / "journal.jsonl") if r.get("event") == "trainer_info"]
    assert records, "no trainer_info record"
    text = (run_dir / "journal.jsonl").read_text()
    assert not any(s in text for s in SECRETS), text[-3000:]
    assert records[0]["info"]["engine_kwargs"]["model"] == "m"


@pytest.mark.timeout(30)
def test_the_samples_only_fallback_bundle_is_redacted_too(tmp_path):
    """When the diagnostics capture fails, the runner's fallback writes the verdict and the samples:
    it wrote them as they were, the trainer's ``info`` (an engine's ``hf_token``) included."""
    import dataclasses  # noqa: PLC0415

    from diag_helpers import make_request  # noqa: PLC0415
    from hangwatch.contract.heartbeat import Heartbeat  # noqa: PLC0415
    from hangwatch.supervisor.recover.fallback_capture import SamplesOnlyCapture  # noqa: PLC0415

    request = make_request(tmp_path / "run", None)
    beat = Heartbeat(pid=4242, seq=1, ts=0.0, step=3, phase="train", info=_info())
    request = dataclasses.replace(request, samples=[dataclasses.replace(s, heartbeat=beat) for s in request.samples])
    path = SamplesOnlyCapture()(request)
    for name in ("manifest.json", "samples.jsonl"):
        text = (path / name).read_text()
        assert not any(s in text for s in SECRETS), (name, text[:2000])
    assert len(load_bundle(path).samples()) == len(request.samples)
