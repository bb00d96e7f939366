"""What surrounds the stack text on a line: log prefixes (timestamps, ``[rank3]:``,
``(Worker pid=N)``, ``name | ``), terminal colours, HTML entities and tags, inline
code and comment markers, markdown fences, and ``...`` elisions.

``normalise`` and ``read_line`` turn a raw line into the ``Line`` the reader's steps
look at; the steps here take the markup lines themselves.
"""

from __future__ import annotations

import html
import re

from hangwatch.diagnostics.pastes.builder import Builder, Line
from hangwatch.diagnostics.pastes.frames import parse_frame_line
from hangwatch.diagnostics.pastes.handwritten import end_bare
from hangwatch.diagnostics.pastes.parse_report import ParseReport
from hangwatch.diagnostics.pastes.patterns import (
    ANSI, ENTITY, GLUED_THREAD, HTML, IDENT, MARKDOWN_LINK, MAX_LINE_CHARS, PREFIX, PROCESS, PYTHON, RANK_PREFIX,
)
from hangwatch.diagnostics.pastes.pyspy_text import parse_thread_header


_PADDED_WRAP = re.compile(r"(?<=\S) {16,400}(?=\S)")


def _unpad(m: re.Match[str]) -> str:
    s = m.string
    before, after = s[m.start() - 1], s[m.end()]
    return "" if (before.isalnum() or before in "._/-") and (after.isalnum() or after in "._/-") else " "


def normalise(report: ParseReport, raw: str) -> str:
    """A raw line counted, cut to MAX_LINE_CHARS, without trailing space, tabs, colours or entities."""
    report.lines += 1
    if len(raw) > MAX_LINE_CHARS:
        raw = raw[:MAX_LINE_CHARS]
        report.cut_lines += 1
    raw = raw.rstrip().replace("\t", "    ")
    if "\x1b" in raw:
        raw = ANSI.sub("", raw)
    if "                " in raw and ('File "' in raw or ", line " in raw):
        # A terminal's hard wrap turned into padding: "dataload<40 spaces>er.py", "line 216,
        # <spaces>in recv": a wide run of spaces inside a traceback's frame line joins its halves.
        raw = _PADDED_WRAP.sub(_unpad, raw)
    if "&" in raw and ENTITY.search(raw):
        raw = html.unescape(raw)  # copied from a page's source: &lt;module&gt;, &quot;MainThread&quot;
    if "](" in raw:
        # A link the page rendered around a path (Colab's traceback frames, copied as
        # Markdown: "[/usr/lib/.../x.py](https://localhost:8080/#) in train(self)"): its text.
        raw = MARKDOWN_LINK.sub(r"\1", raw)
    return raw


def read_line(raw: str, learned: re.Pattern[str] | None = None) -> Line | None:
    """The line behind its log prefix (a known one, then the one the paste's frame lines
    share: ``learned``, see ``prefixes``), out of inline code or a comment, or the thread
    header glued to its end; None when nothing is left."""
    m = PREFIX.match(raw)
    prefix = raw[: m.end()] if m else ""
    line = raw[m.end():] if m else raw
    if learned is not None:
        ml = learned.match(line)
        if ml is not None and ml.end() > 0:
            prefix, line = prefix + line[: ml.end()], line[ml.end():]
            m = PREFIX.match(line)
            if m is not None and m.end() > 0:
                prefix, line = prefix + line[: m.end()], line[m.end():]
    s = line.strip()
    if s[:1] == "`" and s[:3] != "```" and (s.count("`") == 1 or (s.count("`") == 2 and s[-1] == "`")):
        # A line pasted as inline code, one backtick pair per line (py-spy#565: each gdb
        # frame wrapped in `...`); a line cut before its closing backtick has only one.
        line = s = s.strip("`").strip()
    elif s[-1:] == "`" and s.count("`") == 1 and len(s) > 1:
        # the same line, its opening backtick taken with the log prefix learned in front of it
        line = s = s[:-1].rstrip()
    if s[:2] == "# " and len(s) < MAX_LINE_CHARS:
        # A dump kept in a source or shell comment ("#     wait (x.py:9)", a py-spy dump
        # quoted in a code comment): the text behind "# " is read when it is stack text.
        # Anything else stays as it was (a root prompt "# cmd", a "# Thread: NAME" caption).
        rest = s[2:].strip()
        if rest and (PROCESS.match(rest) or PYTHON.match(rest) or parse_thread_header(rest) is not None
                     or parse_frame_line(rest) is not None):
            line = s = rest
    if "Thread" in s and not s.startswith("Thread") and len(s) < MAX_LINE_CHARS:
        # A py-spy thread header glued to the end of a sentence ("...卡死栈信息Thread 100777
        # (idle): "MainThread"", the frames on the next lines): the header is read. Only a
        # whole header ends the line (id, state, quoted name), so prose naming a thread is not.
        mg = GLUED_THREAD.search(s)
        if mg and mg.start() > 0:
            line = s = mg.group(0)
    if not s:
        return None
    return Line(prefix, line, s, RANK_PREFIX.search(prefix) if "[" in prefix else None, s[0])


# -- steps of reader.STEPS ----------------------------------------------------
def fence(b: Builder, ln: Line) -> bool:
    """A markdown fence: the text before it was one block, the text after is another."""
    s = ln.s
    if s.startswith(("```", "~~~")):
        end_bare(b)
        b.group = [] if any(t.frames for t in b.group) else b.group
        b.after_break = True
        s = s.lstrip("`~").strip()
        if not s or IDENT.match(s):
            return True  # a fence, maybe with a language tag
        ln.retext(s)
    return False


def html_tag(b: Builder, ln: Line) -> bool:
    return ln.first == "<" and HTML.match(ln.s) is not None


def elision(b: Builder, ln: Line) -> bool:
    """'...', '[...]', '(...)': lines left out of the paste."""
    s = ln.s
    if ln.first in ".…[(" and (s in ("[...]", "(...)") or set(s) <= {".", "…", " "}):
        b.report.abbreviated += 1
        return True
    return False
