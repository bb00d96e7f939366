"""A paste as the lines to read: JSON log records unwrapped, interleaved processes
told apart, and lines a terminal wrapped joined again.

This runs on the whole text before any line is read (see ``reader.read_text``);
nothing here has state.
"""

from __future__ import annotations

import itertools
import json
import re
from typing import Callable

from hangwatch.diagnostics.pastes.patterns import (
    ANSI, PREFIX, JSON_LINE_MAX, JSON_TEXT_KEYS, STREAM_PID, STREAM_RANK, WATCHDOG, WRAPPED_CXX_HEAD, WRAPPED_CXX_TAIL,
    WRAPPED_FILE_TAIL, WRAPPED_IN_TAIL, WRAPPED_LINE_HEAD, WRAPPED_PYBT_HEAD, WRAPPED_PYBT_TAIL,
)

#: Whose lines a stream is: a pid, ``("rank", N)`` for a rank's own prefix, or None
#: for lines no prefix claims.
StreamKey = int | tuple[str, int] | None


def unwrap_json_lines(lines: list[str]) -> list[str]:
    """Log records saved as one JSON object a line (``{"log": "    f (a.py:1)\\n", ...}``)
    or a dump kept as one JSON string: their text, line by line. Other lines as they are."""
    out: list[str] = []
    for line in lines:
        s = line.strip()
        if len(s) > 2 and s[0] == "{" and s[-1] == "}" and len(s) < JSON_LINE_MAX:
            try:
                record = json.loads(s)
            except ValueError:
                record = None
            if isinstance(record, dict):
                text = next((v for k in JSON_TEXT_KEYS if isinstance(v := record.get(k), str)), None)
                if text is None:
                    text = max((v for v in record.values() if isinstance(v, str)), key=len, default=None)
                if text is not None:
                    out.extend(text.replace("\r\n", "\n").replace("\r", "\n").rstrip("\n").split("\n"))
                    continue
        out.append(line)
    return out


def streams(lines: list[str]) -> list[tuple[StreamKey, list[str]]]:
    """Lines of processes whose logs interleave, one stream per pid (or per rank).

    vLLM's workers and Ray's actors print through one terminal, each line led by
    "(Worker_TP2 pid=N)"; two tracebacks printed at once interleave line by line
    (llm-scaler#235). torchrun prints its ranks' output the same way, each line led by
    "[default0]:" or "[rank0]:" (a ``("rank", N)`` stream: no pid, but the rank). When
    several pids' or ranks' lines interleave, each one's lines are read on their own (a
    line without a prefix continues the line before it, a wrap, up to a blank line);
    otherwise the paste is read in order."""
    keys: list[StreamKey] = []
    last: StreamKey = None
    seen: set[StreamKey] = set()
    interleaved = False
    for line in lines:
        key: StreamKey = None
        m = STREAM_PID.match(line) if "pid=" in line else None
        if m is not None:
            key = int(m.group(1))
        elif "]:" in line[:60]:
            mr = STREAM_RANK.match(line)
            if mr is not None:
                key = ("rank", int(mr.group(1)))
        if key is not None:
            if key != last and key in seen:
                interleaved = True
            seen.add(key)
            last = key
        elif not line.strip():
            last = None  # after a blank line, unprefixed text is nobody's continuation
        keys.append(last)
    if not interleaved:
        return [(None, lines)]
    out: dict[StreamKey, list[str]] = {}
    for key, line in zip(keys, lines):
        out.setdefault(key, []).append(line)
    return list(out.items())


#: Bare line numbers (a web log viewer's, copied on lines of their own) before they are dropped.
MIN_NUMBERED = 6


def drop_line_numbers(lines: list[str]) -> list[str]:
    """A log viewer's line numbers copied onto lines of their own ('3', the line, '4', the
    line, ...): when at least a third of the non-blank lines are bare numbers that mostly
    count up, they are dropped."""
    numbers = [i for i, line in enumerate(lines[:20000]) if line.strip().isdigit() and len(line.strip()) <= 7]
    if len(numbers) < MIN_NUMBERED:
        return lines
    nonblank = sum(1 for line in lines[:20000] if line.strip())
    values = [int(lines[i].strip()) for i in numbers]
    rising = sum(1 for a, b in zip(values, values[1:]) if b > a)
    if len(numbers) * 3 < nonblank or rising * 4 < (len(values) - 1) * 3:
        return lines
    drop = set(numbers)
    return [line for i, line in enumerate(lines) if i not in drop]


#: Lines padded with spaces to one width before a terminal capture counts as one.
MIN_PADDED = 3


