"""Redaction by name and by shape; it must not eat ordinary stack data."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from diag_helpers import DATA
from hangwatch.contract.redact import MARK, redact_argv, redact_env, redact_text


def test_by_name():
    env = redact_env({"HF_TOKEN": "anything", "WANDB_API_KEY": "x", "MY_PASSWD": "p", "AUTHORIZATION": "a",
                      "GCP_CREDENTIALS": "c", "PWD": "/home/u", "PATH": "/usr/bin", "HANGWATCH_RUN_DIR": "/runs/r1"})
    assert {k for k, v in env.items() if v == MARK} == {"HF_TOKEN", "WANDB_API_KEY", "MY_PASSWD", "AUTHORIZATION", "GCP_CREDENTIALS"}
    assert env["PATH"] == "/usr/bin" and env["HANGWATCH_RUN_DIR"] == "/runs/r1"


def test_by_shape():
    for secret in ("hf_abcdefghijklmnopqrstuvwx", "sk-proj-abcdefghijklmnopqrstu", "ghp_abcdefghijklmnopqrstuvwxyz0123",
                   "AKIAIOSFODNN7EXAMPLE", "xoxb-1234567890-abcdefghij", "aB3dE5fG7hJ9kL1mN3pQ5rS7tV9wX1yZ3bD5"):
        out = redact_text(f"value {secret} end")
        assert secret not in out and MARK in out, secret
    assert redact_text("postgres://user:hunter2@db:5432/x") == f"postgres://user:{MARK}@db:5432/x"
    assert "abcdefghijkl" not in redact_text("Authorization: Bearer abcdefghijkl")


def test_assignments_in_logs_and_flags():
    assert redact_text("wandb: api_key=s3cr3tvalue ok") == f"wandb: api_key={MARK} ok"
    assert redact_text('{"password": "pw", "lr": 0.1}') == f'{{"password": "{MARK}", "lr": 0.1}}'
    assert redact_text("run --auth-token abc123 --lr 1e-4") == f"run --auth-token {MARK} --lr 1e-4"
    assert redact_argv(["train.py", "--hf-token", "plain", "--secret=zzz", "--steps", "10"]) == \
        ["train.py", "--hf-token", MARK, f"--secret={MARK}", "--steps", "10"]


def test_stack_data_survives():
    raw = (DATA / "cuda_graph_real.json").read_text()
    assert redact_text(raw) == raw
    assert json.loads(redact_text(raw))
    text = (DATA / "gpu_model_runner_native.txt").read_text()
    assert redact_text(text) == text
    for ok in ("max_tokens=512", "tokenizer=/models/qwen", "/usr/lib/python3.11/site-packages/torch/nn/modules/module.py",
               "0123456789abcdef0123456789abcdef01234567"):
        assert redact_text(ok) == ok


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=200))
def test_idempotent(text):
    once = redact_text(text)
    assert redact_text(once) == once
