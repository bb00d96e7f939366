"""What a bundle writer stores: JSON redacted value by value, so that a file holding sensitive
keys stays readable; the samples-only fallback bundle is redacted the same way."""

from __future__ import annotations

import json

import pytest

from diag_helpers import synthetic_bundle
from hangwatch.cli.main import main
from hangwatch.contract.redact import MARK
from hangwatch.diagnostics.bundle import dumps_json, load_bundle, write_bundle


SECRETS = ("hunter2-engine-secret", "pa55w0rd-in-url", "hf_AbCdEfGhIjKlMnOpQrSt")


def _info() -> dict:
    return {"pass_at_1": 0.25, "auth": {"mode": "oidc"}, "api_keys": ["k1"], "secret_sauce": True,
            "engine_kwargs": {"model": "m", "hf_token": SECRETS[0]},
            "wandb": f"https://user:{SECRETS[1]}@wandb.example.com", "note": f"token {SECRETS[2]}"}


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
