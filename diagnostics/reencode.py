"""Replay on the corpus's pastes re-encoded the ways pastes travel. Pure but for ``main``.

A dump reaches replay through a terminal, a mail client, a forum, a chat tool, a log
collector: with Windows line ends, colours, a JSON record around it, tabs, a rendered
page's no-break spaces and curly quotes, a page's source (``<br>``, ``&nbsp;``, an escaped
``<pre>``), a mail archive's quoted-printable body, zero-width characters, re-wrapped at 72 or 80
columns, behind a timestamp on every line, with an installed library's path in another
form (dist-packages, a conda env, Windows). ``ENCODINGS`` are those ways; for each, the
report says how many of the dumps replay names right keep their verdict::

    python -m hangwatch.diagnostics.reencode [DIR] [--show N]

One line per encoding, ``encoding=NAME kept=K of=N``. ``MUST_HOLD`` are the encodings
under which every verdict holds today (tests/diagnostics/test_corpus_encodings.py keeps
them so); the others (re-wrapped lines, prefixes before every line) are measured.
"""

from __future__ import annotations

import argparse
import functools
import html
import json
import quopri
import re
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Callable, Sequence

from hangwatch.diagnostics.corpus import DEFAULT_DIR, Entry, load_corpus
from hangwatch.diagnostics.signatures import Signature

_SITE = re.compile(r"(?<=[\s\"(])/[^\s\"'():]*?/(?:site|dist)-packages/([^\s\"'():]*)")


def _lines(t: str, f: Callable[[int, str], str]) -> str:
    return "\n".join(f(i, line) for i, line in enumerate(t.split("\n")))


def _hard_wrap(line: str, width: int) -> str:
    return "\n".join(line[i:i + width] for i in range(0, len(line), width)) if len(line) > width else line


