"""The reader: a paste in, a ``ParseReport`` out (``read_text``).

Each line goes through ``STEPS`` in order until one takes it. The order is the
reader's grammar: a step that comes earlier wins a line that two dialects could
read (a gdb ``#0`` frame before a markdown heading, a traceback's frames before
py-spy's), and some steps only note what the line before left open and pass the
line on. Each line is looked at once, by string tests and bounded regexes, so the
time is linear in the paste.
"""

from __future__ import annotations

import html
import re
import string
from collections.abc import Callable

# Imported as modules, not from the package (a cycle through its __init__): STEPS names each
# step with its dialect.
import hangwatch.diagnostics.pastes.cxx_traces as cxx_traces
import hangwatch.diagnostics.pastes.gdb as gdb
import hangwatch.diagnostics.pastes.handwritten as handwritten
import hangwatch.diagnostics.pastes.julia as julia
import hangwatch.diagnostics.pastes.kernel as kernel
import hangwatch.diagnostics.pastes.lines as lines
import hangwatch.diagnostics.pastes.logs as logs
import hangwatch.diagnostics.pastes.macos as macos
import hangwatch.diagnostics.pastes.prefixes as prefixes
import hangwatch.diagnostics.pastes.pyspy_text as pyspy_text
import hangwatch.diagnostics.pastes.tracebacks as tracebacks
from hangwatch.diagnostics.errors import InputError
from hangwatch.diagnostics.pastes.builder import Builder, Line
from hangwatch.diagnostics.pastes.frames import parse_frame_line, split_flattened
from hangwatch.diagnostics.pastes.parse_report import ParseReport
from hangwatch.diagnostics.pastes.patterns import (
    CURLY_DOUBLE, CURLY_SINGLE, ENTITY, HTML_BREAK, HTML_TAG, INVISIBLE, PAGER, PLAIN_DOUBLE, PLAIN_SINGLE, PLAIN_SPACE,
    TYPOGRAPHIC_SPACE,
)
from hangwatch.diagnostics.pastes.result import finish
from hangwatch.diagnostics.pastes.tracebacks import end_traceback
from hangwatch.diagnostics.pastes.unwrap import (
    StreamKey, drop_line_numbers, join_padded, join_wrapped, streams, unwrap_json_lines,
)


def _take_after_frame(b: Builder, ln: Line) -> bool:
    """What the line before left open for this line only: after a frame, a name alone
    goes on with the frames; after a gdb frame without a library, "from LIB" is its library."""
    ln.after_frame, b.after_frame = b.after_frame, False
    ln.gdb_open, b.gdb_open = b.gdb_open, False
    return False


def _take_after_file_frame(b: Builder, ln: Line) -> bool:
    """Whether the line before was faulthandler's: a 'File "...' cut mid-path is its frame then."""
    ln.after_file_frame, b.after_file_frame = b.after_file_frame, False
    return False


def _flattened(b: Builder, ln: Line) -> bool:
    # Two frames or more on one line: a flattened dump (an arrow chain splits the same way).
    s = ln.s
    pieces = split_flattened(s) if s.count(" (") >= 2 and ") " in s else None
    if pieces is None:
        return False
    for piece in pieces:  # each holds one header or frame: no further split
        feed(b, piece)
    return True


def _frame_or_text(b: Builder, ln: Line) -> bool:
    """The last step: frames (py-spy's, faulthandler's, a chain on one line), else a name
    alone, gdb frames quoted in prose, or text that is skipped."""
    s = ln.s
    parsed = parse_frame_line(s)
    if parsed is not None and ln.first == "F" and s.startswith('File "'):
        # 'File "/x/a.py' cut mid-path is faulthandler's only under its header or
        # after its frames; at the end of a Python traceback it is not a stack.
        if parsed[2] and not ln.after_file_frame:
            parsed = None
        else:
            b.after_file_frame = True
    if parsed is None:
        if not handwritten.bare_name_line(b, s, ln.after_frame):
            handwritten.end_bare(b)
            if not gdb.inline_frames(b, s) and not ("`" in s and (handwritten.inline_pyspy(b, s) or handwritten.inline_chain(b, s))):
                b.skip(s)
        return True
    frames, abbreviated, cut = parsed
    b.report.abbreviated += abbreviated
    b.report.cut_frames += cut
    if ln.rank is not None and b.proc is not None and b.proc.rank is None and not b.proc.threads:
        b.proc.rank = int(ln.rank.group(1))
    if b.bare:
        b.report.bare_frames += len(b.bare)
        frames, b.bare = b.bare + frames, []
    elif "`" in s and not any(t.frames for t in b.group):
        frames = tracebacks.noted_call(s, frames) + frames
    b.add_frames(frames)
    b.after_frame = True
    return True