def join_padded(lines: list[str]) -> list[str]:
    """A terminal capture that pads every line with spaces to the terminal's width: a
    line that fills the width to its last column without padding was wrapped there, and
    the next line is its rest ('...ray/worker.py", li' + 'ne 1358, in cleanup')."""
    widths: dict[int, int] = {}
    for line in lines[:20000]:
        if len(line) >= 60 and line.endswith(" "):
            widths[len(line)] = widths.get(len(line), 0) + 1
    if not widths:
        return lines
    width, n = max(widths.items(), key=lambda kv: kv[1])
    if n < MIN_PADDED:
        return lines
    out: list[str] = []
    joining = False
    for line in lines:
        if joining and out and len(out[-1]) < MAX_JOINED:  # (a longer one is no wrapped line: and joins stay linear)
            out[-1] += line.lstrip() if out[-1].endswith(" ") else line
        else:
            out.append(line)
        joining = len(line) == width and not line.endswith(" ")
    return [line.rstrip() if len(line) >= width else line for line in out]


def join_wrapped(lines: list[str]) -> list[str]:
    """'File "/a/vll' + 'm/v1/x.py", line 9, in f' -> one traceback line, as is
    'File "x.py", line 9,' + ' in f', py-bt's '#4 Frame 0x.., for file x.py, line 9,' + 'in f (self=...',
    and a torch C++ frame wrapped before its library
    likewise (a terminal's hard wrap, kept by the copy). Beyond those shapes, any
    traceback, C++ or py-spy frame line left unfinished (a path or a parenthesis open,
    ``File "x.py", line`` without its number) takes up to MAX_CONTINUATIONS lines that
    make it whole: a mail client's or an editor's wrap at 72 or 80 columns."""
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        if out and WRAPPED_FILE_TAIL.match(line):
            prev = out[-1]
            cut = prev.rfind('File "')
            if cut != -1 and '"' not in prev[cut + 6:]:
                out[-1] = prev.rstrip("\r") + line.strip()
                continue
        if out and WRAPPED_IN_TAIL.match(line) and WRAPPED_LINE_HEAD.match(out[-1].rstrip()):
            out[-1] = out[-1].rstrip() + " " + line.strip()
            continue
        if out and line.lstrip()[:3] == "in " and WRAPPED_PYBT_TAIL.match(line) and WRAPPED_PYBT_HEAD.match(out[-1].rstrip()):
            out[-1] = out[-1].rstrip() + " " + line.strip()
            continue
        if out and line[:1] in (" ", "/") and WRAPPED_CXX_TAIL.match(line) and WRAPPED_CXX_HEAD.match(out[-1].rstrip()):
            out[-1] = out[-1].rstrip() + " " + line.strip()
            continue
        if len(line) <= MAX_JOINED:
            whole = _rejoin(line, lines[i:i + MAX_CONTINUATIONS])
            if whole is None and (line[:1] in _PREFIXED or "\x1b" in line):
                # A prefix before the frame line and before each of its continuations (a mail
                # quote "> ", a timestamp, colours, an indent): the frame is put back together
                # behind it, each continuation's own prefix dropped.
                whole = _rejoin_prefixed(line, lines[i:i + MAX_CONTINUATIONS])
            if whole is not None:
                line, taken = whole
                i += taken
        out.append(line)
    return out


#: What a prefixed line starts with (see ``PREFIX``).
_PREFIXED = frozenset(" \t>[0123456789*")


def _rejoin_prefixed(head: str, after: list[str]) -> tuple[str, int] | None:
    """``_rejoin`` behind a prefix (``PREFIX``) that the head and each continuation carry."""
    clean = ANSI.sub("", head) if "\x1b" in head else head
    prefix = PREFIX.match(clean).group()  # type: ignore[union-attr]
    if not prefix.strip():
        return None  # an indent alone: the continuation of a wrap starts in the first column
    if _unfinished(clean[len(prefix):]) is None:
        return None  # (most prefixed lines are whole: their continuations' prefixes go unread)
    tails: list[str] = []
    for nxt in after:
        text = ANSI.sub("", nxt) if "\x1b" in nxt else nxt
        own = PREFIX.match(text).group()  # type: ignore[union-attr]
        if not own.strip():
            break
        tails.append(text[len(own):])
    whole = _rejoin(clean[len(prefix):], tails)
    return (prefix + whole[0], whole[1]) if whole is not None else None


