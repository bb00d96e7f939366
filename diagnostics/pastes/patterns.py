"""Every pattern the paste reader matches, with the shape of text each one is for.

One module so a change to a shape is one place to look, and so the dialect modules
(``pyspy_text``, ``tracebacks``, ``gdb``, ``cxx_traces``, ``logs``, ``handwritten``,
``lines``, ``unwrap``) share them. Each regex has bounded repetition only: a line is
matched in time linear in its length, whatever a paste holds (see the package's
docstring). Nothing here has state.
"""

from __future__ import annotations

import re

# -- limits -------------------------------------------------------------------
#: Longer lines are cut before they are looked at (a frame line, even a C++
#: template one, is shorter; a minified blob is not a stack).
MAX_LINE_CHARS = 4096
#: Frames kept per thread (innermost first); py-spy's own default limit is
#: Python's recursion limit, 1000.
MAX_FRAMES = 2048
MAX_THREADS = 4096
#: Headers in a row that share the frames after them (a reporter folding identical ranks).
MAX_GROUP = 64
MAX_PROCESSES = 4096

# -- around the stack text on a line: log prefixes, colours, markup, captions ------
PREFIX = re.compile(
    r"""^(?:[ \t]*(?:
        >+[ ]?                                            # quoted in mail/markdown
      | \[[^\]\n]{0,80}\]:?[ ]?                           # [rank0]: or [2024-05-01 12:00:00]
      | \d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d{1,9})?(?:Z|[+-]\d\d:?\d\d)?[ ]?(?:\|[ ]?)?   # ISO timestamp
      | \d\d:\d\d:\d\d(?:[.,]\d{1,9})?[ ]?(?:\|[ ]?)?     # clock time
      | [\w.-]{1,80}[ ]{1,40}\|[ ]?                       # docker compose "name  | "
      | \d{0,9}\((?:\w{1,40}[ ])?pid=\d{1,10}(?:,[ ]ip=[\w.:\[\]-]{1,60})?\)[ ]?   # ray / vLLM "(EngineCore pid=123) ",
                                                          # ip=[IPv6]; a log viewer's line number glued in front
      | (?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL)[ ]{1,3}\d\d-\d\d[ ]   # vLLM's "ERROR 01-12 " (the clock follows)
      | (?:stdout|stderr)[ ][FP][ ]                       # Kubernetes/containerd log: "<time> stdout F "
      | \d{1,6}:[ ]                                        # srun --label: "3: "
      | \^C                                               # the terminal's echo of Ctrl+C: "^CTraceback ..."
      | [*\u2022]{1,3}[ ]{1,4}                              # list bullets: "* frame", "\u2022 frame", "***  File: ..."
    ))*""",
    re.VERBOSE,
)
# gdb's pager prompt, old and new ("---Type <return> to continue, or q <return> to quit---",
# "--Type <RET> for more, q to quit, c to continue without paging--"), with the next line's
# output often on the same line after it.
PAGER = re.compile(r"-{2,3}Type <(?:return|RET)>[^\n]{0,80}?-{2,3}")
# Terminal colours kept by a captured log ("\x1b[1;32m").
ANSI = re.compile(r"\x1b\[[0-9;?]{0,20}[A-Za-z]")
INVISIBLE = re.compile("[\u00ad\u200b-\u200f\u202a-\u202e\u2060-\u2064\ufeff]")
# What a web page or a word processor puts in place of plain spaces and quotes: a
# no-break space for every indent; curly quotes around 'File "x.py"' and a thread name.
_TYPOGRAPHIC_SPACES = "\u00a0\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u202f\u205f\u3000"
_CURLY_DOUBLES = "\u201c\u201d\u201e\u201f\u2033\u00ab\u00bb"
_CURLY_SINGLES = "\u2018\u2019\u201a\u201b\u2032"
TYPOGRAPHIC_SPACE = re.compile(f"[{_TYPOGRAPHIC_SPACES}]")
PLAIN_SPACE = str.maketrans(dict.fromkeys(_TYPOGRAPHIC_SPACES, " "))
CURLY_DOUBLE = re.compile(f"[{_CURLY_DOUBLES}]")
PLAIN_DOUBLE = str.maketrans(dict.fromkeys(_CURLY_DOUBLES, '"'))
CURLY_SINGLE = re.compile(f"[{_CURLY_SINGLES}]")
PLAIN_SINGLE = str.maketrans(dict.fromkeys(_CURLY_SINGLES, "'"))
ENTITY = re.compile(r"&(?:lt|gt|quot|amp|apos|nbsp|#\d{1,6}|#x[0-9a-fA-F]{1,6});")
# A page's source rather than its text (a mail archive, a forum's export, a copied
# <pre>): its line breaks and block ends are tags; its other tags are markup around the
# text. Only HTML's own tag names: "<module>" and "<lambda>" are frames. (GitHub's
# <details>/<summary> around a paste are read line by line, see ``HTML``.)
HTML_BREAK = re.compile(r"<br\s{0,8}/?>|</(?:p|div|li|tr|pre|h[1-6]|blockquote|table)>")
HTML_TAG = re.compile(r"</?(?:br|p|div|span|pre|code|a|b|i|u|em|strong|tt|font|li|ul|ol|table|tbody|thead|tr|td|th|blockquote|"
                      r"hr|h[1-6]|sup|sub|kbd|samp|small|big|mark|del|ins|s|strike|var|cite|q|abbr)"
                      r"(?:\s[^<>]{0,500})?\s{0,8}/?>")
# A Markdown link around a path ("[/usr/lib/x.py](https://localhost:8080/#)"): its text is the path.
MARKDOWN_LINK = re.compile(r"\[([^\[\]\n]{1,1000})\]\((?:https?://|#)[^()\s]{0,500}\)")
HTML = re.compile(r"^</?(?:details|summary|pre|code|br|p|div|b|i|em|strong|sub|sup|hr)\b[^>]{0,200}>", re.IGNORECASE)
RANK_PREFIX = re.compile(r"\[(?:rank|RANK|Rank)[ ]?(\d{1,6})\]")
PID_IN_PREFIX = re.compile(r"\bpid=(\d{1,10})\b")
# "Rank 1 (waiting):", "**rank 3**:", "[rank7] py-spy:": a caption naming the rank of the stack below.
CAPTION_RANK = re.compile(r"(?i)\brank\s{0,2}[#=]?\s{0,2}(\d{1,6})\b")
PID_INTRO = re.compile(r"\b(?:pid|PID|Pid|process|Process)\s{0,2}[:=#]?\s{0,2}(\d{2,10})\s{0,3}[:)]?\s{0,3}(?:=+|-+)?\s{0,3}:?\s{0,3}$")
# "decode pid=951 (MainThread active+gil):": a label, the pid, then thread name and state.
LABELLED_HEADER = re.compile(r"\bpid[=: ]{1,2}(\d{1,10})\b")
# A py-spy thread header at the end of a line of prose, glued to it or after a space.
GLUED_THREAD = re.compile(r'(?<![A-Za-z0-9_."\'/-])Thread (?:0[xX][0-9A-Fa-f]{1,16}|\d{1,12}) \((?:idle|active|active\+gil|gil)\):? "[^"\n]{0,200}"$')

