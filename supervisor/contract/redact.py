"""Secret redaction for everything a bundle stores.

Two tests, applied to environments, command lines, log tails and (as a last
safety net) every text file the bundle writer writes:
* by **name**: a variable, flag or key whose name contains TOKEN, SECRET,
  PASSWORD, PASSWD, PASSPHRASE, PWD, KEY, DSN, COOKIE, WEBHOOK or CREDENTIAL,
  or has a part PASS, PAT, PRIVATE or starting with AUTH (``HF_TOKEN``,
  ``PGPASSWORD``, ``MYSQL_PWD``, ``SENTRY_DSN``, ``--api-key``,
  ``"authorization":``) has its value replaced; in a command line also the
  value after ``-p``, ``--pwd``, ``--passphrase``, ``-pVALUE`` and the password
  of ``-u user:password``;
* by **shape**: values that look like credentials wherever they appear
  (``hf_...``, ``sk-...``, ``ghp_...``, AWS ``AKIA...``, Slack ``xox?-``, JWTs,
  ``Bearer`` tokens, ``scheme://user:pass@`` and ``redis://:pass@`` URLs,
  Slack, Discord and other webhook URLs, signed URLs' ``sig=``/``*Signature=``
  parameter, vendor-prefixed tokens, long high-entropy strings that are not
  identifiers joined by ``_``/``-`` such as bundle names or kernel frames).

Redaction errs towards removing too much: a bundle is shared in bug reports.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from typing import Any, Iterable, Mapping

MARK = "[REDACTED]"

# CREDS, PW and SSHPASS (sshpass -e reads it) are common short forms that no infix below catches.
_SENSITIVE_PARTS = frozenset({"TOKEN", "KEY", "SECRET", "SECRETS", "PASSWORD", "PASSWD", "CREDENTIAL", "CREDENTIALS", "APIKEY",
                              "PASS", "PRIVATE", "PAT", "PWD", "CREDS", "PW", "SSHPASS"})
# Anywhere in a name (PGPASSWORD, MYSQL_PWD, SENTRY_DSN, HTTP_COOKIE, SLACK_WEBHOOK_URL, ...).
# TOKENS/TOKENIZER are counts and models (MAX_TOKENS, TOKENIZERS_PARALLELISM), not secrets.
_SENSITIVE_INFIX = re.compile(r"TOKEN(?!S|IZ)|SECRET|PASSWORD|PASSWD|PASSPHRASE|PWD|KEY|DSN|COOKIE|WEBHOOK|CREDENTIAL")
# Names that contain an infix but hold a directory, not a secret.
_NOT_SENSITIVE = frozenset({"PWD", "OLDPWD"})
_NAME_SPLIT = re.compile(r"[_.\-\s]+|(?<=[a-z0-9])(?=[A-Z])")

_VALUE_PATTERNS = [
    re.compile(r"\bhf_[A-Za-z0-9]{16,}"),
    re.compile(r"\bsk-[A-Za-z0-9_\-]{16,}"),
    re.compile(r"\bgh[pousr]_[A-Za-z0-9]{20,}"),
    re.compile(r"\bgithub_pat_[A-Za-z0-9_]{20,}"),
    # GitLab's tokens (personal, OAuth, deploy, runner, CI job, trigger, feed, ...): a 20-character
    # body, too short for the high-entropy rule, so a bare glpat- in a log went out as it was.
    re.compile(r"\bgl(?:pat|oas|dt|rt|rtr|cbt|ptt|ft|imt|agent|soat|ffct)-[A-Za-z0-9_\-]{20,}"),
    re.compile(r"\bnpm_[A-Za-z0-9]{36}\b"),
    re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),
    re.compile(r"\bxox[abprs]-[A-Za-z0-9\-]{10,}"),
    re.compile(r"\beyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}"),
    # Prefixed tokens whose bodies the high-entropy rule misses (lowercase hex, short): Databricks'
    # dapi + 32 hex, Docker's dckr_pat_, Grafana's glsa_/glc_, Shopify's shpat_/shpss_/shpca_/shppa_,
    # NVIDIA NGC's nvapi-, Replicate's r8_, Tailscale's tskey-, Linear's lin_api_, Pulumi's pul-.
    re.compile(r"\bdapi[0-9a-f]{32}(?:-\d)?\b"),
    re.compile(r"\b(?:dckr_pat_|glsa_|glc_|shp(?:at|ss|ca|pa)_|nvapi-|r8_|tskey-|lin_api_|pul-)[A-Za-z0-9_\-]{16,}"),
    # Lowercase hex or one-case bodies the high-entropy rule (three character classes) misses:
    # Perplexity's pplx-, DigitalOcean's dop_v1_/doo_v1_/dor_v1_, age's AGE-SECRET-KEY-1; and the
    # LLM-tooling keys an RL trainer's rollouts carry: LangSmith's lsv2_pt_/lsv2_sk_, Tavily's
    # tvly-, Fireworks' fw_, Mailgun's key- + 32 hex.
    re.compile(r"\b(?:pplx-|do[por]_v1_|AGE-SECRET-KEY-1)[A-Za-z0-9]{32,}"),
    re.compile(r"\b(?:lsv2_(?:pt|sk)_[0-9a-f]{32}_[0-9a-f]{6,}|tvly-(?:dev-|prod-)?[A-Za-z0-9]{20,}|fw_[A-Za-z0-9]{20,}"
               r"|key-[0-9a-f]{32})\b"),
]
_BEARER = re.compile(r"(?i)\b(bearer|basic|token) [A-Za-z0-9._~+/\-]{8,}=*")
# user may be empty: redis://:password@host; the password runs to the authority's last @
# (an unescaped @ in it must not leave its end in clear: postgres://u:p@ss@db)
_URL_CREDS = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]{0,31}://)([^\s/:@\"']{0,256}):([^\s/\"']{1,1024})@")
# A web URL's userinfo with no password is the credential itself: git and pip take a token as the
# user (``https://TOKEN@github.com/...``, ``git+https://PAT@dev.azure.com/...``), and a token of no
# known shape (Azure DevOps' 52 lowercase characters, a hex OAuth token) went out as it was.
_URL_USER = re.compile(r"(?i)\b((?:[a-z][a-z0-9.\-]{0,16}\+)?(?:https?|wss?|ftps?)://)([^\s/:@\"'<>\[\]]{1,256})@")
# A PEM private key (RSA, EC, OpenSSH, PGP, ...): the whole body goes, not only the lines that
# look random; a log tail may begin inside one (an END with no BEGIN before it).
_PEM_BLOCK = re.compile(r"(-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----).*?"
                        r"(-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|\Z)", re.S)
_PEM_END = re.compile(r"-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----")
_PEM_BEGIN = re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----")
# Webhook URLs are credentials in themselves: whoever has one can post.
_WEBHOOKS = re.compile(
    r"(?i)\b(https?://(?:hooks\.slack\.com/(?:services|workflows|triggers)/|(?:ptb\.|canary\.)?discord(?:app)?\.com/api/webhooks/))"
    r"[^\s\"'<>]+")
# Any other webhook URL: a path segment "webhook(s)"/"webhookb2"/"hooks" (Microsoft Teams'
# *.webhook.office.com/webhookb2/..., Mattermost's /hooks/ID, Zapier, Discord) and all after it.
_WEBHOOK_PATHS = re.compile(
    r"(?i)\b(https?://[^\s/\"'<>]{1,256}(?:/[^\s/\"'<>?#]{0,256}){0,16}?/(?:webhooks?|webhookb2|hooks)/)[^\s\"'<>]+")
# Signed URLs carry their credential in a query parameter of no secret-sounding name: Azure's
# SAS ``sig=``, S3's and GCS's ``X-Amz-Signature=``/``X-Goog-Signature=``, CloudFront's
# ``Signature=`` (a SAS URL in a trainer's log went into the bundle's log tail, its command
# line into processes.json and the report). Only as a URL's parameter: ``signature`` elsewhere
# names a stack signature.
_SIGNED_QUERY = re.compile(r"(?i)([?&;](?:sig|[a-z0-9_\-]{0,64}signature)=)[^&#;\s\"'<>]+")
# curl -u user:password / --user user:password
_USER_COLON = re.compile(r"(?<!\S)(-u|--user)([ \t]+|=)([^\s:]+):([^\s\"']+)")
# name=value, name: value, "name": "value", --name value, --name=value, and a subscript's
# ["name"] = "value" (``os.environ["HF_TOKEN"] = "..."`` in a ``python -c`` or a traceback). Only the
# name and separator are matched here; the value is taken by _VALUE, so a
# non-sensitive "wandb: " never swallows the "api_key=..." that follows it.
# A name starts where a word does (not inside a run of name characters) and is at most 128
# characters: otherwise every position of a long run (a base64 blob, a hex dump in a log
# line) started a match that scanned the rest of the run, and 20 KB took 26 s.
_NAME_SEP = re.compile(
    r"""(?<![A-Za-z0-9_.\-])(?P<name>-{0,2}[A-Za-z_][A-Za-z0-9_.\-]{0,127})
        (?P<sep>["']?\]?[ \t]*[:=][ \t]*["']?|(?<=[A-Za-z0-9])[ \t]+(?=[^\s-]))""",
    re.VERBOSE,
)
_VALUE = re.compile(r"\[REDACTED\]|[^\s\"',;&}\]]+")
# After an opening quote the value is everything up to its closing quote (a password
# with spaces, an escaped quote in JSON), or to the end of the line when none comes.
_QUOTED = {'"': re.compile(r'(?:[^"\\\n]|\\.)*'), "'": re.compile(r"(?:[^'\\\n]|\\.)*")}
_ARG_NAME = re.compile(r"-{0,2}[A-Za-z_][A-Za-z0-9_.\-]*")
_CANDIDATE = re.compile(r"[A-Za-z0-9+/=_\-]{32,}")


def is_sensitive_name(name: str) -> bool:
    bare = name.strip("-\"' ")
    upper = bare.upper()
    if upper in _NOT_SENSITIVE:
        return False
    if _SENSITIVE_INFIX.search(upper):
        return True
    parts = [p.upper() for p in _NAME_SPLIT.split(bare) if p]
    return any(p in _SENSITIVE_PARTS or p.startswith("AUTH") for p in parts)


def looks_high_entropy(token: str) -> bool:
    """A long token mixing upper, lower and digits with high entropy: an API key,
    not a path (paths have several slashes) or a word."""
    if len(token) < 32 or token.count("/") > 2:
        return False
    # Identifiers and paths are words joined by _ - / .: a bundle path (.../...-attempt1-silent_hang),
    # a kernel frame (entry_SYSCALL_64_after_hwframe+0x76/0x7b). A key has a long run.
    if max(len(run) for run in re.split(r"[_\-/.]", token)) < 20:
        return False
    classes = sum((any(c.isupper() for c in token), any(c.islower() for c in token), any(c.isdigit() for c in token)))
    if classes < 3:
        return False
    counts = Counter(token)
    entropy = -sum(n / len(token) * math.log2(n / len(token)) for n in counts.values())
    return entropy >= 4.0


def redact_text(text: str) -> str:
    text = _redact_pem(text)
    text = _URL_CREDS.sub(lambda m: f"{m.group(1)}{m.group(2)}:{MARK}@", text)
    text = _URL_USER.sub(lambda m: f"{m.group(1)}{MARK}@", text)
    text = _WEBHOOKS.sub(lambda m: f"{m.group(1)}{MARK}", text)
    text = _WEBHOOK_PATHS.sub(lambda m: f"{m.group(1)}{MARK}", text)
    text = _SIGNED_QUERY.sub(lambda m: f"{m.group(1)}{MARK}", text)
    text = _USER_COLON.sub(lambda m: f"{m.group(1)}{m.group(2)}{m.group(3)}:{MARK}", text)
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
        start, quote = m.end(), m.group("sep")[-1:]
        if quote not in _QUOTED and text[start : start + 1] in _QUOTED:
            quote, start = text[start], start + 1  # --password 'a b': the quote follows the space
        value = (_QUOTED[quote] if quote in _QUOTED else _VALUE).match(text, start)
        if value is None or value.group(0) in (MARK, ""):
            continue
        out.append(text[pos:start])
        out.append(MARK)
        pos = value.end()
    out.append(text[pos:])
    return "".join(out)


def _redact_pem(text: str) -> str:
    end = _PEM_END.search(text)
    if end is not None and not _PEM_BEGIN.search(text, 0, end.start()):
        text = f"{MARK}\n{text[end.start():]}"
    return _PEM_BLOCK.sub(lambda m: f"{m.group(1)}\n{MARK}\n{m.group(2)}", text)


#: Deeper than this, a JSON value is not ours to keep: it goes whole.
_MAX_VALUE_DEPTH = 100


def redact_value(value: Any, *, _depth: int = 0) -> Any:
    """A JSON-shaped value (a heartbeat's ``info``, a bundle's JSON file) redacted field by field.

    It keeps its shape, so it stays valid JSON: ``redact_text`` over the serialized text
    replaced the number after ``"pass_at_1":`` (the part PASS) or the ``{`` after ``"auth":``
    with a bare ``[REDACTED]``, and the file no longer parsed. Here a value under a sensitive
    key goes whole (a string, a number, a list or an object; ``None``, a bool and ``""`` hold
    nothing to hide), and every other string, keys included, is redacted as text.
    """
    if _depth > _MAX_VALUE_DEPTH:
        return MARK
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, Mapping):
        out: dict[Any, Any] = {}
        for key, item in value.items():
            name = redact_text(key) if isinstance(key, str) else key
            if isinstance(key, str) and is_sensitive_name(key) and item not in (None, "") and not isinstance(item, bool):
                out[name] = MARK
            else:
                out[name] = redact_value(item, _depth=_depth + 1)
        return out
    if isinstance(value, (list, tuple)):
        return [redact_value(item, _depth=_depth + 1) for item in value]
    return value


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    return {name: (MARK if is_sensitive_name(name) and value else redact_text(value)) for name, value in env.items()}