ENCODINGS: dict[str, Callable[[str], str]] = {
    "crlf": lambda t: t.replace("\n", "\r\n"),
    "colours": lambda t: _lines(t, lambda i, line: f"\x1b[0;33m{line}\x1b[0m" if line.strip() else line),
    "json": lambda t: json.dumps({"log": t}),
    "tabs": lambda t: re.sub(r"(?m)^((?:    )+)", lambda m: "\t" * (len(m.group(1)) // 4), t),
    "no-break-spaces": lambda t: t.replace(" ", "\u00a0"),
    "curly-quotes": lambda t: t.replace('"', "\u201c").replace("'", "\u2019"),
    "zero-width": lambda t: "\ufeff" + t.replace("(", "\u200b("),
    "dist-packages": lambda t: t.replace("/site-packages/", "/dist-packages/"),
    "conda": lambda t: re.sub(r"/(?:usr|opt)[^\s\"'()]*?/(site|dist)-packages/",
                              "/home/me/miniconda3/envs/x/lib/python3.10/site-packages/", t),
    "windows-paths": lambda t: _SITE.sub(lambda m: "C:\\Python311\\Lib\\site-packages\\" + m.group(1).replace("/", "\\"), t),
    "page-source-pre": lambda t: "<pre><code>" + html.escape(t) + "</code></pre>",
    "page-source-nbsp": lambda t: _lines(t, lambda i, line: html.escape(line).replace(" ", "&nbsp;")),
    "page-source-br": lambda t: "<br>\n".join(html.escape(line) for line in t.split("\n")),
    "quoted": lambda t: _lines(t, lambda i, line: "> " + line),
    "indented": lambda t: textwrap.indent(t, "        "),
    "trimmed": lambda t: _lines(t, lambda i, line: line.lstrip()),
    "wrapped-at-spaces": lambda t: _lines(t, lambda i, line: textwrap.fill(
        line, 76, break_long_words=False, break_on_hyphens=False) if len(line) > 76 else line),
    "hard-wrapped": lambda t: _lines(t, lambda i, line: _hard_wrap(line, 100)),
    "timestamped": lambda t: _lines(t, lambda i, line: f"2026-01-01T12:00:{i % 60:02d}.1234567Z {line}"),
    "logger-prefixed": lambda t: _lines(t, lambda i, line: f"2026-01-01 12:00:{i % 60:02d},123 INFO [rank0]: {line}"),
    "journald": lambda t: _lines(t, lambda i, line: f"Jan 01 12:00:{i % 60:02d} host python3[4242]: {line}"),
    # a mail archive's message body as sent (quoted-printable: "=3D", "=A0", soft breaks at 76)
    "quoted-printable": lambda t: quopri.encodestring(t.encode("utf-8")).decode("ascii"),
}

#: Encodings under which every corpus dump replay names right keeps its verdict.
MUST_HOLD = ("crlf", "colours", "json", "tabs", "no-break-spaces", "curly-quotes", "zero-width", "dist-packages", "conda",
             "windows-paths", "page-source-pre", "page-source-nbsp")


@functools.cache
def _signatures() -> tuple[Signature, ...]:
    """The built-in signatures, read once (each verdict would read the file again)."""
    from hangwatch.diagnostics.signatures import load_signatures  # noqa: PLC0415

    return tuple(load_signatures(()))


def verdict(text: str, workdir: Path) -> str:
    """Replay's signature for ``text`` as a pasted file ("unknown" when none matched,
    "refused" when it reads no stack)."""
    from hangwatch.diagnostics.errors import DiagnosticsError  # noqa: PLC0415
    from hangwatch.diagnostics.replay import analyse  # noqa: PLC0415

    path = workdir / "paste.txt"
    path.write_text(text, encoding="utf-8")
    try:
        (incident,) = analyse([path], _signatures())
    except DiagnosticsError:
        return "refused"
    c = incident.classification
    return (c.signature_id or "unknown") if c is not None else "none"


def named_right(entries: Sequence[Entry], workdir: Path) -> list[tuple[str, str, str]]:
    """(name, text, verdict) of every known-cause dump replay names right."""
    out = []
    for e in entries:
        if e.expected == "?" or e.refusable:
            continue
        text = e.path.read_text(encoding="utf-8", errors="replace")
        v = verdict(text, workdir)
        if v in e.expected_ids:
            out.append((e.name, text, v))
    return out


def changed(right: Sequence[tuple[str, str, str]], encoding: str, workdir: Path) -> list[tuple[str, str, str]]:
    """(name, verdict, verdict re-encoded) of each dump whose verdict ``encoding`` changes.
    A paste that is a page's source already (a mail archive's HTML) is not put in a page's
    source again, nor one still quoted-printable encoded again: escaped twice, its markup
    or its escapes would be the text."""
    from hangwatch.diagnostics.pastes.reader import is_page_source, is_quoted_printable  # noqa: PLC0415

    encode = ENCODINGS[encoding]
    return [(name, v, got) for name, text, v in right
            if not (encoding.startswith("page-source") and is_page_source(text))
            and not (encoding == "quoted-printable" and is_quoted_printable(text))
            and (got := verdict(encode(text), workdir)) != v]


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m hangwatch.diagnostics.reencode",
        description="How replay's verdicts on a corpus of pasted dumps hold when each paste is re-encoded the ways pastes "
                    "travel: one line per encoding, encoding=NAME kept=K of=N.")
    ap.add_argument("directory", nargs="?", type=Path, default=DEFAULT_DIR, help="the corpus (NAME.txt + NAME.meta)")
    ap.add_argument("--show", type=int, default=0, metavar="N", help="list up to N dumps whose verdict each encoding changes")
    args = ap.parse_args(argv)
    if not args.directory.is_dir():
        print(f"error: {args.directory}: no such corpus directory", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        right = named_right(load_corpus(args.directory), work)
        for name in ENCODINGS:
            diff = changed(right, name, work)
            print(f"encoding={name} kept={len(right) - len(diff)} of={len(right)}", flush=True)
            for row in diff[:args.show]:
                print("   ", *row)
    return 0


if __name__ == "__main__":
    sys.exit(main())