# -- py-spy dump's text, and pystack's -------------------------------------------
PROCESS = re.compile(r"^Process (\d{1,10}|<\w{1,20}>):? ?(.*)$")
PYTHON = re.compile(r"^Python (v?\d[\w.+-]{0,30})(?: \((.{0,500})\))?\s*$")
THREAD = re.compile(
    r'^Thread(?: (0[xX][0-9A-Fa-f]{1,16}|\d{1,12}|<\w{1,20}>|[A-Z]{1,8}|0[xX][0-9A-Fa-f]{0,16}(?:\.\.\.|…)|\.\.\.|…))?:? ?\(([a-z+]{1,16})(?:,[^()\n]{0,60})?\)(?::? ?"([^"\n]{0,200})"?)?:?(.{0,400})$'
)
# A header trimmed to the quoted name ('Thread "embed-warmup"'), or a faulthandler-style
# id with the reporter's note in place of "most recent call first"
# ('Thread 0x00000df0 (the anyio worker running the tool body):').
NAMED_THREAD = re.compile(r'^Thread "([^"\n]{1,200})":?\s*$')
NOTED_THREAD = re.compile(r"^Thread (0[xX][0-9A-Fa-f]{1,16}|\d{1,12}) \([^()\n]{1,200}\):\s*$")
# Placeholders people write for an id they left out: "Thread N", "Thread 0x7f...".
PLACEHOLDER_IDENT = re.compile(r"^(?:[A-Z]{1,8}|0[xX][0-9A-Fa-f]{0,16}(?:\.\.\.|…)|\.\.\.|…)$")
STATE = re.compile(r"^(idle|active|active\+gil|gil|running|sleeping|waiting)(?:,.{0,60})?$")
STACK_DUMP_FOR = re.compile(r"^Stack dump for (.{0,2000})$")
SEPARATOR = re.compile(r"^(?:=|-|#){2,}\s{0,5}(?:(pid|process|rank|worker|node)\s{0,3}[:=#]?\s{0,3}(\d{1,10}))\b.{0,200}$", re.IGNORECASE)
PROMPT = re.compile(r"^(?:[$%#]|[\w.@-]{1,80}[:@][^\s$#%]{0,200}[$#%]|\([\w.-]{1,60}\)\s{0,3}[\w.@-]{0,80}[:~][^\s]{0,200}[$#%])\s")
# The command that took the dump names its pid: py-spy, pystack, and the native stack tools
# (pstack/gstack PID, eu-stack -p PID, gdb -p PID ... --batch, "(gdb) attach PID").
PYSPY_PID = re.compile(
    r"py-spy\s+dump\b.{0,200}?(?:--pid|-p)[ =](\d{1,10})|pystack\s+remote\b(?:\s+-{1,2}[\w-]{1,30})*\s+(\d{1,10})"
    r"|\b[pg]stack\s+(\d{2,10})\b|\beu-stack\b.{0,100}?\s(?:-p|--pid)[ =](\d{2,10})\b"
    r"|\bgdb\b.{0,200}?(?:\s(?:-p|--pid)[ =]?|\sattach\s+)(\d{2,10})\b")  # a pid of 2+ digits, not "attach 3 processes"
# py-spy 0.2-0.3 printed "Arguments::" / "Locals::" (two colons); newer ones one.
LOCALS_HEAD = re.compile(r"^(Arguments|Locals)::?\s*$")
IDENT = re.compile(r"^[\w.<>$\[\]-]{1,300}$")
PY_EXT = (".py", ".pyx", ".pyi", ".pyc")
NATIVE_PATH = re.compile(r"(\.so(\.\d{1,6}){0,4}|\.dylib|\.dll|\.pyd|\.(c|cc|cpp|cxx|h|hpp|cu|cuh|rs|S)|^python\d[\d.]{0,6}|^\[\w{1,20}\])$")
# A library name the paste cut: "cudaLaunchKernel (libcudart.so…)".
NATIVE_CUT = re.compile(r"\.(so|dylib|dll)(\.\d{0,6}){0,4}$")
#: What reporters write in place of a line number they left out.
LINE_PLACEHOLDERS = frozenset(("...", "…", "?", "??", "???", "N", "NNN", "X", "XX", "XXX", "xxx", "LINE", "line", "L"))
WS = re.compile(r"\s")
# A backslash that separates a path component not led by "_": a Windows path.
WINDOWS_SEP = re.compile(r"\\(?!_)")
HEX = re.compile(r"^0[xX][0-9a-fA-F]{1,16}$")
FLAT_FRAME = re.compile(
    r'(?P<proc>\bProcess \d{1,10}:)'
    r'|(?P<thread>\bThread (?:0[xX][0-9A-Fa-f]{1,16} |\d{1,12} |<\w{1,20}> )?\((?:idle|active|active\+gil|gil)\):? ?(?:"[^"\n]{0,200}")?)'
    r'|(?<![\w(<>.$\[\]-])[\w<>.$\[\]-]{1,300} \([^()\s]{1,500}\)'
)
ARROWS = (" → ", " -> ", " ⇒ ", " => ")
LEFT_NOTES = ("<-", "←", "⟵", "#", "//", "<==")
CUT_WITH_LINE = re.compile(r"^([\w./<>-]{1,500}\.pyx?):(\d{1,7})$")
# pystack ("pystack remote PID"): outermost frame first, source lines under the frames.
PYSTACK_THREAD = re.compile(r"^Traceback for thread (\d{1,12}) \(([^()\n]{0,200})\)(?: \[([^\]\n]{0,100})\])? \(most recent call last\):?\s*$")
PYSTACK_FRAME = re.compile(r'^\((Python|C)\) File "([^"\n]{1,1000})", line (\d{1,7}), in (\S.{0,1000}?)(?: \(([^()\s]{1,300})\))?\s*$')
# py-spy's own failure for a process it could not read ("Error: Failed to suspend process",
# "Reason: EPERM: Operation not permitted"): that process was not dumped, often the culprit.
PYSPY_ERROR = re.compile(r"^(?:Error|error|Reason):\s{0,3}(.{1,200})$")
PYSPY_FAILURES = ("failed to suspend", "permission denied", "operation not permitted", "eperm", "failed to copy py_version",
                  "failed to find python", "no such process", "timed out", "failed to get process", "ptrace")
