"""Known token shapes the redaction missed."""

from __future__ import annotations

import pytest

from hangwatch.contract.redact import redact_text, redact_value

# Realistic bodies (random-looking, the length each issuer uses); fake values.
TOKENS = [
    "glpat-Zq3vX8mK2pLr7NwT4yBs",  # GitLab personal access token: 20 characters, below the entropy rule's length
    "glpat-ASluKawM76AQLMgcLWoJ",
    "gldt-9fKq2LmZx7RtBvNw3YcP",  # GitLab deploy token
    "glrt-t1_Hm4kQz8RwLp2XvN7cTy",  # GitLab runner token
    "npm_ar32ujuHGmwVbvH4GpRsyEnPCtOxAkGEqEFW",
]


@pytest.mark.parametrize("token", TOKENS)
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
