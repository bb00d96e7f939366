"""One rule for line prefixes no pattern knows: the shape that many frame lines share.

Loggers put their own prefix before every line a process prints: vLLM's
``(VllmWorker rank=0 pid=1) ERROR 04-10 12:00:00 [multiproc_executor.py:470]``, Ray's
``(pid=1, ip=10.0.0.2)``, torchrun's ``[rank0]:``, a timestamp and a level, compose's
``worker-3 |``. Instead of a pattern per logger, the reader learns the prefix from the
paste itself: for every frame-shaped line (a traceback's ``File "..."``, a py-spy frame
``f (a.py:1)``, a C++ ``frame #N:``, a thread header, ``Traceback (most recent call``,
a gdb frame ``#3  0x.. in f``), the text before the frame is a candidate; its *shape* keeps punctuation and turns digit
runs into ``9``, letter runs into ``a`` and blanks into one space, so the changing
ranks, pids, times and levels of one logger give one shape. A shape that at least
``MIN_LINES`` frame lines share, with punctuation in it (a logger's fields are
delimited; prose is words) or a lone capital marker (pytest's ``E``), is a prefix:
every line that starts with it loses it, the exception and source lines between the
frames too.

One pass over the lines, string operations and one bounded regex per candidate: linear
in the paste.
"""

from __future__ import annotations

import re
from collections import Counter

from hangwatch.diagnostics.pastes.patterns import ANSI, GDB_INFO_THREAD, PREFIX, PROFILE_LINE, PYSTACK_FRAME

#: Frame lines that must share a shape before it counts as a prefix.
MIN_LINES = 3
#: Fewer frame lines than MIN_LINES share a shape: still a prefix when this many frame
#: lines have it and more than MIN_LINES lines in all start with it.
MIN_FRAME_LINES = 1
#: Shapes learned per paste (several loggers, e.g. two workers' formats).
MAX_SHAPES = 4
#: Lines looked at: a logger's prefix shows in the first ones.
MAX_LINES = 20000
#: A prefix longer than this is no logger's.
MAX_PREFIX = 200
_ANCHORS = ('File "', "Traceback (most recent call", "frame #")
_THREAD = re.compile(r"Thread (?:0[xX][0-9A-Fa-f]{1,16}|\d{1,12}) \(")
_PYSPY_LOCATION = re.compile(r"^\((?:inside )?[^()\s]{1,500}\.pyx?:\d{1,7}\)$")
# A gdb frame: "#3  0x00007f.. in f (...)" or "#3  f (a=1) at x.c:9" (gdb's own arguments
# and location: not an issue's cross-reference in prose, "- #1234 hang (py3.8) at exit").
_GDB_FRAME = re.compile(r"#\d{1,5} {1,3}(?:0x[0-9a-fA-F]{1,16} in |[A-Za-z_][\w:~<>.]{0,300} \((?:[A-Za-z_]\w{0,60}=[^()]{0,1000})?\) "
                        r"(?:at \S{1,300}:\d{1,7}|from \S{0,300}[/.]\S{0,300}))")
#: pytest's own traceback line: "path/to/mod.py:74: in get_gateway" (the path where it starts).
_PYTEST_FRAME = re.compile(r"(?<!\S)[^\s:]{1,500}\.pyx?:\d{1,7}: in [\w<>.]{1,300}$")
_TOKEN = re.compile(r"\d+|[^\W\d_]+|\s+")
_DELIMITED = re.compile(r"[^\w\s]")
#: A one- or two-letter marker in front of every line (pytest's ``E`` on a failure's
#: lines): no prose word stands alone before three frame lines.
_MARKER = re.compile(r"^[A-Z]{1,2}$")
#: Lines a dialect reads whole, whose leading field is its own (gdb's thread number in
#: ``info threads``, pystack's ``(Python)``, py-spy top's percentages), not a logger's.
_WHOLE_LINES = (GDB_INFO_THREAD, PYSTACK_FRAME, PROFILE_LINE)


def _frame_start(rest: str) -> int:
    """Where the frame-shaped text of ``rest`` starts, -1 when it has none."""
    for anchor in _ANCHORS:
        i = rest.find(anchor)
        if i != -1:
            return i
    if "Thread " in rest:
        m = _THREAD.search(rest)
        if m is not None:
            return m.start()
    if "#" in rest:
        m = _GDB_FRAME.search(rest)
        if m is not None:
            return m.start()
    if ": in " in rest and len(rest) <= 2000:
        m = _PYTEST_FRAME.search(rest)
        if m is not None:
            return m.start()
    if rest.endswith(")") and ".py" in rest:
        open_at = rest.rfind(" (")
        if open_at > 0 and _PYSPY_LOCATION.match(rest[open_at + 1:]):
            head = rest[:open_at].rstrip()
            cut = max(head.rfind(" "), head.rfind("\t"))
            return cut + 1 if cut != -1 else 0
    return -1


def shape(prefix: str) -> str:
    """``(VllmWorker rank=0 pid=12)`` -> ``(a a=9 a=9)``."""
    return _TOKEN.sub(lambda m: "9" if m.group(0)[0].isdigit() else (" " if m.group(0)[0].isspace() else "a"), prefix)