#: Lines one frame line may have been wrapped onto (a long path, a C++ signature, at 72 or
#: 80 columns).
MAX_CONTINUATIONS = 8
#: Continuations up to which every mix of joins (inside a word, at a space) is tried.
MIXED_JOINS = 3
#: Characters of a frame line put back together (longer ones are no wrapped frame line).
MAX_JOINED = 4096

# Each shape of frame line, whole, read from where it starts on the line (after any log
# prefix): a traceback's 'File "x.py", line 9, in f' (faulthandler drops the comma), torch's
# C++ 'frame #2: f + 0x1 (0x7f in /x/lib.so)', py-spy's 'f (x.py:9)'.
_TRACEBACK_WHOLE = re.compile(r'File:? "[^"\n]{1,1000}", line \d{1,7},? in [\w<>.]{1,300}$')
_TRACEBACK_DONE = re.compile(r'File:? "[^"\n]{1,1000}", line \d{1,7},? in \S')
_CXX = re.compile(r"frame #\d{1,4}:(?: |$)")
_CXX_WHOLE_START = re.compile(r"frame #\d{1,4}: \S")
_CXX_LOCATION = re.compile(r" \(0x[0-9a-fA-F]{1,16} in \S{1,1000}\)$")
_PYSPY_OPEN = re.compile(r"^\s{1,40}[^\s()][^\s]{0,300} \((?:inside )?[^()\s]{1,1000}$")
_PYSPY_WHOLE = re.compile(r"^\s{1,40}[^\s()][^\s]{0,300} \((?:inside )?[^()\s]{1,1000}:\d{1,7}\)$")
_PYSPY_NAME = re.compile(r"^\s{2,40}[A-Za-z_<][\w.<>]{0,300}$")
_PYSPY_LOCATION = re.compile(r"^\((?:inside )?[^()\s]{1,1000}:\d{1,7}\)$")
_GDB_HEAD = re.compile(r"^\s{0,8}#\d{1,5}\s")
_GDB_END = re.compile(r"\)(?: at \S{1,1000}| from \S{1,1000})?$")
#: py-bt's frame line, and that line once its function is on it.
_PYBT_HEAD = re.compile(r"^\s{0,8}#\d{1,6} Frame 0x[0-9a-fA-F]{1,16}, for file")
_PYBT_NAMED = re.compile(r"^\s{0,8}#\d{1,6} Frame 0x[0-9a-fA-F]{1,16}, for file \S[^,\n]{0,1000}, line \d{1,7}, in [^\s(]{1,300}(?: \(|$)")
#: A gdb frame's number (and address) alone, its function wrapped onto the next line.
_GDB_NUMBER_ALONE = re.compile(r"^\s{0,8}#\d{1,5}(?:\s{1,4}0x[0-9a-fA-F]{1,16}(?: in)?)?$")
#: A continuation a wrap left starts in the first column (a terminal, an editor and a mail
#: client start the rest of a line there; a terminal's cut may leave the line's own space
#: first) and holds no frame of its own: an indented line is a source line or a frame.
_HOLDS_FRAME = re.compile(r'File:? "|frame #\d|^#\d{1,5} |^Thread |^Traceback |^Exception raised from ')


#: What ``_unfinished`` says of a traceback's header cut before "first):" and of a py-spy
#: frame whose location went to the next line: the next line alone completes them.
_HEADER_CUT = "header"
_RAISED_CUT = "raised from"
_RAISED_AT = re.compile(r"^Exception raised from \S{1,300} at$")
#: The path and line that follow it, maybe with the start of "(most recent call first):".
_RAISED_PATH = re.compile(r"^\S{1,1000}:\d{1,7}(?: \(most recent(?: call(?: (?:first|last)\):)?)?)?$")
_PYSPY_NAME_ALONE = "py-spy name"


