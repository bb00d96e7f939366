"""Each redaction pattern the security review found missing, and the identifiers
that must survive (docs/security.md)."""

from __future__ import annotations

import pytest

from hangwatch.contract.redact import MARK, redact_argv, redact_env, redact_text

SECRET = "Zq7pW2xK9mLr"


@pytest.mark.parametrize("name", ["PGPASSWORD", "MYSQL_PWD", "SENTRY_DSN", "COOKIE", "HTTP_COOKIE", "GITHUB_PAT",
                                  "SLACK_WEBHOOK_URL", "MY_SERVICE_KEY", "DB_PASSPHRASE", "ACCESS_TOKEN",
                                  "clientSecret", "AWS_SECRET_ACCESS_KEY"])
def test_secret_looking_names_in_the_environment(name):
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
def test_secret_shapes_in_text(text):
    assert SECRET not in redact_text(text), redact_text(text)


@pytest.mark.parametrize("argv", [
    ["mysql", "-p", SECRET], ["mysql", f"-p{SECRET}"], ["tool", "--pwd", SECRET], ["gpg", "--passphrase", SECRET],
    ["curl", "-u", f"alice:{SECRET}", "https://x"], ["curl", "--user", f"alice:{SECRET}"], ["x", f"--token={SECRET}"],
])
def test_secret_arguments(argv):
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
