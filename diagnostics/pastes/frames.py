"""One line of text as stack frames: the frame grammar every dialect shares.

``parse_frame_line`` takes py-spy's ``func (path:line)`` in all the shapes reporters
leave it in (native ``func (libfoo.so)``, ``(inside path:line)``, aligned columns,
notes after the parenthesis, ``a → b → c`` chains, ``...`` abbreviations, frames cut
mid-line) and faulthandler's ``File "path", line N in func``, which is innermost first
like py-spy's. ``split_flattened`` takes a whole dump flattened onto one line apart.
Nothing here has state: which thread a frame belongs to is the builder's business.
"""

from __future__ import annotations

import re

from hangwatch.diagnostics.pastes.patterns import (
    ARROWS, BARE_FILE_FRAME, CUT_WITH_LINE, FAULTHANDLER_CUT, FAULTHANDLER_FRAME, FLAT_FRAME, HEX, IDENT,
    LINE_PLACEHOLDERS, MAX_FRAMES, NATIVE_CUT, NATIVE_PATH, PY_EXT, WINDOWS_SEP, WS,
)
from hangwatch.diagnostics.stacks import Frame


def parse_location(inner: str) -> tuple[str, int | None, bool] | None:
    """``path:line`` / ``lib.so`` / ``<string>:1`` inside parentheses:
    (file, line, native), or None when it does not look like a code location."""
    inner = inner.strip()
    if "\\_" in inner and not WINDOWS_SEP.search(inner):
        # markdown-escaped underscores: "torch/\\_inductor/". A backslash that
        # separates anything else ("anyio\\_core\\_eventloop.py" has none, but
        # "asyncio\\windows_events.py" or "torch\\_dynamo\\eval_frame.py" does) makes
        # it a Windows path, where "\\_" is a separator before a "_module" folder.
        inner = inner.replace("\\_", "_")
    if "\\" in inner:
        # Windows: py-spy prints "concurrent\\futures\\thread.py"; one separator
        # keeps the standard-library test and the signatures' path patterns working.
        inner = inner.replace("\\", "/")
    if inner.startswith("inside "):
        inner = inner[7:].strip()
    path, line = inner, None
    head, sep, tail = inner.rpartition(":")
    if sep and tail.isdigit() and len(tail) <= 7:
        path, line = head, int(tail)
    elif sep and tail in LINE_PLACEHOLDERS and head.endswith(PY_EXT):
        path = head  # "barrier (torch/distributed/distributed_c10d.py:...)": the line left out
    if not path or len(path) > 1000:
        return None
    if path[0] == "<" and path[-1] == ">":
        return path, line, False
    if WS.search(path) or "(" in path or ")" in path:
        return None
    if path.endswith(PY_EXT):
        return path, line, False
    if NATIVE_PATH.search(path):
        return path, line, True
    if path[-1:] == "…" or path[-3:] == "...":
        if NATIVE_CUT.search(path.rstrip(".…")):
            return path.rstrip(".…"), None, True
    if path in ("?", "???", "unknown"):
        return "?", None, True
    if line is not None and IDENT.match(path) and path[0] not in "0123456789":
        return path, line, False  # a script without .py: "<module> (vllm:8)"
    if "/" in path and line is not None:
        return path, line, False
    return None


def _clean_function(fn: str) -> tuple[str, bool]:
    """Strip list markers and abbreviation dots; (function, abbreviated)."""
    abbreviated = False
    fn = fn.strip()
    if "\\_" in fn:  # a rich-text editor escaped the underscores: "\\_\\_call\\_\\_ (..."
        # The location keeps them where other backslashes make it a Windows path
        # ("_git (pkg\\tools\\_git.py:122)": a separator before "_git.py").
        head, sep, tail = fn.partition("(")
        fn = head.replace("\\_", "_") + sep + (tail if WINDOWS_SEP.search(tail) else tail.replace("\\_", "_"))
    while fn[:3] == "..." or fn[:1] == "…":
        fn = fn[3:] if fn[:3] == "..." else fn[1:]
        fn = fn.strip()
        abbreviated = True
    if fn[:2] in ("- ", "* ", "+ "):
        fn = fn[2:].strip()
    return fn, abbreviated


def _function_ok(fn: str, native: bool) -> bool:
    if not fn or len(fn) > 2000:
        return False
    if not WS.search(fn):
        return True
    if not native:
        return False
    # C++ signatures have spaces; prose does not have "::" or a call's parentheses.
    return "::" in fn or "(" in fn or fn.startswith(("void ", "int ", "bool ", "0x"))


def parse_frame_line(s: str) -> tuple[list[Frame], bool, bool] | None:
    """One stripped line as frames: (frames, abbreviated, cut) or None.

    Linear: each ``(`` is looked at once, from left to right."""
    if s.startswith('File "'):
        return _faulthandler_frame(s)
    if ", line " in s:
        mb = BARE_FILE_FRAME.match(s)
        if mb:
            return [Frame(mb.group(3) or "?", mb.group(1).replace("\\", "/"), int(mb.group(2)))], False, False
    fn_text, abbreviated = _clean_function(s)
    if not fn_text:
        return None
    # "a → b → c": a chain written on one line, innermost first.
    for arrow in ARROWS:
        if arrow in fn_text:
            parts = [p.strip() for p in fn_text.split(arrow)]
            first = single_frame(parts[0])
            chain: list[Frame] = []
            if first is not None:
                chain.append(first[0])
            elif IDENT.match(parts[0]):
                chain.append(Frame(parts[0], "?"))
            else:
                return None
            for p in parts[1:]:
                one = single_frame(p)
                if one is not None:
                    chain.append(one[0])
                elif IDENT.match(p):
                    chain.append(Frame(p, "?"))
                else:
                    break
            if len(chain) >= 2 or first is not None:
                return chain, abbreviated, False
            return None
    one = single_frame(fn_text)
    if one is not None:
        return [one[0]], abbreviated, one[1]
    return None