def _unfinished(head: str) -> Callable[[str], bool] | str | None:
    """How to tell that ``head``, a frame line of a known shape left unfinished, has been
    made whole again: a test of the joined line, or one of the two shapes the next line
    alone completes (``_HEADER_CUT``, ``_PYSPY_NAME_ALONE``). None: ``head`` is whole, or no
    frame line."""
    at = head.find('File "')
    if at == -1:
        at = head.find('File: "')
    if at == -1 and head.endswith(("File", "File:")):
        word = head.rfind("File")
        if word == 0 or not head[word - 1].isalnum():
            at = word  # the path went to the next line whole
    if at != -1:
        if _TRACEBACK_DONE.match(head, at):
            return None
        return lambda joined: ", line " in joined and _TRACEBACK_WHOLE.match(joined, at) is not None
    if (m := _CXX.search(head)) is not None:
        if head.endswith(")"):
            return None
        start = m.start()
        # (its location is the last " (0x": found, not searched for by backtracking)
        return lambda joined: (joined.endswith(")") and _CXX_WHOLE_START.match(joined, start) is not None
                               and _CXX_LOCATION.match(joined, max(joined.rfind(" (0x"), start)) is not None)
    if _PYSPY_OPEN.match(head):
        return lambda joined: joined.endswith(")") and _PYSPY_WHOLE.match(joined) is not None
    if " Frame 0x" in head and _PYBT_HEAD.match(head) and _PYBT_NAMED.match(head) is None:
        # py-bt's frame line wrapped before its function ("#12 Frame 0x55.., for file" +
        # "/p/connection.py, line 192, in" + "_read_from_socket (self=..."): whole once the
        # function is there (its arguments may run on, or be cut, as gdb prints them)
        return lambda joined: _PYBT_NAMED.match(joined) is not None
    if _GDB_HEAD.match(head) and (head.count("(") > head.count(")") or head.endswith((") at", ") from", " in"))
                                  or _GDB_NUMBER_ALONE.match(head)):
        # gdb's frame with its arguments or its location cut (gdb's own wrap indents the
        # rest, which ``gdb_arguments`` reads; a mail client's starts it in the first column)
        return lambda joined: joined.count("(") == joined.count(")") and _GDB_END.search(joined) is not None
    if "WorkNCCL(" in head and WATCHDOG.search(head) is None:
        # ProcessGroupNCCL's watchdog line wrapped inside its WorkNCCL(...): its sequence
        # number and collective are what it says
        return lambda joined: WATCHDOG.search(joined) is not None
    if head.endswith(("(most recent call", "(most recent")):
        return _HEADER_CUT  # a traceback's or a C++ error's header: "... (most recent call" + "first):"
    if head.startswith("Exception raised from ") and head.endswith(" at") and _RAISED_AT.match(head):
        return _RAISED_CUT  # torch's C++ error header cut before its source path
    if _PYSPY_NAME.match(head):
        return _PYSPY_NAME_ALONE  # a py-spy frame wrapped at the space before its location
    return None


def _rejoin(head: str, after: list[str]) -> tuple[str, int] | None:
    """``head``, a frame line a wrap left unfinished, and the lines ``after`` it that hold
    its rest, as the whole frame line they were (and how many of ``after`` it took), or
    None. The cut may be inside a word (a terminal's hard wrap) or at a space (an editor's
    or a mail client's, which drops the space): every way of joining is tried, fewer lines
    and fewer spaces first, and only a whole line of the head's own shape, from where that
    shape starts in the head, is taken."""
    whole = _unfinished(head)
    if whole is None:
        return None
    if whole == _HEADER_CUT:
        nxt = after[0].strip() if after else ""
        if head.endswith("(most recent"):
            return (head + " " + nxt, 1) if nxt in ("call first):", "call last):") else None
        return (head + " " + nxt, 1) if nxt in ("first):", "last):") else None
    if whole == _RAISED_CUT:
        # "Exception raised from run at" + "/p/ProcessGroupNCCL.cpp:2074 (most recent" + "call first):"
        nxt = after[0].strip() if after else ""
        if not _RAISED_PATH.match(nxt):
            return None
        rest = after[1].strip() if len(after) > 1 else ""
        if (nxt.endswith("(most recent") and rest in ("call first):", "call last):")) or (
                nxt.endswith("(most recent call") and rest in ("first):", "last):")):
            return head + " " + nxt + " " + rest, 2
        return head + " " + nxt, 1
    if whole == _PYSPY_NAME_ALONE:
        location = after[0][1:] if after and after[0][:1] == " " else (after[0] if after else "")
        return (head + " " + location.rstrip(), 1) if _PYSPY_LOCATION.match(location.rstrip()) else None
    assert callable(whole)
    tails: list[str] = []
    for line in after:
        if not line.strip() or line[:2].isspace() or _HOLDS_FRAME.search(line):
            break
        tails.append(line.rstrip())
    if not tails or len(head) + sum(len(t) + 1 for t in tails) > MAX_JOINED:
        return None
    for n in range(1, len(tails) + 1):
        # Every mix of joins for a few lines; a line wrapped onto more was wrapped one way
        # throughout (a terminal's width: inside words; a mail client's: at spaces).
        ways = itertools.product(("", " "), repeat=n) if n <= MIXED_JOINS else (("",) * n, (" ",) * n)
        for seps in ways:
            joined = head + "".join(sep + tail for sep, tail in zip(seps, tails))
            if whole(joined):
                return joined, n
    return None
