"""Round 4 of hostile inputs: credentials of shapes redaction did not know.

Each went into a real run's bundle (processes.txt/json, stacks, the log tail, report.html)
and its journal as it was: a trainer started as ``python train.py git+https://PAT@dev.azure.com/...
wandb login KEY``, printing ``os.environ["HF_TOKEN"] = "..."``."""

from __future__ import annotations

import pytest

from hangwatch.contract.redact import MARK, redact_argv, redact_text, redact_value

pytestmark = pytest.mark.timeout(30)

AZURE_PAT = "abcdefghijklmnopqrstuvwxyz234567abcdefghijklmnopqrst"  # 52 lowercase base32: no known shape
WANDB_KEY = "0123456789abcdef0123456789abcdef01234567"  # 40 lowercase hex


@pytest.mark.parametrize("url", [
    f"https://{AZURE_PAT}@dev.azure.com/org/project/_git/repo",
    f"git+https://{AZURE_PAT}@dev.azure.com/org/_git/pkg",
    f"https://{WANDB_KEY}@github.com/org/private.git",
    f"wss://{AZURE_PAT}@stream.example.com/feed",
])
def test_a_token_given_as_a_urls_user_is_redacted(url):
    """git and pip take a token as a web URL's user. With no password part, only a token of a
    known shape (ghp_, hf_) was caught; any other stayed in clear."""
    secret = url.split("://", 1)[1].split("@", 1)[0]
    for shown in (redact_text(f"cloning {url} ..."), " ".join(redact_argv(["pip", "install", url])),
                  str(redact_value({"note": url}))):
        assert secret not in shown and MARK in shown, shown
    assert redact_text(url).endswith(url.split("@", 1)[1])  # the host and path stay


def test_an_ssh_user_and_a_plain_url_are_kept():
    for text in ("ssh://git@github.com/org/repo.git", "git@github.com:org/repo.git", "https://huggingface.co/org/model"):
        assert redact_text(text) == text


@pytest.mark.parametrize("code", [
    'os.environ["HF_TOKEN"] = "secretvalue123"',
    "os.environ['WANDB_API_KEY']='secretvalue123'",
    'config["api_key"]: "secretvalue123"',
])
def test_a_secret_assigned_by_subscript_is_redacted(code):
    """``os.environ["HF_TOKEN"] = "..."`` in a ``python -c`` command line or a traceback's
    source line: the closing bracket between the name and the '=' hid the assignment."""
    assert "secretvalue123" not in redact_text(code)
    assert "secretvalue123" not in " ".join(redact_argv(["python", "-c", f"import os; {code}"]))


@pytest.mark.parametrize("argv", [
    ["wandb", "login", WANDB_KEY],
    ["wandb", "login", "--relogin", WANDB_KEY],
    ["vault", "login", "s.AbCdEf0123456789"],
])
def test_the_secret_after_a_login_subcommand_is_redacted(argv):
    """``wandb login KEY`` (40 lowercase hex: no known shape, too few character classes for the
    high-entropy rule) went into processes.json and the journal's command as it was."""
    shown = redact_argv(argv)
    assert shown[-1] == MARK and shown[:2] == argv[:2]


@pytest.mark.parametrize("token", [
    "pplx-0123456789abcdef0123456789abcdef0123456789abcdef",
    "dop_v1_0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
    "AGE-SECRET-KEY-1QQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQ",
    "lsv2_pt_0123456789abcdef0123456789abcdef_0123456789",
    "tvly-0123456789abcdef0123456789abcdef",
    "fw_0123456789abcdefABCDEF",
    "key-0123456789abcdef0123456789abcdef",
])
def test_prefixed_tokens_with_one_case_bodies_are_redacted(token):
    assert token not in redact_text(f"key {token} ok")
