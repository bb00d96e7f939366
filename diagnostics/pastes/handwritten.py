"""Stacks people write by hand: function names alone on their lines next to real
frames, arrow chains ("run_busy_loop / -> get_response / -> dequeue"), and one
stack labelled with the ranks that share it ("DP0,1,2: synchronize (...)").

Names alone are held as maybe-frames: they become frames when real frames follow
(or, for a fenced list of native-shaped names, when the paste has no other stack),
else they were text.
"""

from __future__ import annotations

import re

from hangwatch.diagnostics.pastes.builder import Builder, Line
from hangwatch.diagnostics.pastes.frames import parse_frame_line
from hangwatch.diagnostics.pastes.gdb import cxx_name
from hangwatch.diagnostics.pastes.parse_report import example
from hangwatch.diagnostics.pastes.patterns import (
    ARROW, ARROW_LOCATION, ARROW_NAME, BARE_NAME, BARE_NOTE, BRACKET_FRAME, BRACKET_THREAD, CAMEL, GROUP_LABEL,
    ARROW_PATH_FUNC, HASH_THREAD, INLINE_PYSPY, LOC_IN_FUNC, MAX_FRAMES, PATH_FUNC_LINE, PATH_LINE_SOURCE, PYDEV_THREAD,
)
from hangwatch.diagnostics.stacks import Frame


def _bare_name(s: str) -> str | None:
    """The function of a line that is only a code-shaped name (see BARE_NAME), else None."""
    m = BARE_NAME.match(s)
    if m is None:
        return None
    name = m.group(1)
    if "_" in name or "::" in name or CAMEL.search(name):
        return name
    return None


#: Characters of a C++ signature read as a name alone on its line.
MAX_SIGNATURE = 4000
#: What may follow a C++ signature's argument list: its qualifiers, gdb's clone suffix, a
#: name nested in it ("::{lambda(void*)#1}::_FUN"). (Possessive: "::a::b" splits one way only.)
_AFTER_SIGNATURE = re.compile(r"^(?:\s{0,4}(?:const|volatile|noexcept|&&|&|\[clone [^\]]{1,100}\]|::\S{1,300}))*+\s{0,4}$")


def _signature_alone(s: str) -> bool:
    """``s`` is a demangled signature and nothing else: past its first argument list, the
    text outside parentheses is only nested names (``::{lambda(...)#1}::operator()``) and
    qualifiers (``const``); a sentence that starts with one, "f(...) hangs on rank 1", is
    prose."""
    if len(s) > MAX_SIGNATURE:
        return False
    first = s.find("(")
    depth, top, closed = 0, [], False
    for ch in s[first:]:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            closed = closed or depth == 0
            if depth < 0:
                return False
        elif depth == 0:
            top.append(ch)
    return closed and depth == 0 and _AFTER_SIGNATURE.match("".join(top)) is not None


def _bare_frame_name(s: str) -> str | None:
    """A name alone on its line (see _bare_name), also with a note after it or written as a
    demangled C++ signature ("THPStorage_newSharedCuda(...)::{lambda(void*)#1}::_FUN",
    py-spy --native's "ns::f(std::string const&)" when its location is cut off)."""
    s = BARE_NOTE.sub("", s)
    name = _bare_name(s)
    if name is None and "::" in s and "(" in s and " " not in s[:s.index("(")] and _signature_alone(s):
        # (its argument types may hold spaces: "f(std::vector<int, std::allocator<int> > const&)")
        name = _bare_name(cxx_name(s))
    return name


def names_stack(run: list[Frame]) -> bool:
    """Names alone on their lines that read as a native stack by themselves: four or more,
    at least one a C++ name ("ns::f") or two the C library's internal ones ("__libc_fork",
    "__pthread_clockjoin_ex"), and half of them C++, camelCase API ("cuStreamSynchronize")
    or C-internal names, so a fenced list of config keys, Python names (snake_case) or
    class names ("LlamaForCausalLM") is not taken."""
    if len(run) < 4:
        return False
    if not any("::" in f.function for f in run) and sum(1 for f in run if _c_internal(f.function)) < 2:
        return False
    native = sum(1 for f in run if "::" in f.function or CAMEL.search(f.function) or _c_internal(f.function))
    return native * 2 >= len(run)


def _c_internal(name: str) -> bool:
    """A C library's internal name (``__libc_fork``), not a Python dunder (``__init__``)."""
    return name.startswith("__") and not name.endswith("__")