# py-spy top's banner or table header anywhere in a line: a top table flattened onto one
# line (a digest quoting it) is sampled totals, never frames.
TOP_BANNER = re.compile(r"%Own\s{1,12}%Total\s{1,12}OwnTime|GIL: \d{1,3}\.\d{1,3}%, Active: \d{1,5}\.\d{1,3}%, Threads: \d")
# py-spy top and record print sampled totals, not one stack per thread: a top row
# ("40.00%  80.00%  11.20s  19.73s  mapstar (multiprocessing/pool.py:44)"), its header and
# banner lines, record's own "py-spy> " messages (py-spy#329, #737, #610). Their rows look
# like frames; read as a stack they would name a busy function as the hung thread.
PROFILE_LINE = re.compile(
    r"^(?:-?\d{1,7}\.\d{1,3}%\s{1,12}-?\d{1,7}\.\d{1,3}%\s|%Own\s{1,12}%Total\b|Collecting samples from '"
    r"|Total Samples \d|GIL: \d{1,3}\.\d{1,3}%, Active: |py-spy> )"
)

# -- Python tracebacks, faulthandler, pdb, IPython -------------------------------
# Python 3.14 adds the thread's name: "Current thread 0x00007604707c3780 [python] (most recent call first):".
# The id may be left out of a paste ('Current thread (most recent call first):',
# PyAutoFit#1528) or written as a placeholder ('Thread 0x... (most recent call first):').
FAULTHANDLER_THREAD = re.compile(
    r"^(Current thread|Thread)(?: (0[xX][0-9A-Fa-f]{1,16}|0[xX][0-9A-Fa-f]{0,16}(?:\.\.\.|…)))?(?: \[([^\]\n]{0,100})\])? \(most recent call first\):?\s*$"
)
# The gap before "line" may be padded: people align a pasted stack's columns
# ('File ".../jax/_src/array.py",    line 642 in _value', PyAutoFit#1528).
# The line may be cut after its number ('File "x/util.py", line 227'): a frame, name unknown.
FAULTHANDLER_FRAME = re.compile(r'^File "([^"\n]{1,1000})"(?:,[ \t]{1,40}line (\d{1,7})(?: in ([^\s()]{1,300}))?)?\s*$')
FAULTHANDLER_CUT = re.compile(r'^File "([^"\n]{1,1000})$')
# faulthandler's line with 'File "..."' trimmed to the bare path (a reporter's condensed
# copy): "numpy/_core/multiarray.py, line 11 in <module>", the " in f" sometimes left out.
BARE_FILE_FRAME = re.compile(r"^([^\s\",()]{1,1000}\.pyx?|<[\w.-]{1,60}(?: [\w.-]{1,60})?>), line (\d{1,7})(?: in ([^\s()]{1,300}))?\s*$")
# pdb's "where": "  /app/train.py(88)step()" per frame, oldest first, the current one
# marked "> " (with "->None" after a return), each followed by "-> source line".
PDB_FRAME = re.compile(r"^(?:\(Pdb\)\s{1,8})?(?:>\s{1,4})?([^\s()]{1,1000}?\.pyx?|<[\w.-]{1,60}>)\((\d{1,7})\)([^\s()]{1,300})\(\)(?:->.{0,300})?$")
# gdb py-bt (python-gdb.py), newer: "Traceback (most recent call first):" then
# '  File "/p/threading.py", line 295, in wait' with the source line under it.
# The call a traceback's innermost source line makes ("p.join()", "time.sleep(5)",
# "res = self._popen.wait(timeout)"): under a KeyboardInterrupt, where the thread blocked
# in C code that no frame shows.
# A method called on a call's result further along the line: "x.cpu().numpy()" -> numpy.
CHAINED_CALL = re.compile(r"\)\.([A-Za-z_]\w{0,100})\(")
# A call inside another call's arguments: "int(proc.stdout.readline())" -> proc.stdout.readline.
NESTED_CALL = re.compile(r"(?<![\w.])([A-Za-z_][\w.]{0,200})\(")
SOURCE_CALL = re.compile(r"^(?:[\w.,\[\] ]{1,200}=\s{0,4})?(?:return\s{1,4}|await\s{1,4}|yield\s{1,4})?([A-Za-z_][\w.]{0,200})\(.{0,500}\)?\s*:?$")
# "with self._lock:" / "with mutex, other:": a with statement whose (first) context manager
# is named as a lock acquires it on entry.
WITH_LOCK = re.compile(r"^with\s{1,4}([A-Za-z_][\w.]{0,200}?(?:lock|Lock|LOCK|mutex|Mutex|sem|semaphore|Semaphore))\s{0,4}(?:[:,]|\sas\s)")
# Python 3.14's faulthandler prints the current thread's C stack under its Python frames:
# "Current thread's C stack trace (most recent call first):" then
# '  Binary file "/usr/lib/libc.so.6", at pthread_cond_wait+0x1f [0x7f..]' (or "at +0x3def0").
C_STACK_HEAD = re.compile(r"^Current thread's C stack trace \(most recent call first\):?\s*$")
C_STACK_FRAME = re.compile(r'^Binary file "([^"\n]{1,1000})", at ([^\s+\[]{0,300})(?:[+-]0x[0-9a-fA-F]{1,16})?(?: \[0x[0-9a-fA-F]{1,16}\])?\s*$')
#: The dumping code's own C frames at the top of that stack.
C_STACK_DUMPER = re.compile(r"^(_Py_DumpStack|_Py_Dump\w+|faulthandler_\w+|_Py_FatalError\w*|fatal_error\w*|_Py_backtrace\w*)$")
# `python -m trace --trace`: "rendezvous.py(188):         return TCPStore(" per line run, and
# " --- modulename: rendezvous, funcname: _create_c10d_store" on each call. The last lines are
# where the process stopped.
PYTRACE_LINE = re.compile(r"^([\w.<>-]{1,200}\.pyx?)\((\d{1,7})\): (.{0,2000})$")
PYTRACE_CALL = re.compile(r"^--- modulename: [\w.<>-]{1,200}, funcname: ([\w<>.-]{1,200})$")
RECENT_FIRST = re.compile(r"^Traceback \(most recent call (first|last)\):?\s*$")
# A thread's banner above its traceback-style stack (outermost first): pytest-timeout's
# "~~~~ Stack of MainThread (1399...) ~~~~" and the hanging_threads package's
# '---------Thread 1332... "MainThread" hangs ---------'. Without it the stacks of
# every thread ran together as one cut traceback (ptvsd#1988, pytorch#193951).
BANNER_THREAD = re.compile(
    r'^[~=-]{3,}\s{0,4}(?:Stack of (\S.{0,200}?) \((\d{1,20})\)|Thread (\d{1,20}) "([^"\n]{0,200})" hangs)\s{0,4}[~=-]{3,}$'
)
# A stack printer may put the frame's source on the same line after two spaces
# ('File: "x.py", line 9, in run  session.run(out)', tensorflow#5289).
# A sampling tool's or a logger's condensed frame keeps the source on the same line
# ('File "db.py", line 86, in get_run with self.cache_lock:'): group 4.
# A path a printer elided from the left loses its opening quote with it ('File ...\\a.py", line 9').
# (The same-line source is greedy up to its last non-blank: a lazy one before "\s*$" went
# quadratic on a run of blanks inside the line.)
TRACEBACK_FRAME = re.compile(r'^File:? (?:"|(?=\.\.\.|…))([^"\n]{1,1000})",[ \t]{1,40}line (\d{1,7}),[ \t]{1,40}in (\S{1,300})(?:\s{1,40}(\S(?:.{0,3000}\S)?))?\s*$')
# IPython / Jupyter tracebacks (ultralytics#6206): "Empty      Traceback (most recent call last)",
# then frames as "File C:\\...\\dataloader.py:1132, in Class.method(self, timeout)" (IPython 8),
# "~/lib/python3.7/.../dataloader.py in _try_get_data(self, timeout)" (older IPython),
# "Cell In[14], line 1" / "<ipython-input-5-2a1c..> in <module>" for notebook cells, each
# followed by numbered source lines ("   1131 try:", "-> 1132     data = ...", "----> 1 x").
IPY_TB_START = re.compile(r"^[A-Za-z_][\w.]{0,200}\s{2,}Traceback \(most recent call last\)\s*$")
IPY_FRAME = re.compile(r"^File (\S.{0,1000}?):(\d{1,7}), in ([^\s(]{1,300})(?:\(.{0,3000}\)?)?\s*$")
# pytest's long traceback: each frame is its source, the line it was in marked with ">",
# then its location "path.py:123: " (an exception name after it on the innermost one).
PYTEST_LOCATION = re.compile(r"^((?:[A-Za-z]:)?[^\s:]{1,1000}\.pyx?):(\d{1,7}):(?: ([\w.]{1,200}))?$")
# pytest's short traceback (--tb=short, and its default for conftest errors): "path.py:123: in func",
# the frame's source line under it; outermost first.
PYTEST_SHORT = re.compile(r"^((?:[A-Za-z]:)?[^\s:]{1,1000}\.pyx?):(\d{1,7}): in ([^\s()]{1,300})$")
PYTEST_DEF = re.compile(r"^(?:async\s{1,4})?def ([A-Za-z_]\w{0,200})\(")
IPY_OLD_FRAME = re.compile(r"^(\S{1,1000}\.py[xco]?|<frozen [\w.]{1,200}>) in ([^\s(]{1,300})(?:\(.{0,3000}\)?)?\s*$")
IPY_CELL = re.compile(r"^(?:Cell In ?\[(\d{1,7})\], line (\d{1,7})(?:, in ([^\s(]{1,300}).{0,3000})?|<ipython-input-(\d{1,7})-\w{0,40}> in ([^\s(]{1,300}).{0,3000})\s*$")
IPY_SOURCE = re.compile(r"^(?:-{0,12}>\s{0,4})?\d{1,7}(?:\s|$)")
# The caption a stack-dumping helper prints before each thread's traceback.format_stack
# ("# Thread: MainThread(140735)", "Thread worker-1 (1234):").
CAPTION_THREAD = re.compile(r"(?i)^[#=*\s-]{0,6}thread\b[:#\s]{0,3}[\"']?([A-Za-z_][\w.-]{0,60})")
# A Thread object's repr as the caption ("print(t)" before its stack):
# "<Thread(Worker-1, started daemon 140234)>", "<_MainThread(MainThread, started 140111)>".
THREAD_REPR = re.compile(r"^<\w{0,40}Thread\(([^,()<>\n]{1,100}), (?:started|initial|stopped)\b[^()<>\n]{0,60}\)>:?$")
# The line that ends a Python traceback: "KeyboardInterrupt", "RuntimeError: ...".
EXCEPTION_LINE = re.compile(r"^([A-Za-z_][\w.]{0,200}(?:Error|Exception|Interrupt|Exit|Warning|Timeout))\b:?")
# A process printing its own stacks: the printing code, then the signal handler that called it.
DUMPER = re.compile(r"(?i)^_{0,2}(dump_?(all_?)?(stacks?|threads?|traceback(_later)?)|print_?(all_?)?stacks?|format_stack|extract_stack|print_stack|walk_stack)$")
HANDLER = re.compile(r"(?i)(handler|^_?on_?sig|^handle_?sig|^_?sig(int|term|usr\d?)_?)")
# The same in native code: a program's own stack printer (redis's logStackTrace, glibc's
# backtrace, abseil's and folly's failure-signal handlers) and the signal trampoline under it.
NATIVE_DUMPER = re.compile(r"(?i)^(\w+::)*_{0,2}(\w*_)?(log|print|dump|write|show|get|collect)_?(stack_?trace|back_?trace|stack|traceback)s?(_\w*)?$"
                           r"|^(__libc_|__gi_)?backtrace(_symbols(_fd)?)?$|FailureSignalHandler|^(\w+::)*\w*[Ss]ignal_?[Hh]andler\w*$"
                           r"|^__restore_rt$|^_sigtramp$|^<signal handler called>$|^raise$|^(__)?pthread_kill(_implementation)?$")