Step = Callable[[Builder, Line], bool]
ANY = None

#: Every line goes through these in order until one returns True (it took the line);
#: the last one always does. Each step comes with the first characters of the lines it
#: can take or act on (its own test), or ANY: a line is put only through the steps that
#: can take it (``_route``), which saves most of the calls a line would otherwise cost.
STEPS: tuple[tuple[str | None, Step], ...] = (
    (ANY, gdb.gdb_arguments),  # a gdb frame's wrapped arguments: before anything reads them as a frame
    ("CTSB0123456789+!:|*#ADILOPRV.\u2026", macos.call_graph),  # a graph line (a count or a tree mark first), or the report's header
    (ANY, tracebacks.pdb_where),
    (ANY, handwritten.arrow_end),
    (ANY, cxx_traces.numbered_row),
    ("F", tracebacks.fatal_error),
    ("E", tracebacks.exit_notice),
    ("CB<", tracebacks.c_stack),
    (ANY, pyspy_text.profile),
    ("~=-", tracebacks.thread_banner),
    ("WG", gdb.pybt_marker),
    (ANY, tracebacks.traceback_lines),
    (ANY, kernel.kernel_line),
    ("#_" + string.ascii_letters, julia.julia_line),  # a Julia backtrace's frame (or its signal line)
    (ANY, tracebacks.pytest_lines),
    (ANY, logs.wait_lines),
    (ANY, cxx_traces.cxx_lines),
    (ANY, cxx_traces.symbol_frames),  # (a cheap test first: "[0x" at the end, or "@" up front)
    (ANY, logs.failed_collective),
    (ANY, _take_after_frame),
    ("fa", gdb.wrapped_library),
    (ANY, logs.trace_log),
    ("EeR", pyspy_text.pyspy_error),
    ("*tf", gdb.lldb),
    (ANY, gdb.windbg),
    (ANY, gdb.info_thread),  # a row may start with any digit, Unicode's too (str.isdigit)
    ("`~", lines.fence),
    ("<", lines.html_tag),
    ("-→=", handwritten.arrow),
    (ANY, handwritten.condensed),
    ("C", cxx_traces.numbered_head),
    ("(", gdb.more_frames),
    (".…[(", lines.elision),
    (ANY, pyspy_text.command_prompt),
    ("DTPECRr", handwritten.group_label),
    (ANY, handwritten.thread_label),
    ("ST", gdb.coredump_thread),
    ("#0123456789TU[", gdb.gdb_line),
    ("F<", gdb.pybt_frame),
    (ANY, _take_after_file_frame),
    (ANY, pyspy_text.header),
    (ANY, pyspy_text.locals_block),
    ("(", pyspy_text.pystack_frame),
    (ANY, tracebacks.pytrace),
    (ANY, _flattened),
    (ANY, _frame_or_text),
)
_ROUTES: dict[tuple[str, int], tuple[tuple[int, Step], ...]] = {}


def _route(first: str, start: int) -> tuple[tuple[int, Step], ...]:
    """The steps from ``STEPS[start]`` on that can take a line starting with ``first``
    (with their places in STEPS), in order."""
    route = _ROUTES.get((first, start))
    if route is None:
        route = tuple((i, step) for i, (chars, step) in enumerate(STEPS[start:], start) if chars is None or first in chars)
        if len(_ROUTES) < 4096:  # any character may start a line: the cache is bounded
            _ROUTES[first, start] = route
    return route


#: Words every line of ``logs.WAIT_MESSAGES`` holds: only such lines are tried against it.
_MESSAGE_HINT = re.compile(r"barrier|ncclUniqueId|[Tt]imed out|[Tt]imeout|[Ll]ock|waitForInput|process down")