def _faulthandler_frame(s: str) -> tuple[list[Frame], bool, bool] | None:
    """``File "path", line N in func`` (faulthandler: innermost first, like py-spy).
    A traceback's ``line N, in func`` (outermost first) is not a stack dump."""
    m = FAULTHANDLER_FRAME.match(s)
    if m:
        path, line, fn = m.group(1).replace("\\", "/"), m.group(2), m.group(3)
        if line is None:
            return [Frame("?", path, None)], False, True
        if fn is None:  # cut after the line number
            return [Frame("?", path, int(line))], False, True
        return [Frame(fn, path, int(line))], False, False
    m = FAULTHANDLER_CUT.match(s)
    if m:
        return [Frame("?", m.group(1) + "…", None)], False, True
    return None


def single_frame(s: str) -> tuple[Frame, bool] | None:
    """``func (loc)``, ``(inside loc)``, ``func   path:line``, ``func (cut...``."""
    i = s.find("(")
    while i != -1:
        j = s.find(")", i + 1)
        if j == -1:
            break
        inner = s[i + 1 : j]
        k = inner.rfind("(")
        if k != -1:  # an inner "(": restart from it (each char is passed once)
            i = i + 1 + k
            continue
        loc = parse_location(inner)
        if loc is not None:
            path, line, native = loc
            fn = s[:i].strip()
            if not fn:
                if inner.strip().startswith("inside "):
                    return Frame("?", path, line, native), False
                return None
            if path == "?" and not HEX.match(fn):
                native = True
            if _function_ok(fn, native):
                return Frame(fn, path, None if native and not path.endswith((".c", ".cc", ".cpp", ".cu", ".rs", ".h")) else line, native), False
            return None
        i = s.find("(", j + 1)
    if i > 0 and s[i - 1] in " \t" and s.find(")", i) == -1:
        # Cut mid-line: "replay (torch/cuda/" or "_forward_raw (". py-spy puts a space
        # before the parenthesis; a call in quoted code ("rank_zero_warn(") has none.
        fn, rest = s[:i].strip(), s[i + 1 :].strip()
        if fn and IDENT.match(fn) and (not rest or re.match(r"^[\w./<>-]{1,500}:?\d{0,7}$", rest)):
            if rest and not WS.search(rest):
                rest = rest.rstrip(":").replace("\\", "/")
                whole = CUT_WITH_LINE.match(rest)
                if whole:  # "f (pkg/mod.py:1242": only ")" lost, the location is whole
                    return Frame(fn, whole.group(1), int(whole.group(2))), True
                if NATIVE_PATH.search(rest):  # "cuEventSynchronize (libcuda.so.5": only ")" lost
                    return Frame(fn, rest, None, native=True), True
                return Frame(fn, rest + "…", None), True
            return Frame(fn, "?", None), True
        return None
    # Columns without parentheses: "dequeue      vllm/x/shm_broadcast.py:779".
    parts = s.split()
    if len(parts) == 2 and IDENT.match(parts[0]):
        loc = parse_location(parts[1])
        if loc is not None and not loc[2] and loc[1] is not None and (loc[0].endswith(PY_EXT) or "/" in loc[0]):
            return Frame(parts[0], loc[0], loc[1]), False
    return None


def split_flattened(s: str) -> list[str] | None:
    """A dump whose line breaks were lost (a web page or a digest flattened it):
    'Process 7: X Python v3.12 (/p) Thread 7 (active+gil): "MainThread" f (a.py:1) g (b.py:2) h (c...'.
    Two frames or more on one line that is not a frame chain come back as one
    line per header and frame, in order; else None. Linear: one left-to-right scan."""
    tokens: list[tuple[int, int, str]] = []
    frames = 0
    for m in FLAT_FRAME.finditer(s):
        text = m.group(0)
        if m.group("proc"):
            tokens.append((m.start(), m.end(), "proc"))
        elif m.group("thread"):
            tokens.append((m.start(), m.end(), "thread"))
        elif single_frame(text) is not None:
            tokens.append((m.start(), m.end(), "frame"))
            frames += 1
        if len(tokens) > MAX_FRAMES:
            break
    if frames < 2:
        return None
    out: list[str] = []
    for n, (start, end, kind) in enumerate(tokens):
        nxt = tokens[n + 1][0] if n + 1 < len(tokens) else len(s)
        if kind == "proc":
            cmd = s[end:nxt].split(" Python v", 1)[0].strip()
            out.append(f"{s[start:end]} {cmd}")
        elif kind == "thread":
            out.append(s[start:end])
        else:
            out.append("    " + s[start:end])
    tail = s[tokens[-1][1]:].strip().rstrip(".…").strip()
    if tail and "(" in tail and single_frame(tail) is not None:  # the last frame, cut: "h (c..."
        out.append("    " + tail)
    return out