def _pattern(sh: str) -> str:
    out = []
    for ch in sh:
        if ch == "9":
            out.append(r"\d{1,20}")
        elif ch == "a":
            out.append(r"[^\W\d_]{1,80}")
        elif ch == " ":
            out.append(r"\s{1,40}")
        else:
            out.append(re.escape(ch))
    return "".join(out)


def _lines_with(sh: str, lines: list[str]) -> int:
    """How many of the first lines start with the prefix shape ``sh`` (after a known ``PREFIX``)."""
    rx = re.compile(r"[ \t]*" + _pattern(sh))
    n = 0
    for raw in lines[:MAX_LINES]:
        if len(raw) > 4096:
            continue
        raw = raw.replace("\t", "    ")
        m = PREFIX.match(raw)
        if rx.match(raw[m.end():] if m else raw) is not None:
            n += 1
    return n


def learn(lines: list[str]) -> re.Pattern[str] | None:
    """The prefixes (as one regex, anchored at the start of the text left after the known
    ``PREFIX``) that frame lines of this paste share, or None."""
    shapes: Counter[str] = Counter()
    markers: Counter[str] = Counter()
    for raw in lines[:MAX_LINES]:
        if len(raw) > 4096 or not ("File" in raw or ".py" in raw or "#" in raw or "Thread" in raw or "Traceback" in raw):
            continue
        body = raw.lstrip()
        if body.find(" ") == body.find(" (") and body[:1] not in "([":
            continue  # a py-spy frame with nothing before its function: no prefix
        if "\x1b" in raw:
            raw = ANSI.sub("", raw)
        raw = raw.replace("\t", "    ").rstrip()
        m = PREFIX.match(raw)
        rest = raw[m.end():] if m else raw
        at = _frame_start(rest)
        if at <= 0:
            continue
        body = rest.strip()
        if any(rx.match(body) for rx in _WHOLE_LINES):
            continue
        candidate = rest[:at].rstrip()
        if not candidate or len(candidate) > MAX_PREFIX:
            continue
        sh = shape(candidate.lstrip())
        if _DELIMITED.search(sh):
            shapes[sh] += 1
        elif _MARKER.match(candidate.lstrip()):
            markers[candidate.lstrip()] += 1
    learned = [sh for sh, n in shapes.most_common(MAX_SHAPES) if n >= MIN_LINES]
    if not learned:
        # A short traceback (two frames, or one) behind a logger's prefix: the shape of its
        # frame lines counts when the lines around them (its source lines, its error) start
        # with it too.
        learned = [sh for sh, n in shapes.most_common(MAX_SHAPES) if n >= MIN_FRAME_LINES and _lines_with(sh, lines) >= MIN_LINES + 1]
    # A marker is taken literally (its shape, one letter run, would match any word), and
    # only when MIN_LINES frame lines carry it.
    alternatives = [_pattern(sh) for sh in sorted(learned, key=len, reverse=True)]  # longest first: one may start another
    alternatives += [re.escape(mk) + r"(?=\s|$)" for mk, n in markers.most_common(MAX_SHAPES) if n >= MIN_LINES]
    if not alternatives:
        return None
    return re.compile(r"[ \t]*(?:" + "|".join(alternatives) + r")[ ]?")


#: Share of the non-blank lines that must start with one prefix for it to be every line's.
SHARED = 0.9
#: Lines and characters looked at for it (a logger's prefix is short and shows early).
SHARED_LINES = 2000
SHARED_CHARS = 120
_FIELD = re.compile(r"\d+|[^\W\d_]+|\s+|.")


def _kind(token: str) -> str:
    return "9" if token[0].isdigit() else (" " if token[0].isspace() else ("a" if token[0].isalpha() else token))


def shared_prefix(lines: list[str]) -> re.Pattern[str] | None:
    """The prefix that nearly every non-blank line starts with, as a pattern: journald's
    ``Jan 01 12:00:00 host python3[42]:``, a logger's time, level and rank before each
    line, whatever its frames look like. Read field by field: numbers may change from
    line to line (times, pids), words may not (a host, a level, a logger's name: the
    first word that changes is the line's own text); it holds two punctuation marks at
    least and ends at one or before a blank. For a paste that reads no stack with the
    prefixes ``learn`` finds (its frames of a shape whose start ``learn`` does not know:
    pdb's, an arrow chain's, a tracer's lines): the reader tries it only then. None when no
    such prefix is shared."""
    rows = [_FIELD.findall(line.replace("\t", "    ").lstrip()[:SHARED_CHARS])
            for line in lines[:MAX_LINES] if line.strip() and len(line) <= 4096][:SHARED_LINES]
    if len(rows) < MIN_LINES + 2:
        return None
    need = max(MIN_LINES + 2, int(len(rows) * SHARED + 0.999))
    first, end, marks = rows[0], 0, 0
    for i, token in enumerate(first):
        kind = _kind(token)
        same = sum(1 for row in rows if len(row) > i and (row[i] == token if kind == "a" else _kind(row[i]) == kind))
        if same < need:
            break
        if kind not in "9a ":
            marks += 1
        if marks >= 2 and (kind not in "9a " or (i + 1 < len(first) and first[i + 1].isspace())):
            end = i + 1
    if not end:
        return None
    parts = [r"\d{1,20}" if _kind(t) == "9" else (r"\s{1,40}" if _kind(t) == " " else re.escape(t)) for t in first[:end]]
    return re.compile(r"[ \t]*" + "".join(parts) + r"[ ]?")