def end_bare(b: Builder) -> None:
    """The names held since the last frame end here: kept aside as a thread when they read
    as a native stack by themselves (``names_stack``), else dropped as text."""
    if names_stack(b.bare) and len(b.bare_runs) < 16:
        b.bare_runs.append(b.bare)  # a stack if the paste has no other
    b.drop_bare()


def _arrow_name(text: str) -> str | None:
    """The call in one link of a hand-written chain: "model_runner._dummy_run(uniform_decode=True)"
    -> "model_runner._dummy_run"; "wait / sched_yield" (either) -> "wait"."""
    frame = _arrow_frame(text)
    return frame.function if frame is not None else None


def _arrow_frame(text: str) -> Frame | None:
    """One link of a hand-written chain as a frame: its location when the link names one
    ("service.py:118 Service.shutdown()"), else a frame by name only."""
    text = text.strip().split(" / ", 1)[0].strip()
    loc = ARROW_LOCATION.match(text)
    if loc is not None:
        text = text[loc.end():]
    else:
        pf = ARROW_PATH_FUNC.match(text)  # "torch/_inductor/graph.py: codegen", "cpp.py:select_tiling"
        if pf is not None:
            return Frame(pf.group(2), pf.group(1).replace("\\", "/"), None)
    call = text.endswith(")") and "(" in text
    if call:
        text = text[: text.index("(")].strip()
    if not ARROW_NAME.match(text):
        return None
    if loc is not None:
        return Frame(text, loc.group(1).replace("\\", "/"), int(loc.group(2)))
    # A call written as code with no location ("-> self.join()"): the call a source line
    # makes, which the table names as it names a traceback's innermost source line.
    return Frame(text, "<call>", None, native=True) if call and "." in text else Frame(text, "?")


def arrow_line(b: Builder, s: str) -> bool:
    """One "-> call" of a hand-written chain; its first arrow takes the line above
    as the outermost call (it was read as text: "Class.method" is no frame alone)."""
    # "-> a.py:5 f() -> self.join()": several links on one line, a note after two spaces.
    links = [_arrow_frame(part) for part in re.split(r" (?:->|→) ", CHAIN_NOTE.sub("", s[2:]))]
    if not links or any(f is None for f in links):
        return False
    if b.arrow is None:
        b.arrow = []
        heads = _head_links(b.prev_text) if b.prev_text != b.arrow_head else []
        head = heads[-1] if heads else None
        if len(heads) > 1:
            b.arrow.extend(heads[:-1])  # a row "label   a() -> b()" whose chain this line goes on with
            b.report.bare_frames += len(heads) - 1
        if head is not None:
            if b.bare and b.bare[-1].function == b.prev_text:
                b.bare.pop()  # held as a maybe-frame: it is this chain's head
            elif b.report.skipped:
                b.report.skipped -= 1  # skipped as text
                if b.report.skipped_examples and b.report.skipped_examples[-1] == example(b.prev_text):
                    b.report.skipped_examples.pop()
            b.arrow.append(head)
            b.report.bare_frames += 1
        b.drop_bare()
    for link in links:
        if len(b.arrow) < MAX_FRAMES and link is not None:
            b.arrow.append(link)
        b.report.bare_frames += 1
    b.arrow_head = s
    return True


#: A note after a link of a chain: "cond_wait     [holding the GIL]", "f()   <- here".
CHAIN_NOTE = re.compile(r"\s{2,40}(?:\[[^\]\n]{0,200}\]|\([^()\n]{0,200}\)|<-.{0,200}|←.{0,200}|#.{0,200})\s*$")


def _head_links(text: str) -> list[Frame]:
    """The line above a chain's first arrow as its outermost calls: one call, or a row of
    its own chain after a label column ("main thread   unwatch() -> lib.cancel()")."""
    if " -> " not in text:
        one = _arrow_frame(text)
        return [one] if one is not None else []
    parts = CHAIN_NOTE.sub("", text).split(" -> ")
    parts[0] = re.split(r"\s{2,}", parts[0].strip())[-1]  # the label column before two spaces
    frames = [_arrow_frame(p) for p in parts]
    return [f for f in frames if f is not None] if all(frames) else []


def inline_chain(b: Builder, s: str) -> bool:
    """A call chain in backticks inside prose, outermost first as people write calls
    ("`cancel_dump_traceback_later → PyThread_acquire_lock_timed → __psynch_cvwait`"):
    three calls or more, each a code-shaped name."""
    # The spans between backticks (odd pieces), each looked at once: linear in the line.
    for span in s.split("`")[1:-1:2]:
        if len(span) > 2000 or sum(span.count(a) for a in (" → ", " -> ", " ⇒ ", " => ")) < 2:
            continue
        parts = re.split(r"\s(?:→|->|⇒|=>)\s", span)
        frames = [_arrow_frame(p) for p in parts]
        if len(frames) >= 3 and all(f is not None for f in frames) and any(
                _bare_name(f.function) for f in frames if f is not None):
            b.traceback_thread("", [f for f in frames if f is not None][:MAX_FRAMES])
            b.report.bare_frames += len(frames)
            b.after_break = True
            return True
    return False