# A signal handler's own frame on top of the code the signal interrupted (gunicorn's
# handle_abort on a worker timeout, a SIGTERM handler raising): that code is where it waited.
SIGNAL_HANDLER = re.compile(r"(?i)^_{0,2}(\w*_)?(signal_?handler|sig(int|term|alrm|usr\d?|quit|abrt)?_?handler|handle_(abort|quit|term|int|alarm|timeout|sig\w{0,10}|signal)|on_(signal|sigterm|sigint|timeout)|_?terminate_process_handler)$")

# -- gdb and lldb -----------------------------------------------------------------
#: The frame standing for py-bt's "Waiting for the GIL" (signatures match it by name).
GIL_WAIT = "<waiting for the GIL>"
# gdb: "#3 Frame 0x7fa3..., for file /p/queues.py, line 131, in get (self=...": py-bt of
# Python 2 / older gdb, one line per frame (the locals run on, often wrapped and cut).
GDB_PYFRAME = re.compile(r"^#\d{1,6} Frame 0x[0-9a-fA-F]{1,16}, for file (.{1,1000}?), line (\d{1,7}), in ([^\s(]{1,300})")
# The same frame as an argument of the interpreter's eval function in a plain `bt` with
# python-gdb loaded: "PyEval_EvalFrameEx (f=Frame 0x23c2e90, for file /p/threading.py, line 339, in wait (self=...".
GDB_FRAME_ARG = re.compile(r"\bf=(?:f@entry=)?Frame 0x[0-9a-fA-F]{1,16}, for file (.{1,1000}?), line (\d{1,7}), in ([^\s(]{1,300})")
# A gdb frame line that ends at its location: "... ) at ../Python/ceval.c:2666", "... ) from /lib/libc.so.6".
GDB_LOCATION_END = re.compile(r"\) (?:at \S{1,1000}:\d{1,7}|from \S{1,1000})$")
#: Lines a gdb frame's wrapped arguments may span (locals printed by python-gdb can be long).
MAX_GDB_ARG_LINES = 40
# py-bt's frame for a call into a builtin: "<built-in method acquire of _thread.lock object at 0x..>".
GDB_BUILTIN = re.compile(r"^<built-in method (\w{1,200}) of ")
# Lines gdb's py-bt prints in place of a frame: the thread waits to take the GIL, or
# runs the garbage collector. Either means the frames around it are py-bt's.
PYBT_MARKERS = ("Waiting for the GIL", "Garbage-collecting")
#: The frame standing for py-bt's "Garbage-collecting" (the cyclic collector running there).
GC_FRAME = "<garbage collection>"
# gdb thread headers: "Thread 1 (Thread 0x7f38.. (LWP 237)):" (thread apply all) and
# "[Switching to thread 12 (Thread 0x7f9d.. (LWP 30756))]"; gdb's thread 1 is the main thread.
# gdb names the thread when it has a name: 'Thread 7 (Thread 0x7f93.. (LWP 3271135) "executionLoop"):'.
GDB_THREAD = re.compile(r'^\[?(?:Thread|Switching to thread) (\d{1,7}) \(Thread 0x[0-9a-fA-F]{1,16} \(LWP (\d{1,10})\)(?: "([^"\n]{0,100})")?\)')
# Without libthread_db (musl, a container) gdb shows "Thread 2 (LWP 3638147):" (py-spy#565);
# where it stopped a program: 'Thread 1 "python" received signal SIGINT, Interrupt.',
# followed by the stop location, which the "#0" frame of a bt repeats (pytorch/xla#945).
GDB_THREAD_LWP = re.compile(r'^\[?(?:Thread|Switching to thread) (\d{1,7}) \(LWP (\d{1,10})\)(?: "([^"\n]{0,100})")?\)?\]?:?$')
GDB_STOPPED = re.compile(r'^Thread (\d{1,7}) "([^"\n]{0,100})" received signal SIG[A-Z0-9]{1,10}\b')
# gdb attaching to a live process (`gdb -p PID ... --batch`) prints its libthread_db preamble,
# then where the attached thread, the process's own LWP, i.e. gdb's thread 1, the main thread,
# stopped: a bare "0x.. in f () from lib" with no "#N", which that thread's bt repeats as "#0"
# (Triton-distributed#81).
GDB_ATTACHED = re.compile(r"^(?:\[Thread debugging using libthread_db enabled\]|Using host libthread_db library )")
# gdb bt: "#0  0x00007f.. in poll () at ../sysdeps/x.S:81" / "#2  c10::Foo::bar (this=...) at f.cpp:53"
# / "#5  0x.. in ?? () from /lib/libc.so.6": innermost first, like py-spy (see gdb_call).
# gdb bt, any frame: "#N  " then an optional "0x.. in ", then the call. The call itself
# (a C++ name with its own parameter list, "from" or "at" wrapped onto the next line, a
# placeholder line number) is taken apart by gdb_call.
GDB_NUMBERED = re.compile(r"^#\d{1,6}\s{1,4}(0x[0-9a-fA-F]{1,16} in )?")
# The same frame without its "#" (markdown made the line a heading): only with its address,
# "0  0x00007f30c8dcffc0 in f () at x.c:9", so that a numbered list is no backtrace.
GDB_UNHASHED = re.compile(r"^\d{1,5}\s{1,4}0x[0-9a-fA-F]{6,16} in \S")
# A numbered frame with no parameter list, "NAME from WHERE[:LINE]", as some stack tools
# print mixed stacks ("#56 forward from /srv/app/models/llama.py:2083", sglang#10124):
# a Python frame when WHERE is a Python file, else a native one in that library.
NUMBERED_FROM = re.compile(r"^([A-Za-z_<][\w.<>$:~-]{0,300}) from (\S{1,1000}?)(?::(\d{1,7}))?$")
# A gdb frame shortened by hand to its symbol ("#3  __pthread_cond_timedwait64", "#6
# PyEval_RestoreThread    <- waiting for the GIL"), a note after it behind an arrow or a
# comment mark. Only a symbol that is no word of prose: a "_" or "::" in it, or a capital
# inside it ("#12 Merge from upstream/main" and "#3 Introduction" are a list's items).
GDB_SYMBOL_ALONE = re.compile(r"^(?!Thread_)([A-Za-z_~][\w:~.$]{0,300}?)(?:\s{1,60}(?:\u2190|<-{1,2}|//|#).{0,500})?$")
GDB_SYMBOL_NOT_PROSE = re.compile(r"_|::|[a-z][A-Z]")
# gdb "info threads": "* 1    Thread 0x7fc7.. (LWP 52422) "python" select_poll_poll () at x.c:219":
# one line per thread, its innermost frame at the end; gdb's thread 1 is the main thread.
# The target id is "Thread 0x.. (LWP N)" with libthread_db, a bare "LWP N" without it
# (a process attached in a container, pytorch#39855).
GDB_INFO_THREAD = re.compile(r'^\*?\s{0,4}(\d{1,7})\s{1,12}(?:Thread 0x[0-9a-fA-F]{1,16} \(LWP (\d{1,10})\)|LWP (\d{1,10}))(?: "([^"\n]{0,100})")?\s{1,12}(\S.{0,3000})$')
# lldb "bt": "* thread #1, name = 'python', stop reason = signal SIGSTOP" and
# "  frame #0: 0x00007fb0.. libc.so.6`syscall + 29" (lldb's thread #1 is the main thread).
LLDB_THREAD = re.compile(r"^\*?\s{0,4}thread #(\d{1,7})(?:: tid = (0x[0-9a-fA-F]{1,16}|\d{1,10}))?(?:.{0,200}?\bname = '([^'\n]{0,100})')?")
# The frame on an lldb thread line (`thread list`, `thread info all`): ", 0x0000000101855e7e libsystem_kernel.dylib`__psynch_cvwait + 10,"
LLDB_THREAD_FRAME = re.compile(r", 0[xX][0-9a-fA-F]{1,16} ([^`\s,]{1,500})`([^,`]{1,1000}?)(?: \+ \d{1,12})?(?:,|$)")
LLDB_FRAME = re.compile(r"^\*?\s{0,4}frame #\d{1,6}: (?:0[xX][0-9a-fA-F]{1,16} )?([^`\s]{1,500})`(.{1,3000})$")
LLDB_OFFSET = re.compile(r" \+ \d{1,12}$")
# WinDbg "~*k"/"kb"/"kn" (and a minidump's stack in the same form): a thread header
# "   0  Id: 980.d30 Suspend: 1 Teb: 7ffdf000 Unfrozen" (thread 0 is the main thread), a
# column header ("ChildEBP RetAddr  Args to Child", "Child-SP RetAddr Call Site") and frames
# "[NN] ADDR ADDR [ARGS...] module!function+0xNN [file @ line]" innermost first; a frame
# without symbols is "module+0xNN".
WINDBG_THREAD = re.compile(r"^[.#]?\s{0,4}(\d{1,6})\s{1,6}Id:\s{0,3}([0-9a-fA-F]{1,8})\.([0-9a-fA-F]{1,8})\s{1,6}Suspend:")
WINDBG_COLUMNS = re.compile(r"^(?:#\s{1,4})?(?:Child-?EBP|Child-SP)\s{1,20}RetAddr\b")
WINDBG_FRAME = re.compile(r"^(?:[0-9a-fA-F]{2,4}\s{1,4})?(?:[0-9a-fA-F`]{8,17}\s{1,12}(?::\s{1,4})?){1,8}"
                          r"([A-Za-z_][\w.-]{0,100})(?:!([^\s+]{1,1000}?))?(?:\+0x[0-9a-fA-F]{1,16})?"
                          # kv's annotations: "(FPO: [3,0,0])", "(CONV: cdecl)", then the source "[x.cpp @ 49]"
                          r"(?:\s{1,4}\([A-Z][\w-]{0,20}:[^()\n]{0,200}\)){0,3}(?:\s{1,4}\[[^\]\n]{0,1000}\])?\s{0,4}$")
