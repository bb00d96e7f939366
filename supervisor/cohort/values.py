"""Every value a node reads from the cohort store, read one bounded way, and every record it writes, sealed.

Anyone who reaches the store's port can write any key (c10d's ``TCPStore`` has no
authentication), so a value read from it is judged before anything parses it:

* **bounded** (``parse``): at most ``MAX_VALUE_CHARS`` characters, UTF-8 (the store helper
  hands bytes that are not as lone surrogates), nested at most ``MAX_DEPTH`` deep (checked
  before ``json.loads``, whose recursion a value 400 KB deep overflowed: ``RecursionError``,
  every node's internal error, exit 70), and with no non-finite number (``NaN``, ``1e999``);
* **authenticated** (``Sealer``): with a per-job secret every record carries an
  HMAC-SHA256 over its key and its text, so a record written by a stranger (or copied from
  another key) is not one a node wrote. Without a secret records are plain JSON, as before.

A value that fails is ``BadValue``; the cohort ignores it and journals it once per key.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import stat
from pathlib import Path
from typing import Any, Mapping

from hangwatch.contract.env import COHORT_SECRET

MAX_VALUE_CHARS = 65536  # the largest record a node writes is an incident with 8 KB of evidence
MAX_DEPTH = 16  # a node's own records nest 4 deep at most
SEAL_PREFIX = "hw1:"  # sealed: "hw1:" + 64 hex digits of the MAC + ":" + the record's JSON text
_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_BRACKETS = re.compile(r"[\[\]{}]")


class BadValue(ValueError):
    """A store value no node wrote (or that no node can read safely); ``why`` says how it failed."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


def _no_constant(name: str) -> Any:
    raise BadValue(f"a non-finite number ({name})")


def _finite_float(text: str) -> float:
    value = float(text)
    if value != value or value in (float("inf"), float("-inf")):
        raise BadValue(f"a non-finite number ({text[:20]})")
    return value


def depth_of(text: str) -> int:
    """How deep ``text``'s arrays and objects nest (strings' brackets not counted), without parsing it."""
    depth = deepest = 0
    for bracket in _BRACKETS.findall(_STRINGS.sub('""', text)):
        depth += 1 if bracket in "[{" else -1
        deepest = max(deepest, depth)
    return deepest


def parse(raw: str) -> Any:
    """``raw`` as JSON, within the bounds; ``BadValue`` otherwise (never another exception)."""
    if not isinstance(raw, str):
        raise BadValue(f"not text ({type(raw).__name__})")
    if len(raw) > MAX_VALUE_CHARS:
        raise BadValue(f"too large ({len(raw)} characters or more, at most {MAX_VALUE_CHARS})")
    try:
        raw.encode("utf-8")
    except UnicodeEncodeError:
        raise BadValue("not UTF-8") from None
    if depth_of(raw) > MAX_DEPTH:
        raise BadValue(f"nested more than {MAX_DEPTH} deep")
    try:
        return json.loads(raw, parse_constant=_no_constant, parse_float=_finite_float)
    except BadValue:
        raise
    except (ValueError, RecursionError, MemoryError, TypeError) as exc:  # (int digits limit is a ValueError)
        raise BadValue(f"not JSON ({str(exc)[:80]})") from None


class Sealer:
    """Seals the records this node writes and opens the ones it reads (``secret`` None: unauthenticated)."""

    def __init__(self, secret: bytes | None) -> None:
        self.secret = secret or None

    @property
    def authenticated(self) -> bool:
        return self.secret is not None

    def _mac(self, key: str, text: str) -> str:
        assert self.secret is not None
        return hmac.new(self.secret, key.encode() + b"\0" + text.encode(), hashlib.sha256).hexdigest()

    def seal_text(self, key: str, text: str) -> str:
        """The value to write under ``key`` for the record ``text`` (JSON): with its MAC when there is a secret."""
        return text if self.secret is None else f"{SEAL_PREFIX}{self._mac(key, text)}:{text}"

    def unseal(self, key: str, raw: str) -> str:
        """The record's JSON text under ``key``, checked (MAC, then ``parse``); ``BadValue`` for one no node
        of this job wrote, or one no node can read safely."""
        if self.secret is not None:
            if not isinstance(raw, str) or not raw.startswith(SEAL_PREFIX):
                raise BadValue("not sealed with the job's secret (no MAC)")
            mac, _, text = raw[len(SEAL_PREFIX):].partition(":")
            if len(text) > MAX_VALUE_CHARS:
                raise BadValue(f"too large ({len(text)} characters or more, at most {MAX_VALUE_CHARS})")
            try:
                expected = self._mac(key, text)
            except UnicodeEncodeError:
                raise BadValue("not UTF-8") from None
            if not hmac.compare_digest(mac.encode("ascii", "replace"), expected.encode()):
                raise BadValue("its MAC does not match the job's secret")
            raw = text
        parse(raw)
        return raw


SECRET_ENV = COHORT_SECRET


def load_secret(path: str | None, environ: Mapping[str, str]) -> bytes | None:
    """The job's cohort secret: the file ``--cohort-secret-file`` names, else ``$HANGWATCH_COHORT_SECRET``,
    else None (unauthenticated). The file must be this user's and not readable by group or others:
    ``ValueError`` says why otherwise."""
    if path:
        file = Path(path).expanduser()
        try:
            info = file.stat()
            data = file.read_bytes()
        except OSError as exc:
            raise ValueError(f"--cohort-secret-file {path}: cannot read it ({exc.strerror or exc})") from None
        if info.st_uid != os.getuid():
            raise ValueError(f"--cohort-secret-file {path}: owned by uid {info.st_uid}, not this user "
                             f"({os.getuid()}): the secret must be the job owner's own file")
        if info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise ValueError(f"--cohort-secret-file {path}: mode {stat.S_IMODE(info.st_mode):04o} lets group or others "
                             "read it; chmod 600 it")
        secret = data.strip()
        if len(secret) < 16:
            raise ValueError(f"--cohort-secret-file {path}: holds {len(secret)} bytes; a secret needs 16 or more "
                             "(for example: openssl rand -hex 32 > FILE)")
        return secret
    value = environ.get(SECRET_ENV, "").strip()
    if not value:
        return None
    if len(value) < 16:
        raise ValueError(f"${SECRET_ENV} holds {len(value)} characters; a secret needs 16 or more "
                         "(for example: openssl rand -hex 32)")
    return value.encode()