def end_arrow(b: Builder) -> None:
    chain, b.arrow = b.arrow, None
    if chain:
        # Only the innermost link's call is the one the thread is in.
        chain = [f if f.file != "<call>" or n == len(chain) - 1 else Frame(f.function, "?") for n, f in enumerate(chain)]
    if chain and len(chain) >= 3:
        b.traceback_thread("", chain)  # outermost first, like a traceback
    elif chain:
        # "-> done" under a sentence: prose, not a call chain (a chain has 3 calls or more).
        b.report.bare_frames -= len(chain)
        b.report.skipped += len(chain)


#: A method call written as code, maybe with a note: "ray.get()  <- blocks forever" above a
#: stack, the call the reporter saw it block in (a C call py-spy shows no frame for).
CALL_LINE = re.compile(r"^([A-Za-z_][\w.]{0,200}\.[A-Za-z_]\w{0,100})\([^()\n]{0,200}\)$")


def bare_name_line(b: Builder, s: str, after_frame: bool) -> bool:
    """A code-shaped name alone on its line: a frame by name after frames, else held
    until a frame follows (``after_frame``: the line before was a frame). A call written as
    code ("ray.get()") is held likewise, as the call on the innermost source line."""
    if not after_frame and len(s) <= 300 and "(" in s and len(b.bare) < 64:
        call = CALL_LINE.match(BARE_NOTE.sub("", s))
        if call is not None:
            b.bare.append(Frame(call.group(1), "<call>", None, native=True))
            return True
    # (a demangled C++ signature with its template arguments runs to thousands of characters)
    name = _bare_frame_name(s) if len(s) <= 300 or ("::" in s and len(s) <= MAX_SIGNATURE) else None
    if name is not None and after_frame:
        b.add_frames([Frame(name, "?")])  # the list of frames goes on, by name only
        b.report.bare_frames += 1
        b.after_frame = True
        return True
    if name is not None and len(b.bare) < 64:
        b.bare.append(Frame(name, "?"))  # a frame if real frames follow
        return True
    return False


# -- steps of reader.STEPS ----------------------------------------------------
def arrow_end(b: Builder, ln: Line) -> bool:
    if b.arrow is not None and not ln.s.startswith(ARROW):
        end_arrow(b)
    return False


def arrow(b: Builder, ln: Line) -> bool:
    return ln.first in "-→=" and ln.s.startswith(ARROW) and arrow_line(b, ln.s)


#: "MainThread: f (a.py:1)", "Thread-3 (worker): f (a.py:1)": a thread named in front of
#: its innermost frame, as reporters condense a dump to one line per thread.
#: Also with py-spy's state or a note in parentheses and the name quoted, in a column before
#: the frames ('"ple-offload-dp0" (idle):  get (queue.py:171)', 'MainThread (100% CPU):   f (a.py:1)').
THREAD_LABEL = re.compile(r'^((?:MainThread|Thread-\d{1,6}|[A-Za-z_][\w.-]{0,60}Thread\w{0,20}|[A-Za-z_][\w.-]{0,60}-thread|"[^"\n]{1,100}")'
                          r'(?: \([\w.-]{1,60}\))?)(?: \(([^()\n]{1,60})\))?\s{0,4}:\s{1,40}')


#: A thread's name alone on its line, maybe with a note or a colon: "MainThread (event loop)",
#: "Thread-3:": a caption over that thread's frames in a stack written out by hand.
THREAD_CAPTION = re.compile(r"^(MainThread|Thread-\d{1,6}|[A-Za-z][\w.-]{0,60}Thread(?:-\d{1,6})?|[A-Za-z][\w.-]{0,60}-thread)"
                            r"(?:\s{1,8}\((?!(?:idle|active|gil|running|sleeping|waiting)\b)[^()\n]{1,100}\))?\s{0,4}:?$")