# A WinDbg frame by its name alone, "ntdll!NtWaitForSingleObject" (a stack retyped or cut to
# its symbols), an author's "<- note" after it: taken after another frame, or when the
# module is one of Windows' own.
WINDBG_BARE = re.compile(r"^([A-Za-z_][\w.-]{0,100})!([^\s+!]{1,1000}?)(?:\+0x[0-9a-fA-F]{1,16})?(?:\s{2,}(?:<-|#|//).{0,300})?$")
WINDOWS_MODULE = re.compile(r"(?i)^(ntdll|kernelbase|kernel32|ucrtbase|msvcrt|user32|win32u|combase|rpcrt4|sechost|advapi32|ws2_32|mswsock|python\d{1,3})$")
# A Windows stack without WinDbg's columns (Process Explorer's or Process Hacker's thread
# stack, a minidump viewer): "libblas.dll!exec_blas+0x122", "KERNEL32.DLL!SwitchToThread",
# "_cython_blas.cp312-win_amd64.pyd+0xfd97": a binary's name, its symbol and/or offset.
MODULE_FRAME = re.compile(r"^([\w.-]{1,100}\.(?:dll|exe|pyd|sys|DLL|EXE|PYD|SYS|Dll))(?:!([^\s+!]{1,1000}))?(?:\+0x[0-9a-fA-F]{1,16})?$")
# Visual Studio's call stack window (a minidump opened in it): "> python311.dll!take_gil(...) Line 307 C",
# "ntdll.dll!NtWaitForSingleObject() Unknown".
VS_FRAME = re.compile(r"^>?\s{0,4}([\w.-]{1,100}\.(?:dll|exe|pyd|DLL|EXE|PYD))!([^\s(]{1,1000})\(.{0,2000}$")
# gdb frames quoted inline in prose (pytorch#15638: "it hangs at the function call of
# `c10d::TCPStore::TCPStore(std::string const&, ...) ()`, `c10d::tcputil::connect(...) ()`"):
# a backticked span in gdb's form for a frame without debug info, "name(args) ()" with an
# optional " from LIB" / " at FILE:LINE".
INLINE_GDB = re.compile(r"`([^`\n]{3,3000}?\) \(\)(?: (?:from|at) [^`\s]{1,1000})?)`")

