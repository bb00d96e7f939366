"""Redaction (``hangwatch.contract.redact``): secrets found by name, by shape and by place
(assignments, flags, URLs, login subcommands, PEM blocks), in text, environments, argv and JSON
values; identifiers and ordinary stack data left as they are."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from hangwatch.contract.redact import MARK, redact_argv, redact_env, redact_text, redact_value
from hangwatch.diagnostics.sysinfo import tail


DATA = Path(__file__).resolve().parents[1] / "diagnostics" / "data"


def test_secret_named_environment_variables_are_redacted():
    env = redact_env({"HF_TOKEN": "anything", "WANDB_API_KEY": "x", "MY_PASSWD": "p", "AUTHORIZATION": "a",
                      "GCP_CREDENTIALS": "c", "PWD": "/home/u", "PATH": "/usr/bin", "HANGWATCH_RUN_DIR": "/runs/r1"})
    assert {k for k, v in env.items() if v == MARK} == {"HF_TOKEN", "WANDB_API_KEY", "MY_PASSWD", "AUTHORIZATION", "GCP_CREDENTIALS"}
    assert env["PATH"] == "/usr/bin" and env["HANGWATCH_RUN_DIR"] == "/runs/r1"


def test_secrets_are_recognised_by_their_shape():
    for secret in ("hf_abcdefghijklmnopqrstuvwx", "sk-proj-abcdefghijklmnopqrstu", "ghp_abcdefghijklmnopqrstuvwxyz0123",
                   "AKIAIOSFODNN7EXAMPLE", "xoxb-1234567890-abcdefghij", "aB3dE5fG7hJ9kL1mN3pQ5rS7tV9wX1yZ3bD5"):
        out = redact_text(f"value {secret} end")
        assert secret not in out and MARK in out, secret
    assert redact_text("postgres://user:hunter2@db:5432/x") == f"postgres://user:{MARK}@db:5432/x"
    assert "abcdefghijkl" not in redact_text("Authorization: Bearer abcdefghijkl")


def test_assigned_secrets_in_logs_and_flags_are_redacted():
    assert redact_text("wandb: api_key=s3cr3tvalue ok") == f"wandb: api_key={MARK} ok"
    assert redact_text('{"password": "pw", "lr": 0.1}') == f'{{"password": "{MARK}", "lr": 0.1}}'
    assert redact_text("run --auth-token abc123 --lr 1e-4") == f"run --auth-token {MARK} --lr 1e-4"
    assert redact_argv(["train.py", "--hf-token", "plain", "--secret=zzz", "--steps", "10"]) == \
        ["train.py", "--hf-token", MARK, f"--secret={MARK}", "--steps", "10"]


def test_stack_data_survives_redaction():
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
def test_redaction_is_idempotent(text):
    once = redact_text(text)
    assert redact_text(once) == once


SECRET = "Zq7pW2xK9mLr"


@pytest.mark.parametrize("name", ["PGPASSWORD", "MYSQL_PWD", "SENTRY_DSN", "COOKIE", "HTTP_COOKIE", "GITHUB_PAT",
                                  "SLACK_WEBHOOK_URL", "MY_SERVICE_KEY", "DB_PASSPHRASE", "ACCESS_TOKEN",
                                  "clientSecret", "AWS_SECRET_ACCESS_KEY", "SSHPASS", "GCP_CREDS", "LDAP_BIND_PW"])
def test_secret_looking_names_in_the_environment_are_redacted(name):
    assert redact_env({name: SECRET}) == {name: MARK}
    assert SECRET not in redact_text(f"{name}={SECRET}")


@pytest.mark.parametrize("name", ["PWD", "OLDPWD", "TOKENIZERS_PARALLELISM", "MAX_TOKENS", "PATH"])
def test_names_that_only_look_alike_are_kept(name):
    assert redact_env({name: "/work/run"}) == {name: "/work/run"}


@pytest.mark.parametrize("text", [
    "redis://:" + SECRET + "@cache:6379/0",
    "postgres://trainer:" + SECRET + "@db/x",
    "https://hooks.slack.com/services/T0AAAAAAA/B0BBBBBBB/" + SECRET,
    "https://discord.com/api/webhooks/123456789/" + SECRET,
    "https://discordapp.com/api/webhooks/123456789/" + SECRET,
    "curl -u alice:" + SECRET + " https://example.org",
    "hf_" + SECRET + "abcdEFGH",
    "ghp_" + SECRET + "abcdEFGHijkl",
    "sk-" + SECRET + "abcdEFGH",
    "xoxb-" + SECRET,
])
def test_secret_shapes_in_text_are_redacted(text):
    assert SECRET not in redact_text(text), redact_text(text)


@pytest.mark.parametrize("argv", [
    ["mysql", "-p", SECRET], ["mysql", f"-p{SECRET}"], ["tool", "--pwd", SECRET], ["gpg", "--passphrase", SECRET],
    ["curl", "-u", f"alice:{SECRET}", "https://x"], ["curl", "--user", f"alice:{SECRET}"], ["x", f"--token={SECRET}"],
])
def test_secret_command_line_arguments_are_redacted(argv):
    out = redact_argv(argv)
    assert not any(SECRET in a for a in out), out
    assert out[0] == argv[0]


@pytest.mark.parametrize("text", [
    "20261130T221530-attempt1-silent_hang",
    "incidents/20261130T221530-attempt12-silent_hang/report.html",
    "entry_SYSCALL_64_after_hwframe+0x76/0x7b",
    "do_syscall_64+0x5d/0x90 __x64_sys_futex+0x7e/0x1e0",
    "max_tokens=512 tokenizer=/models/qwen",
])
def test_identifiers_are_not_redacted(text):
    assert redact_text(text) == text


# -- values with spaces, keys in PEM blocks, an @ in a URL's password (red-team probe) --------------

PHRASE = "correct horse " + SECRET + " staple"


@pytest.mark.parametrize("text", [
    f"PASSWORD='{PHRASE}'", f'export DB_PASSWORD="{PHRASE}" USER=bob', f"--password '{PHRASE}' --epochs 3",
    f'--token "{PHRASE}"', f'{{"password": "a \\"{PHRASE}\\" c", "user": "x"}}', f"wandb: api_key='{PHRASE}'",
    "postgresql://trainer:p@" + SECRET + "@db/x",
])
def test_a_quoted_value_with_spaces_or_an_at_sign_goes_whole(text):
    out = redact_text(text)
    assert SECRET not in out and "staple" not in out, out
    assert redact_text(out) == out


@pytest.mark.parametrize("argv", [
    ["python", "train.py", f"--password={PHRASE}"], ["env", f"HF_TOKEN={PHRASE}", "python", "x"],
    ["python", "train.py", f"--hub-token={PHRASE}", "--epochs=3"],
])
def test_one_argument_holding_a_value_with_spaces_goes_whole(argv):
    out = redact_argv(argv)
    assert not any(SECRET in a or "staple" in a for a in out), out
    assert "--epochs=3" in out or "--epochs=3" not in argv


# A key's body has lines that look random and lines that do not (several slashes, few classes).
PEM_BODY = ["MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC" + SECRET[:8],
            "abc/def/ghi/jkl/" + SECRET + "/mno/pqr/stu/vwx/yz0123456789abcdef",
            "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa" + SECRET.lower()]


@pytest.mark.parametrize("kind", ["RSA PRIVATE KEY", "PRIVATE KEY", "OPENSSH PRIVATE KEY", "PGP PRIVATE KEY BLOCK"])
@pytest.mark.parametrize("cut", ["whole", "tail starts inside", "tail ends inside"])
def test_a_private_key_in_a_log_goes_whole(kind, cut):
    lines = ["step 10 loss 0.5", f"-----BEGIN {kind}-----", *PEM_BODY, f"-----END {kind}-----", "step 11 loss 0.4"]
    if cut == "tail starts inside":
        lines = lines[3:]
    elif cut == "tail ends inside":
        lines = lines[:4]
    out = redact_text("\n".join(lines))
    assert SECRET not in out and SECRET[:8] not in out and SECRET.lower() not in out, out
    assert ("step 11" in out) == (cut != "tail ends inside") and redact_text(out) == out


# Realistic bodies (random-looking, the length each issuer uses); fake values.
GITLAB_AND_NPM_TOKENS = [
    "glpat-Zq3vX8mK2pLr7NwT4yBs",  # GitLab personal access token: 20 characters, below the entropy rule's length
    "glpat-ASluKawM76AQLMgcLWoJ",
    "gldt-9fKq2LmZx7RtBvNw3YcP",  # GitLab deploy token
    "glrt-t1_Hm4kQz8RwLp2XvN7cTy",  # GitLab runner token
    "npm_ar32ujuHGmwVbvH4GpRsyEnPCtOxAkGEqEFW",
]


@pytest.mark.parametrize("token", GITLAB_AND_NPM_TOKENS)
def test_a_bare_known_token_is_redacted_in_a_log_line_and_a_json_field(token):
    line = f"2026-01-01 12:00:00 pushing model with credentials {token} to the registry"
    shown = redact_text(line)
    assert token not in shown and token[6:] not in shown, shown
    assert shown.startswith("2026-01-01 12:00:00 pushing model with credentials ")
    value = redact_value({"registry": {"auth": [token]}, "note": f"using {token}"})
    assert token not in repr(value)


def test_words_that_only_look_like_the_prefixes_are_kept():
    text = "gl-renderer glpat-short npm_config_cache=/tmp/npm module global-step-20 dataset_glft-v2"
    assert redact_text(text) == text


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


@pytest.mark.timeout(60)
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


PREFIXED_TOKENS = [
    "dapi0123456789abcdef0123456789abcdef",       # Databricks: lowercase hex
    "dckr_pat_abcdefghijklmnopqrstuvwxyz0",       # Docker
    "glsa_abcdefghijklmnopqrstuvwxyz012345_abcdef12",  # Grafana service account
    "shpat_0123456789abcdef0123456789abcdef",     # Shopify
    "nvapi-abcdefghijklmnopqrstuvwxyz0123456789",  # NVIDIA NGC
    "pul-0123456789abcdef0123456789abcdef01234567",  # Pulumi: lowercase hex
]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("token", PREFIXED_TOKENS)
def test_prefixed_tokens_below_the_high_entropy_rule_are_redacted(token: str) -> None:
    assert token not in redact_text(f"export VALUE={token}; run {token}")


@pytest.mark.timeout(60)
def test_stack_signatures_and_plain_urls_are_left_as_they_are() -> None:
    text = ("signature_id: nccl-allreduce-wait signature=lock-wait "
            "https://github.com/org/repo/blob/main/hooks.py?plain=1 https://example.com/a?signed=true "
            "commit 0123456789abcdef0123456789abcdef01234567")
    assert redact_text(text) == text


AZURE_PAT = "abcdefghijklmnopqrstuvwxyz234567abcdefghijklmnopqrst"  # 52 lowercase base32: no known shape


WANDB_KEY = "0123456789abcdef0123456789abcdef01234567"  # 40 lowercase hex


@pytest.mark.timeout(30)
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


@pytest.mark.timeout(30)
def test_an_ssh_user_and_a_plain_url_are_kept():
    for text in ("ssh://git@github.com/org/repo.git", "git@github.com:org/repo.git", "https://huggingface.co/org/model"):
        assert redact_text(text) == text


@pytest.mark.timeout(30)
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


@pytest.mark.timeout(30)
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


@pytest.mark.timeout(30)
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