def redact_argv(argv: Iterable[str]) -> list[str]:
    """A command line: the value after a sensitive flag goes, whatever it looks like."""
    out: list[str] = []
    hide_next = False
    user_next = False
    after_login = False  # the arguments after a ``login`` subcommand
    for arg in argv:
        if hide_next:
            out.append(MARK)
            hide_next = False
            continue
        if user_next:
            user, sep, _ = arg.partition(":")
            out.append(f"{user}:{MARK}" if sep else redact_text(arg))
            user_next = False
            continue
        if arg in ("-p", "--pwd", "--passphrase") or (
                arg.startswith("-") and "=" not in arg and is_sensitive_name(arg)):
            hide_next = True
            out.append(arg)
            continue
        if arg in ("-u", "--user"):
            user_next = True  # curl -u user:password
            out.append(arg)
            continue
        if after_login and not arg.startswith("-"):
            out.append(MARK)  # wandb login KEY, vault login TOKEN: a secret of any shape
            continue
        if arg == "login":
            after_login = True
        name, eq, _ = arg.partition("=")
        if eq and _ARG_NAME.fullmatch(name) and is_sensitive_name(name):
            out.append(f"{name}={MARK}")  # one argument: --password=correct horse battery, HF_TOKEN=a b
            continue
        if len(arg) > 2 and arg.startswith("-p") and not arg.startswith("--"):
            out.append(f"-p{MARK}")  # mysql -pSECRET
            continue
        out.append(redact_text(arg))
    return out