def thread_label(b: Builder, ln: Line) -> bool:
    """'MainThread: _shutdown (threading.py:1567)  <- note': that thread, its frame read on.
    A thread's name alone ("MainThread (event loop)") starts that thread."""
    s = ln.s
    c = THREAD_CAPTION.match(s) if len(s) <= 200 and "hread" in s else None
    if c is not None and parse_frame_line(s) is None:  # "PyThread_x (python3.12)" is a frame
        b.start_thread(None, "unknown", c.group(1))
        b.report.thread_headers -= 1  # a caption, no py-spy header
        return True
    m = THREAD_LABEL.match(s) if ":" in s else None
    if m is not None and parse_frame_line(s[m.end():]) is not None:
        name, note = m.group(1), (m.group(2) or "").strip()
        if name[0] == '"':  # '"name" (idle)': the quoted name, then py-spy's state
            name, _, rest = name[1:].partition('"')
            note = note or rest.strip(" ()")
        state = note if note in ("idle", "active", "active+gil", "gil") else ("active" if "CPU" in note else "unknown")
        b.start_thread(None, state, name)
        b.report.thread_headers -= 1  # a label, no py-spy header
        ln.retext(s[m.end():])
    return False


def group_label(b: Builder, ln: Line) -> bool:
    """'DP0,1,2: frame': a process for the label, its main thread taking the frame,
    which the steps after this one read from the rest of the line."""
    s = ln.s
    label = GROUP_LABEL.match(s) if ln.first in "DTPECRr" else None
    if label is not None and parse_frame_line(s[label.end():]) is not None:
        b.new_process(header=True)
        b.proc.rank = int(label.group(1))  # type: ignore[union-attr]
        b.report.process_headers += 1
        b.start_thread(None, "unknown", "MainThread")
        ln.retext(s[label.end():])
    return False


# -- frames in condensed shapes (other tools' views, reporters' trims) --------------------
def _condensed_frame(s: str) -> Frame | None:
    """``path.py:12 in f``, ``f [path.py:12]``, ``path.py:f:12`` (markdown's backticks and
    bold marks taken off), else None."""
    if "`" in s or "**" in s:
        s = s.strip("`").replace("**", "")
    m = LOC_IN_FUNC.match(s)
    if m is not None:
        return Frame(m.group(3), m.group(1).replace("\\", "/"), int(m.group(2)))
    m = BRACKET_FRAME.match(s)
    if m is not None:
        return Frame(m.group(1), m.group(2).replace("\\", "/"), int(m.group(3)))
    m = PATH_FUNC_LINE.match(s)
    if m is not None:
        return Frame(m.group(2), m.group(1).replace("\\", "/"), int(m.group(3)))
    return None


def condensed(b: Builder, ln: Line) -> bool:
    """A thread header or a frame of the condensed shapes (see ``patterns.LOC_IN_FUNC``).
    Their order (innermost or outermost first) is not in the line: ``result`` orients
    the threads read from them together."""
    s = ln.s
    if len(s) > 1400:
        return False
    guru = HASH_THREAD.match(s)
    header = guru or PYDEV_THREAD.match(s) or BRACKET_THREAD.match(s)
    if header is not None:
        name = header.group(1) or ""  # eventlet's "------ Green Thread ------" has no id
        b.start_thread(name if name.isdigit() else None, "unknown", "MainThread" if name == "MainThread" else
                       ("" if name.isdigit() else name))
        b.report.thread_headers -= 1  # not py-spy's
        if guru is not None and b.group:
            b.group[-1].outermost_first = True  # the Guru Meditation report prints traceback.extract_stack's order
        return True
    frame = _condensed_frame(s)
    if frame is None:
        ms = PATH_LINE_SOURCE.match(s) if ".py" in s else None
        if ms is None:
            return False
        # "path.py:N   source": a location and its line, outermost first like a traceback;
        # the innermost line's call is where the thread blocks (see result._thread_dumps).
        if b.bare:
            b.drop_bare()
        b.add_frames([Frame("<unknown>", ms.group(1).replace("\\", "/"), int(ms.group(2)))])
        for t in b.group:
            t.outermost_first = True
            t.source = ms.group(3).strip()
        b.after_frame = True
        return True
    if b.bare:
        b.drop_bare()
    b.add_frames([frame])
    for t in b.group:
        t.orient_guess = True
    b.after_frame = True
    return True


def inline_pyspy(b: Builder, s: str) -> bool:
    """py-spy frames quoted in backticks inside prose (see ``INLINE_PYSPY``): one stack per
    line, innermost first as py-spy prints them."""
    found = [single for single in (parse_frame_line(m.group(1)) for m in INLINE_PYSPY.finditer(s)) if single]
    frames = [f for fs, _, _ in found for f in fs][:MAX_FRAMES]
    if not frames:
        return False
    b.add_frames(frames)
    b.report.bare_frames += len(frames)
    b.after_break = True  # prose: the next frames are another stack
    return True