# -- native backtraces that frameworks print: torch's C++ errors, its fatal-signal handler, Paddle's
# One frame of the C++ backtrace torch prints under an error ("Exception raised from doWait
# at TCPStore.cpp:550 (most recent call first):"), innermost first:
# "frame #2: c10d::TCPStore::doGet(std::string const&) + 0x32 (0x7f60.. in /x/libtorch_cpu.so)".
TORCH_CXX_FRAME = re.compile(r"^frame #(\d{1,4}): (\S.{0,3000}?) \+ 0x[0-9a-fA-F]{1,16}(?: \((?:0x[0-9a-fA-F]{0,16})?(?: in ?(\S{0,1000}?))?\)?)?$")
# The header above one of those backtraces: "Exception raised from run at /p/ProcessGroupNCCL.cpp:2063
# (most recent call first):" names the function that raised (cache-dit#761).
RAISED_FROM = re.compile(r"^Exception raised from (\S{1,300}) at (\S{1,1000}?):(\d{1,7})\b")
# Where the NCCL watchdog thread raises when it finds a collective timed out or failed: a
# backtrace raised there is that thread's own (not the rank's hung stack), and it says that
# a collective never completed.
NCCL_WATCHDOG_RAISERS = frozenset(("run", "ncclCommWatchdog", "watchdogHandler", "checkTimeout", "runLoop",
                                   "heartbeatMonitor", "checkAndSetException", "handleException"))
# torch's fatal-signal handler (TORCH_SHOW_CPP_STACKTRACES / c10::FatalSignalHandler), one
# block per thread of the process: "SIGABRT(6), PID: 15837, Thread 15853: " then that
# thread's "frame #k: fn + 0x.. (0x.. in lib)" lines (pytorch#94003, pytorch#99218).
SIGNAL_THREAD = re.compile(r"^(SIG[A-Z0-9]{2,8})\((\d{1,3})\), PID: (\d{1,10}), Thread (\d{1,10}):?$")
# PaddlePaddle's "C++ Traceback (most recent call last):" rows: "8   ncclAllReduce".
NUMBERED_CXX_HEAD = re.compile(r"^C\+\+ Traceback \(most recent call last\):?\s*$")
NUMBERED_CXX = re.compile(r"^(\d{1,4})\s{1,8}([A-Za-z_~(<].{0,3000})$")

