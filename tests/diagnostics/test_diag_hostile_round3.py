"""Secrets and hostile inputs in what a bundle stores (held-out round 3).

Each test reproduces a leak or a fault first seen with a real run, and fails on the code
before its fix.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hangwatch.contract.redact import MARK, redact_argv, redact_text, redact_value
from hangwatch.diagnostics.sysinfo import tail

pytestmark = pytest.mark.timeout(60)

SAS = ("https://acct.blob.core.windows.net/data/shard-0.tar?sv=2022-11-02&ss=b&srt=o&sp=r"
       "&se=2026-12-31T00%3A00%3A00Z&spr=https&sig=Qw3%2Frty%2BUIop12345asdfGHJK%3D")
SIGNED = {
    # Azure SAS: the sig is URL-encoded base64, whose %2B/%2F split it below the high-entropy rule.
    "Qw3%2Frty%2BUIop12345asdfGHJK%3D": SAS,
    # GCS: a lowercase parameter name and a lowercase hex signature (two character classes).
    "3f1c2a9b8e7d6c5b4a39281706f5e4d3c2b1a09f8e7d6c5b4a3928170f6e5d4c":
        "https://storage.googleapis.com/b/o.bin?x-goog-algorithm=GOOG4-RSA-SHA256&x-goog-expires=900"
        "&x-goog-signature=3f1c2a9b8e7d6c5b4a39281706f5e4d3c2b1a09f8e7d6c5b4a3928170f6e5d4c",
    "nXk2~Fqw_8sd": "https://d111111abcdef8.cloudfront.net/x.bin?Expires=1767225600&Signature=nXk2~Fqw_8sd&Key-Pair-Id=K2J",
}
WEBHOOKS = {
    # Microsoft Teams incoming webhook (its hex part is lowercase: no high-entropy run either)
    "0123456789abcdef0123456789abcdef": "https://acme.webhook.office.com/webhookb2/1c2d3e4f-aaaa-bbbb-cccc-0123456789ab"
                                        "@9f8e7d6c-dddd-eeee-ffff-0123456789ab/IncomingWebhook/"
                                        "0123456789abcdef0123456789abcdef/1c2d3e4f-aaaa-bbbb-cccc-0123456789ab",
    "xjq3m4b5n6b7n8m9k0l1p2o3i4": "https://chat.example.com/hooks/xjq3m4b5n6b7n8m9k0l1p2o3i4",
}
TOKENS = [
    "dapi0123456789abcdef0123456789abcdef",       # Databricks: lowercase hex
    "dckr_pat_abcdefghijklmnopqrstuvwxyz0",       # Docker
    "glsa_abcdefghijklmnopqrstuvwxyz012345_abcdef12",  # Grafana service account
    "shpat_0123456789abcdef0123456789abcdef",     # Shopify
    "nvapi-abcdefghijklmnopqrstuvwxyz0123456789",  # NVIDIA NGC
    "pul-0123456789abcdef0123456789abcdef01234567",  # Pulumi: lowercase hex
]


@pytest.mark.parametrize("secret,url", list(SIGNED.items()) + list(WEBHOOKS.items()))
def test_signed_and_webhook_urls_lose_their_credential_in_logs_and_command_lines(tmp_path: Path, secret: str,
                                                                                 url: str) -> None:
    """A trainer that logs (or is given) a signed download URL or a webhook: the capture's log
    tail, the process table's command line and the journal's command kept the credential
    (reproduced with a real hang: ``sig=`` in processes.json, report.html and the journal)."""
    log = tmp_path / "stdout.log"
    log.write_text(f"step 10\ndownloading {url} ...\nstep 11\n")
    for shown in (tail(log), " ".join(redact_argv(["python", "train.py", "--data", url])),
                  redact_text(f"curl -fsS '{url}'"), str(redact_value({"cmdline": ["python", url]}))):
        assert secret not in shown and MARK in shown
        assert url.split("?")[0].split("/")[2] in shown  # the host stays: what was fetched is still told


@pytest.mark.parametrize("token", TOKENS)
def test_prefixed_tokens_below_the_high_entropy_rule_are_redacted(token: str) -> None:
    assert token not in redact_text(f"export VALUE={token}; run {token}")


def test_stack_signatures_and_plain_urls_are_left_as_they_are() -> None:
    text = ("signature_id: nccl-allreduce-wait signature=lock-wait "
            "https://github.com/org/repo/blob/main/hooks.py?plain=1 https://example.com/a?signed=true "
            "commit 0123456789abcdef0123456789abcdef01234567")
    assert redact_text(text) == text


def test_the_capture_never_opens_a_fifo_or_device_the_trainers_user_names(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The versions step reads the trainer's venv, which a dropped-privilege trainer's user owns:
    a FIFO named ``METADATA`` was opened by root's capture (reproduced with a ``setpriv`` trainer:
    their writer, waiting for a reader, went on), and so would a device bind-mounted in their mount
    namespace on a path through ``/proc/PID/root``. Only regular files are ever opened; a regular
    METADATA is still read, and a log tail that is not a regular file is refused."""
    import os

    from hangwatch.diagnostics import sysinfo

    site = tmp_path / "site-packages"
    (site / "torch-2.9.0.dist-info").mkdir(parents=True)
    os.mkfifo(site / "torch-2.9.0.dist-info" / "METADATA")
    (site / "vllm-0.30.0.dist-info").mkdir()
    (site / "vllm-0.30.0.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm\nVersion: 0.30.0\n\n")
    os.mkfifo(tmp_path / "stdout.log")
    opened: list[str] = []
    real = os.open

    def spy(path, flags, *args, **kwargs):  # type: ignore[no-untyped-def]
        if not flags & getattr(os, "O_PATH", 0):
            opened.append(os.fspath(path))
        return real(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", spy)
    found = dict(sysinfo._dist_versions(site, {"torch": "torch", "vllm": "vllm"}))
    assert found == {"vllm": "0.30.0"}
    with pytest.raises(OSError):
        sysinfo.tail(tmp_path / "stdout.log")
    assert not [p for p in opened if p.endswith(("torch-2.9.0.dist-info/METADATA", "stdout.log"))]


def test_a_bundle_nested_thousands_of_folders_deep_is_refused_at_once(tmp_path: Path) -> None:
    """Every file of a bundle directory is opened one folder at a time from the top, so folders
    nested thousands deep made `replay` and `report` quadratic (3,000 empty folders: 7 s, up to
    ~15 s within the 4096-entry cap). A bundle is three folders deep: past 16 it is refused."""
    import os

    from diag_helpers import synthetic_bundle
    from hangwatch.diagnostics.bundle import MAX_DEPTH, load_bundle
    from hangwatch.diagnostics.errors import InputError

    bundle = synthetic_bundle(tmp_path)
    load_bundle(bundle)  # as written: fine
    deep = bundle / "logs"
    deep.mkdir()
    for _ in range(MAX_DEPTH + 2):
        deep = deep / "d"
        os.mkdir(deep)
    with pytest.raises(InputError, match="nested"):
        load_bundle(bundle)