def feed(b: Builder, raw: str) -> None:
    """One line of the paste, read into ``b``."""
    raw = lines.normalise(b.report, raw)
    # Before the log prefix is taken off: gdb's "[Switching to thread N (...)]" reads as a "[...]" prefix.
    if "Switching to thread" in raw and gdb.gdb_header(b, raw.strip()):
        return
    ln = lines.read_line(raw, b.learned_prefix)
    if ln is None:
        return
    if _MESSAGE_HINT.search(raw) is not None:
        logs.message_wait(b, raw, ln.prefix)
    b.prev_text, b.cur_text = b.cur_text, ln.s
    frames, held = b.report.frames, len(b.bare)
    _read(b, ln, 0)
    b.note_indent(ln.indent, frames, held)
    if ln.rank is not None and b.tb_frames is not None:
        b.tb_rank = int(ln.rank.group(1))


def _read(b: Builder, ln: Line, start: int) -> None:
    first = ln.first
    for i, step in _route(first, start):
        if step(b, ln):
            return
        if ln.first != first:  # the step took a fence or a rank label off the line: route the rest anew
            _read(b, ln, i + 1)
            return


def start_stream(b: Builder, pid: StreamKey) -> None:
    """The lines that follow are process ``pid``'s own, or rank ``("rank", N)``'s (see
    ``streams``); ``None``: lines no prefix claims (the whole paste when nothing
    interleaves)."""
    if pid is None and b.stream_pid is None:
        return
    end_traceback(b, keep=False)
    b.stream_pid = pid
    b.enter_stream(pid)


#: Tags or entities of a page's source before a paste counts as one (a frame's own "<b>"
#: in a C++ template, a lone "&amp;" in prose do not).
MIN_MARKUP = 3


def is_page_source(text: str) -> bool:
    """The text is a page's source: at least MIN_MARKUP HTML tags and entities, a line break
    or an entity among them (tags alone may be a C++ template's "<b>" or python-gdb's
    "<code at remote 0x..>")."""
    n = breaks = 0
    for rx in (HTML_TAG, ENTITY):
        for m in rx.finditer(text):
            n += 1
            breaks += rx is ENTITY or HTML_BREAK.match(m.group(0)) is not None
            if n >= MIN_MARKUP and breaks:
                return True
    return False


def _without_pager(lines: list[str]) -> list[str]:
    """gdb's pager prompt inside a backtrace is no break in it (a line of its own was read as
    the end of the thread), and the frame after it on its line is read."""
    out = []
    for line in lines:
        rest = PAGER.sub("", line) if "Type <" in line else line
        if rest.strip() or not line.strip():
            out.append(rest)
    return out


def _unescape(m: re.Match[str]) -> str:
    return html.unescape(m.group(0))


def _read_lines(lines_in: list[str], learned: re.Pattern[str] | None) -> ParseReport:
    b = Builder()
    b.learned_prefix = learned
    for pid, stream in streams(lines_in):
        start_stream(b, pid)
        for line in join_wrapped(stream):
            feed(b, line)
    return finish(b)


#: A quoted-printable escape of a byte plain text never writes so ("=C2", "=A0").
_QP_HIGH_BYTE = re.compile(r"=[89A-F][0-9A-F]")
_QP_SOFT_BREAK = re.compile(r"=\r?\n")
_QP_RUN = re.compile(r"(?:=[0-9A-F]{2}){1,1000}")
#: Widths of a line an encoder broke softly (76 columns at most, RFC 2045).
_QP_WIDTH = (60, 76)
#: Characters of a paste looked at to tell quoted-printable.
_QP_SCAN = 200_000


def is_quoted_printable(text: str) -> bool:
    """A message body still in quoted-printable: an encoded "=" ("=3D") twice or more, or
    soft line breaks at the encoder's width (a line of 60 to 76 columns ending in a lone
    "="), two or more, or one at 76 beside an escaped byte no plain text writes ("=C2",
    "=A0"). Plain text has "key=18" pairs and lines ending in "=" (an empty variable,
    gdb's wrap after "f="), but not at that width with those escapes."""
    head = text[:_QP_SCAN]
    if head.count("=3D") >= 2:  # an encoded "="
        return True
    soft = [len(line) for line in (raw.rstrip("\r") for raw in head.split("\n")) if line.endswith("=") and not line.endswith("==")]
    at_width = [n for n in soft if _QP_WIDTH[0] <= n <= _QP_WIDTH[1]]
    if len(at_width) >= 2 and len(at_width) == len(soft):
        return True
    return bool(at_width) and len(_QP_HIGH_BYTE.findall(head)) >= 2