# -- logs that say where a process waits, without a stack -------------------------
# PyTorch's NCCL watchdog on a timeout: "[rank2]:[E ProcessGroupNCCL.cpp:563] [Rank 2] Watchdog
# caught collective operation timeout: WorkNCCL(SeqNum=4084, OpType=ALLREDUCE, ...)": no stack,
# but it says which collective each rank waited in, and at which sequence number.
# Quoted with the fields left out too: "WorkNCCL(..., OpType=COALESCED, ...)".
WATCHDOG = re.compile(r"WorkNCCL\((?:SeqNum=(\d{1,12})|\.\.\.|…), OpType=([A-Za-z_]{1,40})")
SHM_WAIT = "No available shared memory broadcast block found"
# Horovod's stall inspector, one stalled tensor per entry (several on the warning's line in
# older logs): "allreduce.conv1.weight [ready ranks: 0, 7, 3]" (horovod#364), TensorFlow op
# names "HorovodBroadcast_w_0 [missing ranks: 0]" (horovod#534), Keras names with "/"
# (horovod#457). Ready ranks wait in that collective; missing ones never submitted it.
# (the tensor's name before each is read backwards from it: a search for the name first
# would try every ':' of a long line as its start)
HOROVOD_STALL = re.compile(r"\[(ready|missing) ranks:\s{0,4}([\d,\s]{0,4000})\]")
HOROVOD_OP = re.compile(r"(?i)^(allreduce|allgather|broadcast|alltoall|reducescatter|adasum)\.|horovod_?(allreduce|allgather|broadcast|alltoall|reducescatter)")
# vLLM's VLLM_TRACE_FUNCTION log: "<time> Call to f in /p/a.py:93 from g in /p/b.py:101" and
# "Return from f in /p/a.py:95 to g in /p/b.py:101". The calls still open at the end of
# the log are the stack the process hung in.
# (older vLLM wrote no caller, and put the time first: "2024-04-15 13:59:04.981153 Call to f in /p/x.py:222")
TRACE_CALL = re.compile(r"^(?:\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d{1,9})? )?(Call to|Return from) (\S{1,300}) in (\S{1,1000}?):(\d{1,7})"
                        r"(?: (?:from|to) (\S{1,300}) in (\S{1,1000}?):(\d{1,7}))?\s*$")

# -- stacks written by hand -------------------------------------------------------
# "DP0,1,2: synchronize (...)" / "DP3..7:  broadcast (...)" / "rank 3: step (...)": a
# reporter folding ranks that share a stack onto one labelled line (one process per label).
GROUP_LABEL = re.compile(r"^(?:DP|TP|PP|EP|CP|rank|Rank|RANK)[ _]?(\d{1,6})[\d,.~ -]{0,40}:\s+(?=\S)")
# A call chain written out by hand, outermost first, one call per line:
#   DPEngineCoreProc.run_busy_loop
#     -> MultiprocExecutor.get_response
#     -> shm_broadcast.MessageQueue.dequeue      (vllm-ascend#13648)
ARROW = ("-> ", "→ ", "=> ")
ARROW_NAME = re.compile(r"^[A-Za-z_<][\w.<>:~$-]{0,300}$")
# A function name written alone on its line ("cuStreamSynchronize", "process_batch_result"),
# maybe with a note in parentheses ("_local_scalar_dense_cuda (tensor.item())"): a frame when
# it sits next to real frames, as people write a stack by hand. Code-shaped only: an
# underscore, a "::" or a camelCase step, so prose words are not taken.
BARE_NAME = re.compile(r"^([A-Za-z_][\w:<>~]{3,200})(?:\s{1,8}\([^\n]{0,200}\))?$")
CAMEL = re.compile(r"[a-z][A-Z]")
# A reporter's note after a name, two spaces or more away: "cuStreamSynchronize   <- never returns".
BARE_NOTE = re.compile(r"(?<=\S)\s{2,}(?:<-|←|⟵|<==|#|//)(?:\s.{0,300})?$")  # (from a run's start only: linear)

# -- whole pastes: JSON log records, interleaved processes, wrapped lines -----------
#: Keys under which JSON log records keep their text (Docker's json-file driver: "log";
#: journald/structured loggers: "message"/"MESSAGE"/"msg"; Google Cloud Logging: "textPayload").
JSON_TEXT_KEYS = ("log", "message", "msg", "MESSAGE", "textPayload", "text", "line")
JSON_LINE_MAX = 1 << 20
# A line led by a ray / vLLM process prefix: "(Worker_TP2 pid=291276) ERROR ...".
STREAM_PID = re.compile(r"^[ \t]*\d{0,9}\((?:\w{1,40}[ ])?pid=(\d{1,10})(?:,[ ]ip=[\w.:\[\]-]{1,60})?\)")
# A rank's own line prefix: torchrun's "[default0]:" (its role, 'default' unless --role
# names one, and the local rank; --tee / log_line_prefix_template) and torch's "[rank3]:".
# Several ranks' faulthandler or py-spy output printed through one terminal interleaves
# line by line under these.
STREAM_RANK = re.compile(r"^[ \t]*\[(?:rank|RANK|Rank|[A-Za-z_][A-Za-z_-]{0,40}?)(\d{1,6})\]:")
# The rest of a 'File "..."' traceback line that a terminal wrapped: 'm/v1/x.py", line 9, in f'.
WRAPPED_FILE_TAIL = re.compile(r'^[^\s"]{1,1000}", line \d{1,7}')
# A 'File "...", line N, in f' traceback line wrapped after its line number: the head ends in
# 'line 235,' and the next line is ' in <module>' (a paste re-wrapped at a fixed width, pytorch#45042).
WRAPPED_LINE_HEAD = re.compile(r'^\s{0,40}File:? "[^"\n]{1,1000}", line \d{1,7},$')
WRAPPED_IN_TAIL = re.compile(r"^\s{0,40}in \S{1,300}\s*$")
# py-bt's frame line wrapped before its function: "#4 Frame 0x1b7da60, for file /p/sched.py, line 111," + "in run (self=...".
WRAPPED_PYBT_HEAD = re.compile(r"^\s{0,8}#\d{1,6} Frame 0x[0-9a-fA-F]{1,16}, for file [^\n]{1,1000}, line \d{1,7},$")
WRAPPED_PYBT_TAIL = re.compile(r"^\s{0,40}in [^\s(]{1,300}(?: \(|\s*$)")
# A torch C++ backtrace line wrapped before its library: "frame #2: f() + 0xd8 (0x7f.. in" + "/x/lib.so)".
WRAPPED_CXX_HEAD = re.compile(r"^\s{0,8}frame #\d{1,4}: .{1,3000} \(0x[0-9a-fA-F]{1,16} in$")
WRAPPED_CXX_TAIL = re.compile(r"^\s{0,8}/\S{1,1000}\)$")

