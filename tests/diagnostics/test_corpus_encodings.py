"""The corpus's verdicts hold when a paste arrives re-encoded the ways pastes travel: line
ends from Windows, terminal colours, a JSON log record, tabs, a rendered page's no-break
spaces and curly quotes, zero-width characters from a chat tool, and the other forms an
installed library's path takes (dist-packages, a conda env, Windows). Each real dump replay
names right must come out the same after each re-encoding."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from diag_helpers import PASTED, text_verdict
from hangwatch.diagnostics.corpus import load_corpus
from hangwatch.diagnostics.errors import DiagnosticsError

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

_SITE = re.compile(r"(?<=[\s\"(])/[^\s\"'():]*?/(?:site|dist)-packages/([^\s\"'():]*)")

ENCODINGS = {
    "crlf line ends": lambda t: t.replace("\n", "\r\n"),
    "terminal colours": lambda t: "\n".join(("\x1b[0;33m" + line + "\x1b[0m") if line.strip() else line for line in t.split("\n")),
    "one JSON record": lambda t: json.dumps({"log": t}),
    "tabs for indents": lambda t: re.sub(r"(?m)^((?:    )+)", lambda m: "\t" * (len(m.group(1)) // 4), t),
    "no-break spaces": lambda t: t.replace(" ", "\u00a0"),
    "curly quotes": lambda t: t.replace('"', "\u201c").replace("'", "\u2019"),
    "zero-width spaces": lambda t: "\ufeff" + t.replace("(", "\u200b("),
    "dist-packages": lambda t: t.replace("/site-packages/", "/dist-packages/"),
    "a conda env": lambda t: re.sub(r"/(?:usr|opt)[^\s\"'()]*?/(site|dist)-packages/",
                                    "/home/me/miniconda3/envs/x/lib/python3.10/site-packages/", t),
    "Windows paths": lambda t: _SITE.sub(lambda m: "C:\\Python311\\Lib\\site-packages\\" + m.group(1).replace("/", "\\"), t),
}


def _verdict(tmp_path: Path, text: str) -> str:
    try:
        return text_verdict(tmp_path, text)
    except DiagnosticsError:
        return "refused"


@pytest.fixture(scope="module")
def named_right(tmp_path_factory) -> list[tuple[str, str, str]]:
    """(name, text, verdict) of every known-cause dump replay names right."""
    tmp = tmp_path_factory.mktemp("baseline")
    out = []
    for e in load_corpus(PASTED):
        if e.expected == "?" or e.refusable:
            continue
        text = e.path.read_text(encoding="utf-8", errors="replace")
        verdict = _verdict(tmp, text)
        if verdict in e.expected_ids:
            out.append((e.name, text, verdict))
    assert len(out) > 300
    return out


@pytest.mark.parametrize("encoding", list(ENCODINGS))
def test_every_dump_named_right_is_named_the_same_when_re_encoded(tmp_path, named_right, encoding):
    encode = ENCODINGS[encoding]
    changed = [(name, verdict, got) for name, text, verdict in named_right
               if (got := _verdict(tmp_path, encode(text))) != verdict]
    assert not changed, f"{encoding}: {len(changed)} verdicts changed, e.g. {changed[:5]}"