def decode_quoted_printable(text: str) -> str:
    """``text`` with its soft breaks joined and each run of escapes decoded as UTF-8
    (Latin-1 where the bytes are no UTF-8)."""
    def run(m: re.Match[str]) -> str:
        raw = bytes(int(m.group()[i + 1:i + 3], 16) for i in range(0, len(m.group()), 3))
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            return raw.decode("latin-1")
    return _QP_RUN.sub(run, _QP_SOFT_BREAK.sub("", text))


def read_text(text: str, *, source: str = "text") -> ParseReport:
    """Every process in a pasted dump, and what was skipped. Raises ``InputError``
    only when there is not a single recognisable frame."""
    if ("<" in text or "&" in text) and is_page_source(text):
        # A page's source (a mail archive's, a forum export, a copied <pre>): its breaks are
        # line ends, its markup goes, its entities are their characters ("&nbsp;" indents).
        # (Only whole entities, each once: "&region=eu" in a URL is no "&reg;".)
        text = ENTITY.sub(_unescape, HTML_TAG.sub("", HTML_BREAK.sub("\n", text)))
    if "=" in text and is_quoted_printable(text):
        # A mail archive's message body as sent, quoted-printable: "=3D" for "=", "=A0" for a
        # no-break space, a line ending in "=" continued on the next ("soft" breaks).
        text = decode_quoted_printable(text)
    if INVISIBLE.search(text):
        # Zero-width spaces, joiners, soft hyphens, marks and stray BOMs that web pages,
        # chat tools and wikis put into copied text: "wait\u200b (threading.py:320)" is no frame.
        text = INVISIBLE.sub("", text)
    if TYPOGRAPHIC_SPACE.search(text):
        # Copied from a rendered page (a blog, a forum, a document): no-break and other
        # typographic spaces for the indents.
        text = text.translate(PLAIN_SPACE)
    if "\r" in text:
        # CRLF reads as LF below (rstrip); a lone CR (old Mac line ends, a terminal
        # capture's carriage returns) ends a line too, else the paste is one long line.
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    lines_in = text.split("\n")
    if "{" in text:
        lines_in = unwrap_json_lines(lines_in)
        text = "\n".join(lines_in)  # (what a JSON record held, for the checks below)
    # A page that curls quotes curls them all: curly quotes stand for plain ones only where
    # the text has no plain one ('File “x.py”'); elsewhere they are the text's own
    # (a thread or a folder named with them, a log record's message).
    plain = text
    if CURLY_DOUBLE.search(plain) and '"' not in plain:
        plain = plain.translate(PLAIN_DOUBLE)
    if CURLY_SINGLE.search(plain) and "'" not in plain:
        plain = plain.translate(PLAIN_SINGLE)
    if plain is not text:
        lines_in = plain.split("\n")
    if "Type <" in text:
        lines_in = _without_pager(lines_in)
    lines_in = drop_line_numbers(join_padded(lines_in))
    report = _read_lines(lines_in, prefixes.learn(lines_in))
    if not report.processes and not report.profile_lines:
        shared = prefixes.shared_prefix(lines_in)
        if shared is not None:
            # Every line behind one logger's prefix, its frames of a shape the frame-line
            # rule does not anchor on: read again with that prefix off each line.
            bare = [shared.sub("", line, count=1) for line in lines_in]
            again = _read_lines(bare, prefixes.learn(bare))
            if again.processes:
                report = again
    if not report.processes and report.profile_lines:
        raise InputError(
            f"{source}: this is py-spy top or record output (sampled totals or collapsed stacks), not a "
            "stack dump: it says where time went, not where each thread is stuck. Take "
            "'py-spy dump --pid PID' of the hung process and replay that"
        )
    if not report.processes:
        raise InputError(
            f"{source}: no py-spy stacks found: no line looks like a stack frame "
            "(expected 'function (file.py:line)' lines, usually under 'Thread 123 (idle): \"MainThread\"')"
        )
    return report