# -- frames in the shapes other tools and reporters condense them to ----------------
# Each names a file, a line and a function but not which end of the stack comes first:
# the threads read this way are oriented together (see result._orient).
# "hubs/hub.py:365 in run" (oslo's Guru Meditation report; faulthandler's line trimmed by a
# reporter), with a note two spaces on ("conftest.py:31 in teardown    <- the fixture").
LOC_IN_FUNC = re.compile(r"^((?:[A-Za-z]:)?[^\s:\"'()\[\]`]{1,1000}\.pyx?):(\d{1,7}) in ([^\s()]{1,300})(?:\s{2,}.{0,300})?$")
# "wait_for_response [auth_handler.py:193]": Eclipse/PyDev's debug view, innermost first.
BRACKET_FRAME = re.compile(r"^([A-Za-z_<][\w.<>$-]{0,300}) \[((?:[A-Za-z]:)?[^\s\[\]]{1,1000}\.pyx?):(\d{1,7})\]$")
# "sqlalchemy/engine/base.py:execute:916": path, function, line.
# A reporter's condensed stack, outermost first: a location then that line's source, in columns
# ("zarr/core/sync.py:152             wait([future], timeout=None)   # <- blocks forever").
PATH_LINE_SOURCE = re.compile(r"^((?:[A-Za-z]:)?[^\s:]{1,1000}\.pyx?):(\d{1,7})\s{2,40}(\S.{0,1000}?)(?:\s{2,}#.{0,500})?$")
PATH_FUNC_LINE = re.compile(r"^((?:[A-Za-z]:)?[^\s:]{1,1000}\.pyx?): ?([A-Za-z_<][\w.<>]{0,300}): ?(\d{1,7})$")
# Thread headers of those tools: the Guru Meditation report's "------  Thread #1397...  ------",
# PyDev's "Thread-218 - pid2994_seq155", a condensed "Thread [pytest]:".
HASH_THREAD = re.compile(r"^-{3,}\s{1,80}(?:Green )?Thread(?: #?(\d{1,20}))?\s{1,80}-{3,}$")
PYDEV_THREAD = re.compile(r"^([A-Za-z_][\w.-]{0,100}) - pid(\d{1,10})_seq\d{1,10}$")
BRACKET_THREAD = re.compile(r"^Thread \[([^\]\n]{1,100})\]:?$")
# Python 2's gdb py-bt (libpython.py of 2.6/2.7): "#4 file '/usr/lib/python2.6/threading.py', in 'wait'",
# innermost first, "#1 Waiting for a lock (e.g. GIL)" over a lock's acquire.
GDB_PY2_FILE = re.compile(r"^#\d{1,6} file '([^'\n]{1,1000})', in '([^'\n]{1,300})'$")
GDB_PY2_BUILTIN = re.compile(r"^#\d{1,6} <built-in (?:method|function) (\w{1,200})")
GDB_PY2_LOCK_WAIT = re.compile(r"^#\d{1,6} Waiting for a lock \(e\.g\. GIL\)$")
# A py-spy frame quoted in backticks inside prose: "rank 0 stuck at `barrier (torch/x.py:5234)`".
INLINE_PYSPY = re.compile(r"`([A-Za-z_<][\w.<>$-]{0,300} \([^()`\s]{1,1000}\.pyx?:\d{1,7}\))`")
# A location in front of a hand-written chain's call: "service.py:118 Service.shutdown()".
# A link of a chain naming a file and a function without a line: "torch/_inductor/graph.py: codegen".
ARROW_PATH_FUNC = re.compile(r"^((?:[A-Za-z]:)?[^\s:]{1,1000}\.pyx?):\s?([A-Za-z_<][\w.<>]{0,300})$")
ARROW_LOCATION = re.compile(r"^((?:[A-Za-z]:)?[^\s:]{1,1000}\.pyx?):(\d{1,7})\s{1,8}")
# glibc's backtrace_symbols (redis's watchdog, many C/C++ programs' crash and hang logs):
# "/usr/bin/prog *:6379(fn+0x43)[0x450ad3]", "/lib64/libc.so.6(close+0x10)[0x3a0...]",
# "/lib64/libpthread.so.0[0x3a0540f710]"; innermost first.
BACKTRACE_SYMBOLS = re.compile(r"^([^\s()\[\]]{1,400}(?: [^\s()\[\]]{1,40})?)(?:\(([^()\s]{0,400}?)(?:\+0x[0-9a-fA-F]{1,16})?\))?\s{0,4}\[0x[0-9a-fA-F]{1,16}\]$")
# abseil's failure-signal handler (Ray, TensorFlow, XLA): "PC: @     0x7f70d75e000b  (unknown)  raise",
# "    @     0x7f70d77a3420        944  (unknown)"; innermost first.
ABSL_FRAME = re.compile(r"^(?:PC: )?@\s{1,10}0x[0-9a-fA-F]{1,16}\s{1,20}(?:\d{1,12}|\(unknown\))\s{1,20}(.{1,500})$")



# -- Linux kernel stacks (see ``kernel``) ----------------------------------------------
# "[<0>] futex_wait_queue_me+0xbb/0x120" (/proc/PID/stack), " ? wait_woken+0x80/0x80",
# " _nv011231rm+0x39d/0x470 [nvidia]" (a module's frame): name+offset/size, the size
# after a slash being the kernel's own (no user-space unwinder prints it).
KERNEL_FRAME = re.compile(
    r"^(?:\[<[0-9a-fA-F]{1,16}>\][ \t]{1,4})?(?P<unsure>\?[ \t]{1,4})?(?P<function>[A-Za-z_.$][\w.$]{0,200})"
    r"\+0x[0-9a-fA-F]{1,10}/0x[0-9a-fA-F]{1,10}(?:[ \t]{1,4}\[(?P<module>[\w-]{1,64})\])?[ \t]{0,8}$")
# The hung-task watchdog's "INFO: task python3:1234 blocked for more than 120 seconds.", and
# dump_stack's "CPU: 72 PID: 1344368 Comm: nvidia-smi Tainted: ..." (a driver's report).
KERNEL_TASK = re.compile(r"\btask (?P<comm>\S.{0,63}?):(?P<pid>\d{1,10}) blocked for more than \d{1,10} seconds"
                         r"|\bCPU: \d{1,5} (?:UID: \d{1,10} )?PID: (?P<pid2>\d{1,10}) Comm: (?P<comm2>\S{1,64})")
# SysRq's and newer kernels' "task:python3 state:D stack:0 pid:1234 ppid:1 flags:0x00004000"
KERNEL_TASK_FIELDS = re.compile(r"^task:(?P<comm>\S{1,64}(?: \S{1,64}){0,3}?)[ \t]{1,40}state:[A-Za-z][ \t].{0,200}?\bpid:[ \t]{0,10}(?P<pid>\d{1,10})\b")
# Older kernels' row under the task: "python3   D    0 13282  13274 0x00004000"
KERNEL_SYSRQ_ROW = re.compile(r"^\S{1,64}(?: \S{1,64}){0,3}?[ \t]{1,40}[DRSTtZXIW][ \t]{1,20}(?:\d{1,20}[ \t]{1,20})?(?P<pid>\d{1,10})[ \t]{1,20}\d{1,10}[ \t]{1,20}0x[0-9a-fA-F]{1,16}$")
