"""Secret redaction for everything a bundle stores.

Two tests, applied to environments, command lines, log tails and (as a last
safety net) every text file the bundle writer writes:
* by **name**: a variable, flag or key whose name has a part TOKEN, KEY, SECRET,
  PASSWORD, PASSWD, CREDENTIAL(S) or starts with AUTH (``HF_TOKEN``,
  ``--api-key``, ``"authorization":``) has its value replaced;
* by **shape**: values that look like credentials wherever they appear
  (``hf_...``, ``sk-...``, ``ghp_...``, AWS ``AKIA...``, Slack ``xox?-``, JWTs,
  ``Bearer`` tokens, ``scheme://user:pass@`` URLs, long high-entropy strings).

Redaction errs towards removing too much: a bundle is shared in bug reports.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from typing import Iterable, Mapping

MARK = "[REDACTED]"

_SENSITIVE_PARTS = frozenset({"TOKEN", "KEY", "SECRET", "SECRETS", "PASSWORD", "PASSWD", "CREDENTIAL", "CREDENTIALS", "APIKEY", "PASS", "PRIVATE"})
_NAME_SPLIT = re.compile(r"[_.\-\s]+|(?<=[a-z0-9])(?=[A-Z])")

_VALUE_PATTERNS = [
    re.compile(r"\bhf_[A-Za-z0-9]{16,}"),
    re.compile(r"\bsk-[A-Za-z0-9_\-]{16,}"),
    re.compile(r"\bgh[pousr]_[A-Za-z0-9]{20,}"),
    re.compile(r"\bgithub_pat_[A-Za-z0-9_]{20,}"),
    re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),
    re.compile(r"\bxox[abprs]-[A-Za-z0-9\-]{10,}"),
    re.compile(r"\beyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}"),
]
_BEARER = re.compile(r"(?i)\b(bearer|basic|token) [A-Za-z0-9._~+/\-]{8,}=*")
_URL_CREDS = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://)([^\s/:@\"']+):([^\s/@\"']+)@")
# name=value, name: value, "name": "value", --name value, --name=value. Only the
# name and separator are matched here; the value is taken by _VALUE, so a
# non-sensitive "wandb: " never swallows the "api_key=..." that follows it.
_NAME_SEP = re.compile(
    r"""(?P<name>-{0,2}[A-Za-z_][A-Za-z0-9_.\-]*)
        (?P<sep>["']?[ \t]*[:=][ \t]*["']?|(?<=[A-Za-z0-9])[ \t]+(?=[^\s-]))""",
    re.VERBOSE,
)
_VALUE = re.compile(r"\[REDACTED\]|[^\s\"',;&}\]]+")
_CANDIDATE = re.compile(r"[A-Za-z0-9+/=_\-]{32,}")


def is_sensitive_name(name: str) -> bool:
    parts = [p.upper() for p in _NAME_SPLIT.split(name.strip("-\"' ")) if p]
    return any(p in _SENSITIVE_PARTS or p.startswith("AUTH") for p in parts)


def looks_high_entropy(token: str) -> bool:
    """A long token mixing upper, lower and digits with high entropy: an API key,
    not a path (paths have several slashes) or a word."""
    if len(token) < 32 or token.count("/") > 2:
        return False
    classes = sum((any(c.isupper() for c in token), any(c.islower() for c in token), any(c.isdigit() for c in token)))
    if classes < 3:
        return False
    counts = Counter(token)
    entropy = -sum(n / len(token) * math.log2(n / len(token)) for n in counts.values())
    return entropy >= 4.0


def redact_text(text: str) -> str:
    text = _URL_CREDS.sub(lambda m: f"{m.group(1)}{m.group(2)}:{MARK}@", text)
    text = _BEARER.sub(lambda m: f"{m.group(1)} {MARK}", text)
    text = _redact_assignments(text)
    for pattern in _VALUE_PATTERNS:
        text = pattern.sub(MARK, text)
    return _CANDIDATE.sub(lambda m: MARK if looks_high_entropy(m.group(0)) else m.group(0), text)


def _redact_assignments(text: str) -> str:
    out: list[str] = []
    pos = 0
    for m in _NAME_SEP.finditer(text):
        name = m.group("name")
        if m.start() < pos or not is_sensitive_name(name):
            continue
        # "--api-key VALUE" counts for flags only: "key value" in prose is too common.
        if not m.group("sep").strip() and not name.startswith("-"):
            continue
        value = _VALUE.match(text, m.end())
        if value is None or value.group(0) == MARK:
            continue
        out.append(text[pos : m.end()])
        out.append(MARK)
        pos = value.end()
    out.append(text[pos:])
    return "".join(out)


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    return {name: (MARK if is_sensitive_name(name) and value else redact_text(value)) for name, value in env.items()}


def redact_argv(argv: Iterable[str]) -> list[str]:
    """A command line: the value after a sensitive flag goes, whatever it looks like."""
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next:
            out.append(MARK)
            hide_next = False
            continue
        if arg.startswith("-") and "=" not in arg and is_sensitive_name(arg):
            hide_next = True
            out.append(arg)
            continue
        out.append(redact_text(arg))
    return out
