"""Reading stack dumps as people paste them: py-spy text in all its shapes.

A paste from a bug report, a chat thread or a logbook is rarely the clean
output of ``py-spy dump``. This reader takes any text and keeps what is
stack-shaped: every line is looked at once, by string operations and regexes
with bounded repetition, so the time is linear in the input (a 2 MB paste reads
in well under a second). It accepts:

* ``Process N: CMD`` / ``Python vX`` headers, or none at all;
* thread headers ``Thread 0x7F.. (idle): "MainThread"``, without an id
  (``Thread (idle): "MainThread"``), without a name (``Thread 8283 (idle)``),
  with placeholders (``Thread <PID> (active+gil)``), and the condensed
  ``MainThread (active, 100% CPU):``;
* several thread headers in a row sharing one frame list (a reporter folding
  identical ranks): each is a separate process when they are main threads;
* frames ``func (path:line)``, native ``func (libfoo.so)``, ``(inside path:line)``,
  frames in aligned columns (``func      (path:line)`` or ``func   path:line``),
  text after the closing parenthesis (``<-- BLOCKS FOREVER``), ``a → b → c``
  chains, ``... frame`` abbreviations and frames cut off mid-line;
* line prefixes (quotes, timestamps, ``[rank3]:``, ``name | ``), markdown fences,
  HTML ``<details>``, shell prompts (``$ py-spy dump --pid 42`` names the pid of
  what follows), ``ray stack``'s ``Stack dump for ...`` and ``=== PID n ===``
  separators, ``Arguments:``/``Locals:`` blocks (``Arguments::`` in py-spy 0.2);
* what reporters and tools add on top: captions (``decode pid=951 (MainThread
  active+gil):``), placeholder ids (``Thread N``), rank-labelled lines
  (``DP0,1,2: frame``), a whole dump flattened onto one line, Windows and
  markdown-escaped paths, cluster log prefixes (``stdout F``, ``srun --label``),
  ANSI colours, and pystack's outermost-first threads;
* gdb: ``thread apply all bt`` / ``Switching to thread`` headers, native ``#N 0x.. in f ()``
  frames (C++ names with their own parameter lists, ``from LIB`` wrapped onto the next
  line, placeholder line numbers), ``info threads`` rows, and both forms of ``py-bt``
  (``#N Frame 0x.., for file F, line N, in f`` and ``Traceback (most recent call first):``);
* lldb: ``thread #N, name = '...'`` and ``frame #N: 0x.. lib.so`symbol + off``;
* vLLM's ``VLLM_TRACE_FUNCTION`` log (``Call to f in a.py:1 from g in b.py:2`` /
  ``Return from ...``): the calls still open are the stack;
* function names alone on their lines next to real frames (a stack written by hand);
* py-spy's own failure for a process (``Error: Failed to suspend process``): that pid
  is reported as not dumped;
* a process that printed its own stacks (a signal handler calling a "dumpstacks"
  helper): those frames are dropped from the top of the thread they interrupted;
* a Ctrl+C traceback ending in ``KeyboardInterrupt`` (where the hung main thread was),
  outermost first; other tracebacks are error reports, skipped unless they are the
  paste's only stack (a hung call's own ``TimeoutError`` says where it waited);
* interleaved lines of several processes behind ray / vLLM ``(Worker_TP2 pid=N)``
  prefixes (read per pid), and ``File "..."`` lines a terminal wrapped mid-path;
* PyTorch's NCCL watchdog timeout lines (``[rank2]: ... Watchdog caught collective
  operation timeout: WorkNCCL(SeqNum=4084, OpType=ALLREDUCE, ...)``): no stack, but one
  process per rank waiting in that collective at that sequence number.

Everything else is skipped and counted; the report says how much was skipped
and how confident the reading is. Text with no recognisable frame at all is
the only failure (``InputError``).
"""

from __future__ import annotations

import html
import json
import re
from dataclasses import dataclass, field
from typing import Any

from hangwatch.contract.redact import redact_text
from hangwatch.diagnostics.errors import InputError
from hangwatch.diagnostics.stacks import Frame, ProcessDump, ThreadDump

#: Longer lines are cut before they are looked at (a frame line, even a C++
#: template one, is shorter; a minified blob is not a stack).
MAX_LINE_CHARS = 4096
#: Frames kept per thread (innermost first); py-spy's own default limit is
#: Python's recursion limit, 1000.
MAX_FRAMES = 2048
MAX_THREADS = 4096
MAX_PROCESSES = 4096

_PREFIX = re.compile(
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
# Terminal colours kept by a captured log ("\x1b[1;32m").
_ANSI = re.compile(r"\x1b\[[0-9;?]{0,20}[A-Za-z]")
_INVISIBLE = re.compile("[\u00ad\u200b-\u200f\u202a-\u202e\u2060-\u2064\ufeff]")
#: What reporters write in place of a line number they left out.
_LINE_PLACEHOLDERS = frozenset(("...", "…", "?", "??", "???", "N", "NNN", "X", "XX", "XXX", "xxx", "LINE", "line", "L"))
# py-spy top's banner or table header anywhere in a line: a top table flattened onto one
# line (a digest quoting it) is sampled totals, never frames.
_TOP_BANNER = re.compile(r"%Own\s{1,12}%Total\s{1,12}OwnTime|GIL: \d{1,3}\.\d{1,3}%, Active: \d{1,5}\.\d{1,3}%, Threads: \d")
# pdb's "where": "  /app/train.py(88)step()" per frame, oldest first, the current one
# marked "> " (with "->None" after a return), each followed by "-> source line".
_PDB_FRAME = re.compile(r"^(?:\(Pdb\)\s{1,8})?(?:>\s{1,4})?([^\s()]{1,1000}?\.pyx?|<[\w.-]{1,60}>)\((\d{1,7})\)([^\s()]{1,300})\(\)(?:->.{0,300})?$")
# "Rank 1 (waiting):", "**rank 3**:", "[rank7] py-spy:": a caption naming the rank of the stack below.
_CAPTION_RANK = re.compile(r"(?i)\brank\s{0,2}[#=]?\s{0,2}(\d{1,6})\b")
_ENTITY = re.compile(r"&(?:lt|gt|quot|amp|#\d{1,6}|#x[0-9a-fA-F]{1,6});")
_RANK_PREFIX = re.compile(r"\[(?:rank|RANK|Rank)[ ]?(\d{1,6})\]")
# "DP0,1,2: synchronize (...)" / "DP3..7:  broadcast (...)" / "rank 3: step (...)": a
# reporter folding ranks that share a stack onto one labelled line (one process per label).
_GROUP_LABEL = re.compile(r"^(?:DP|TP|PP|EP|CP|rank|Rank|RANK)[ _]?(\d{1,6})[\d,.~ -]{0,40}:\s+(?=\S)")
_PROCESS = re.compile(r"^Process (\d{1,10}|<\w{1,20}>):? ?(.*)$")
_PYTHON = re.compile(r"^Python (v?\d[\w.+-]{0,30})(?: \((.{0,500})\))?\s*$")
_THREAD = re.compile(
    r'^Thread(?: (0[xX][0-9A-Fa-f]{1,16}|\d{1,12}|<\w{1,20}>|[A-Z]{1,8}|0[xX][0-9A-Fa-f]{0,16}(?:\.\.\.|…)|\.\.\.|…))?:? ?\(([a-z+]{1,16})(?:,[^()\n]{0,60})?\)(?::? ?"([^"\n]{0,200})"?)?:?(.{0,400})$'
)
# A py-spy thread header at the end of a line of prose, glued to it or after a space.
_GLUED_THREAD = re.compile(r'(?<![A-Za-z0-9_."\'/-])Thread (?:0[xX][0-9A-Fa-f]{1,16}|\d{1,12}) \((?:idle|active|active\+gil|gil)\):? "[^"\n]{0,200}"$')
# A header trimmed to the quoted name ('Thread "embed-warmup"'), or a faulthandler-style
# id with the reporter's note in place of "most recent call first"
# ('Thread 0x00000df0 (the anyio worker running the tool body):').
_NAMED_THREAD = re.compile(r'^Thread "([^"\n]{1,200})":?\s*$')
_NOTED_THREAD = re.compile(r"^Thread (0[xX][0-9A-Fa-f]{1,16}|\d{1,12}) \([^()\n]{1,200}\):\s*$")
# Placeholders people write for an id they left out: "Thread N", "Thread 0x7f...".
_PLACEHOLDER_IDENT = re.compile(r"^(?:[A-Z]{1,8}|0[xX][0-9A-Fa-f]{0,16}(?:\.\.\.|…)|\.\.\.|…)$")
# Python 3.14 adds the thread's name: "Current thread 0x00007604707c3780 [python] (most recent call first):".
# The id may be left out of a paste ('Current thread (most recent call first):',
# PyAutoFit#1528) or written as a placeholder ('Thread 0x... (most recent call first):').
_FAULTHANDLER_THREAD = re.compile(
    r"^(Current thread|Thread)(?: (0[xX][0-9A-Fa-f]{1,16}|0[xX][0-9A-Fa-f]{0,16}(?:\.\.\.|…)))?(?: \[([^\]\n]{0,100})\])? \(most recent call first\):?\s*$"
)
# The gap before "line" may be padded: people align a pasted stack's columns
# ('File ".../jax/_src/array.py",    line 642 in _value', PyAutoFit#1528).
# The line may be cut after its number ('File "x/util.py", line 227'): a frame, name unknown.
_FAULTHANDLER_FRAME = re.compile(r'^File "([^"\n]{1,1000})"(?:,[ \t]{1,40}line (\d{1,7})(?: in ([^\s()]{1,300}))?)?\s*$')
_FAULTHANDLER_CUT = re.compile(r'^File "([^"\n]{1,1000})$')
# faulthandler's line with 'File "..."' trimmed to the bare path (a reporter's condensed
# copy): "numpy/_core/multiarray.py, line 11 in <module>", the " in f" sometimes left out.
_BARE_FILE_FRAME = re.compile(r"^([^\s\",()]{1,1000}\.pyx?|<[\w.-]{1,60}(?: [\w.-]{1,60})?>), line (\d{1,7})(?: in ([^\s()]{1,300}))?\s*$")
_STATE = re.compile(r"^(idle|active|active\+gil|gil|running|sleeping|waiting)(?:,.{0,60})?$")
_STACK_DUMP_FOR = re.compile(r"^Stack dump for (.{0,2000})$")
_SEPARATOR = re.compile(r"^(?:=|-|#){2,}\s{0,5}(?:(pid|process|rank|worker|node)\s{0,3}[:=#]?\s{0,3}(\d{1,10}))\b.{0,200}$", re.IGNORECASE)
_PROMPT = re.compile(r"^(?:[$%#]|[\w.@-]{1,80}[:@][^\s$#%]{0,200}[$#%]|\([\w.-]{1,60}\)\s{0,3}[\w.@-]{0,80}[:~][^\s]{0,200}[$#%])\s")
# The command that took the dump names its pid: py-spy, pystack, and the native stack tools
# (pstack/gstack PID, eu-stack -p PID, gdb -p PID ... --batch, "(gdb) attach PID").
_PYSPY_PID = re.compile(
    r"py-spy\s+dump\b.{0,200}?(?:--pid|-p)[ =](\d{1,10})|pystack\s+remote\b(?:\s+-{1,2}[\w-]{1,30})*\s+(\d{1,10})"
    r"|\b[pg]stack\s+(\d{2,10})\b|\beu-stack\b.{0,100}?\s(?:-p|--pid)[ =](\d{2,10})\b"
    r"|\bgdb\b.{0,200}?(?:\s(?:-p|--pid)[ =]?|\sattach\s+)(\d{2,10})\b")  # a pid of 2+ digits, not "attach 3 processes"
_PID_INTRO = re.compile(r"\b(?:pid|PID|Pid|process|Process)\s{0,2}[:=#]?\s{0,2}(\d{2,10})\s{0,3}[:)]?\s{0,3}(?:=+|-+)?\s{0,3}:?\s{0,3}$")
_HTML = re.compile(r"^</?(?:details|summary|pre|code|br|p|div|b|i|em|strong|sub|sup|hr)\b[^>]{0,200}>", re.IGNORECASE)
# py-spy 0.2-0.3 printed "Arguments::" / "Locals::" (two colons); newer ones one.
_LOCALS_HEAD = re.compile(r"^(Arguments|Locals)::?\s*$")
_IDENT = re.compile(r"^[\w.<>$\[\]-]{1,300}$")
_PY_EXT = (".py", ".pyx", ".pyi", ".pyc")
_NATIVE_PATH = re.compile(r"(\.so(\.\d{1,6}){0,4}|\.dylib|\.dll|\.pyd|\.(c|cc|cpp|cxx|h|hpp|cu|cuh|rs|S)|^python\d[\d.]{0,6}|^\[\w{1,20}\])$")
_WS = re.compile(r"\s")
# A backslash that separates a path component not led by "_": a Windows path.
_WINDOWS_SEP = re.compile(r"\\(?!_)")
_HEX = re.compile(r"^0[xX][0-9a-fA-F]{1,16}$")
_FLAT_FRAME = re.compile(
    r'(?P<proc>\bProcess \d{1,10}:)'
    r'|(?P<thread>\bThread (?:0[xX][0-9A-Fa-f]{1,16} |\d{1,12} |<\w{1,20}> )?\((?:idle|active|active\+gil|gil)\):? ?(?:"[^"\n]{0,200}")?)'
    r'|(?<![\w(<>.$\[\]-])[\w<>.$\[\]-]{1,300} \([^()\s]{1,500}\)'
)
# pystack ("pystack remote PID"): outermost frame first, source lines under the frames.
_PYSTACK_THREAD = re.compile(r"^Traceback for thread (\d{1,12}) \(([^()\n]{0,200})\)(?: \[([^\]\n]{0,100})\])? \(most recent call last\):?\s*$")
_PYSTACK_FRAME = re.compile(r'^\((Python|C)\) File "([^"\n]{1,1000})", line (\d{1,7}), in (\S.{0,1000}?)(?: \(([^()\s]{1,300})\))?\s*$')
_CUT_WITH_LINE = re.compile(r"^([\w./<>-]{1,500}\.pyx?):(\d{1,7})$")
# "decode pid=951 (MainThread active+gil):": a label, the pid, then thread name and state.
_LABELLED_HEADER = re.compile(r"\bpid[=: ]{1,2}(\d{1,10})\b")
# gdb: "#3 Frame 0x7fa3..., for file /p/queues.py, line 131, in get (self=...": py-bt of
# Python 2 / older gdb, one line per frame (the locals run on, often wrapped and cut).
_GDB_PYFRAME = re.compile(r"^#\d{1,6} Frame 0x[0-9a-fA-F]{1,16}, for file (.{1,1000}?), line (\d{1,7}), in ([^\s(]{1,300})")
# gdb bt: "#0  0x00007f.. in poll () at ../sysdeps/x.S:81" / "#2  c10::Foo::bar (this=...) at f.cpp:53"
# / "#5  0x.. in ?? () from /lib/libc.so.6": innermost first, like py-spy (see _gdb_call).
_GDB_BUILTIN = re.compile(r"^<built-in method (\w{1,200}) of ")
# Lines gdb's py-bt prints in place of a frame: the thread waits to take the GIL, or
# runs the garbage collector. Either means the frames around it are py-bt's.
_PYBT_MARKERS = ("Waiting for the GIL", "Garbage-collecting")
# A call chain written out by hand, outermost first, one call per line:
#   DPEngineCoreProc.run_busy_loop
#     -> MultiprocExecutor.get_response
#     -> shm_broadcast.MessageQueue.dequeue      (vllm-ascend#13648)
_ARROW = ("-> ", "→ ", "=> ")
_ARROW_NAME = re.compile(r"^[A-Za-z_<][\w.<>:~$-]{0,300}$")
# PaddlePaddle's "C++ Traceback (most recent call last):" rows: "8   ncclAllReduce".
_NUMBERED_CXX_HEAD = re.compile(r"^C\+\+ Traceback \(most recent call last\):?\s*$")
_NUMBERED_CXX = re.compile(r"^(\d{1,4})\s{1,8}([A-Za-z_~(<].{0,3000})$")
#: The frame standing for py-bt's "Waiting for the GIL" (signatures match it by name).
GIL_WAIT = "<waiting for the GIL>"
# gdb thread headers: "Thread 1 (Thread 0x7f38.. (LWP 237)):" (thread apply all) and
# "[Switching to thread 12 (Thread 0x7f9d.. (LWP 30756))]"; gdb's thread 1 is the main thread.
# gdb names the thread when it has a name: 'Thread 7 (Thread 0x7f93.. (LWP 3271135) "executionLoop"):'.
_GDB_THREAD = re.compile(r'^\[?(?:Thread|Switching to thread) (\d{1,7}) \(Thread 0x[0-9a-fA-F]{1,16} \(LWP (\d{1,10})\)(?: "([^"\n]{0,100})")?\)')
# Without libthread_db (musl, a container) gdb shows "Thread 2 (LWP 3638147):" (py-spy#565);
# where it stopped a program: 'Thread 1 "python" received signal SIGINT, Interrupt.',
# followed by the stop location, which the "#0" frame of a bt repeats (pytorch/xla#945).
_GDB_THREAD_LWP = re.compile(r'^\[?(?:Thread|Switching to thread) (\d{1,7}) \(LWP (\d{1,10})\)(?: "([^"\n]{0,100})")?\)?\]?:?$')
_GDB_STOPPED = re.compile(r'^Thread (\d{1,7}) "([^"\n]{0,100})" received signal SIG[A-Z0-9]{1,10}\b')
# gdb attaching to a live process (`gdb -p PID ... --batch`) prints its libthread_db preamble,
# then where the attached thread, the process's own LWP, i.e. gdb's thread 1, the main thread,
# stopped: a bare "0x.. in f () from lib" with no "#N", which that thread's bt repeats as "#0"
# (Triton-distributed#81).
_GDB_ATTACHED = re.compile(r"^(?:\[Thread debugging using libthread_db enabled\]|Using host libthread_db library )")
# gdb bt, any frame: "#N  " then an optional "0x.. in ", then the call. The call itself
# (a C++ name with its own parameter list, "from" or "at" wrapped onto the next line, a
# placeholder line number) is taken apart by _gdb_call.
_GDB_NUMBERED = re.compile(r"^#\d{1,6}\s{1,4}(0x[0-9a-fA-F]{1,16} in )?")
# A numbered frame with no parameter list, "NAME from WHERE[:LINE]", as some stack tools
# print mixed stacks ("#56 forward from /srv/app/models/llama.py:2083", sglang#10124):
# a Python frame when WHERE is a Python file, else a native one in that library.
_NUMBERED_FROM = re.compile(r"^([A-Za-z_<][\w.<>$:~-]{0,300}) from (\S{1,1000}?)(?::(\d{1,7}))?$")
# gdb "info threads": "* 1    Thread 0x7fc7.. (LWP 52422) "python" select_poll_poll () at x.c:219":
# one line per thread, its innermost frame at the end; gdb's thread 1 is the main thread.
# The target id is "Thread 0x.. (LWP N)" with libthread_db, a bare "LWP N" without it
# (a process attached in a container, pytorch#39855).
_GDB_INFO_THREAD = re.compile(r'^\*?\s{0,4}(\d{1,7})\s{1,12}(?:Thread 0x[0-9a-fA-F]{1,16} \(LWP (\d{1,10})\)|LWP (\d{1,10}))(?: "([^"\n]{0,100})")?\s{1,12}(\S.{0,3000})$')
# lldb "bt": "* thread #1, name = 'python', stop reason = signal SIGSTOP" and
# "  frame #0: 0x00007fb0.. libc.so.6`syscall + 29" (lldb's thread #1 is the main thread).
_LLDB_THREAD = re.compile(r"^\*?\s{0,4}thread #(\d{1,7})(?:: tid = (\d{1,10}))?(?:.{0,200}?\bname = '([^'\n]{0,100})')?")
_LLDB_FRAME = re.compile(r"^\*?\s{0,4}frame #\d{1,6}: (?:0[xX][0-9a-fA-F]{1,16} )?([^`\s]{1,500})`(.{1,3000})$")
_LLDB_OFFSET = re.compile(r" \+ \d{1,12}$")
# vLLM's VLLM_TRACE_FUNCTION log: "<time> Call to f in /p/a.py:93 from g in /p/b.py:101" and
# "Return from f in /p/a.py:95 to g in /p/b.py:101". The calls still open at the end of
# the log are the stack the process hung in.
_TRACE_CALL = re.compile(r"^(Call to|Return from) (\S{1,300}) in (\S{1,1000}?):(\d{1,7}) (?:from|to) (\S{1,300}) in (\S{1,1000}?):(\d{1,7})\s*$")
# py-spy's own failure for a process it could not read ("Error: Failed to suspend process",
# "Reason: EPERM: Operation not permitted"): that process was not dumped, often the culprit.
_PYSPY_ERROR = re.compile(r"^(?:Error|error|Reason):\s{0,3}(.{1,200})$")
_PYSPY_FAILURES = ("failed to suspend", "permission denied", "operation not permitted", "eperm", "failed to copy py_version",
                   "failed to find python", "no such process", "timed out", "failed to get process", "ptrace")
# A function name written alone on its line ("cuStreamSynchronize", "process_batch_result"),
# maybe with a note in parentheses ("_local_scalar_dense_cuda (tensor.item())"): a frame when
# it sits next to real frames, as people write a stack by hand. Code-shaped only: an
# underscore, a "::" or a camelCase step, so prose words are not taken.
_BARE_NAME = re.compile(r"^([A-Za-z_][\w:<>~]{3,200})(?:\s{1,8}\([^\n]{0,200}\))?$")
_CAMEL = re.compile(r"[a-z][A-Z]")
# A process printing its own stacks: the printing code, then the signal handler that called it.
_DUMPER = re.compile(r"(?i)^_{0,2}(dump_?(all_?)?(stacks?|threads?|traceback(_later)?)|print_?(all_?)?stacks?|format_stack|extract_stack|print_stack|walk_stack)$")
_HANDLER = re.compile(r"(?i)(handler|^_?on_?sig|^handle_?sig|^_?sig(int|term|usr\d?)_?)")
# gdb py-bt (python-gdb.py), newer: "Traceback (most recent call first):" then
# '  File "/p/threading.py", line 295, in wait' with the source line under it.
_RECENT_FIRST = re.compile(r"^Traceback \(most recent call (first|last)\):?\s*$")
# py-spy top and record print sampled totals, not one stack per thread: a top row
# ("40.00%  80.00%  11.20s  19.73s  mapstar (multiprocessing/pool.py:44)"), its header and
# banner lines, record's own "py-spy> " messages (py-spy#329, #737, #610). Their rows look
# like frames; read as a stack they would name a busy function as the hung thread.
_PROFILE_LINE = re.compile(
    r"^(?:-?\d{1,7}\.\d{1,3}%\s{1,12}-?\d{1,7}\.\d{1,3}%\s|%Own\s{1,12}%Total\b|Collecting samples from '"
    r"|Total Samples \d|GIL: \d{1,3}\.\d{1,3}%, Active: |py-spy> )"
)
# A thread's banner above its traceback-style stack (outermost first): pytest-timeout's
# "~~~~ Stack of MainThread (1399...) ~~~~" and the hanging_threads package's
# '---------Thread 1332... "MainThread" hangs ---------'. Without it the stacks of
# every thread ran together as one cut traceback (ptvsd#1988, pytorch#193951).
_BANNER_THREAD = re.compile(
    r'^[~=-]{3,}\s{0,4}(?:Stack of (\S.{0,200}?) \((\d{1,20})\)|Thread (\d{1,20}) "([^"\n]{0,200})" hangs)\s{0,4}[~=-]{3,}$'
)
# A stack printer may put the frame's source on the same line after two spaces
# ('File: "x.py", line 9, in run  session.run(out)', tensorflow#5289).
_TRACEBACK_FRAME = re.compile(r'^File:? "([^"\n]{1,1000})",[ \t]{1,40}line (\d{1,7}),[ \t]{1,40}in (\S{1,300})(?:\s{2}.{0,3000})?\s*$')
# IPython / Jupyter tracebacks (ultralytics#6206): "Empty      Traceback (most recent call last)",
# then frames as "File C:\\...\\dataloader.py:1132, in Class.method(self, timeout)" (IPython 8),
# "~/lib/python3.7/.../dataloader.py in _try_get_data(self, timeout)" (older IPython),
# "Cell In[14], line 1" / "<ipython-input-5-2a1c..> in <module>" for notebook cells, each
# followed by numbered source lines ("   1131 try:", "-> 1132     data = ...", "----> 1 x").
_IPY_TB_START = re.compile(r"^[A-Za-z_][\w.]{0,200}\s{2,}Traceback \(most recent call last\)\s*$")
_IPY_FRAME = re.compile(r"^File (\S.{0,1000}?):(\d{1,7}), in ([^\s(]{1,300})(?:\(.{0,3000}\)?)?\s*$")
_IPY_OLD_FRAME = re.compile(r"^(\S{1,1000}\.pyx?) in ([^\s(]{1,300})(?:\(.{0,3000}\)?)?\s*$")
_IPY_CELL = re.compile(r"^(?:Cell In ?\[(\d{1,7})\], line (\d{1,7})(?:, in ([^\s(]{1,300}).{0,3000})?|<ipython-input-(\d{1,7})-\w{0,40}> in ([^\s(]{1,300}).{0,3000})\s*$")
# gdb frames quoted inline in prose (pytorch#15638: "it hangs at the function call of
# `c10d::TCPStore::TCPStore(std::string const&, ...) ()`, `c10d::tcputil::connect(...) ()`"):
# a backticked span in gdb's form for a frame without debug info, "name(args) ()" with an
# optional " from LIB" / " at FILE:LINE".
_INLINE_GDB = re.compile(r"`([^`\n]{3,3000}?\) \(\)(?: (?:from|at) [^`\s]{1,1000})?)`")
_IPY_SOURCE = re.compile(r"^(?:-{0,12}>\s{0,4})?\d{1,7}(?:\s|$)")
# The caption a stack-dumping helper prints before each thread's traceback.format_stack
# ("# Thread: MainThread(140735)", "Thread worker-1 (1234):").
_CAPTION_THREAD = re.compile(r"(?i)^[#=*\s-]{0,6}thread\b[:#\s]{0,3}[\"']?([A-Za-z_][\w.-]{0,60})")
# The line that ends a Python traceback: "KeyboardInterrupt", "RuntimeError: ...".
_EXCEPTION_LINE = re.compile(r"^([A-Za-z_][\w.]{0,200}(?:Error|Exception|Interrupt|Exit|Warning|Timeout))\b:?")
# PyTorch's NCCL watchdog on a timeout: "[rank2]:[E ProcessGroupNCCL.cpp:563] [Rank 2] Watchdog
# caught collective operation timeout: WorkNCCL(SeqNum=4084, OpType=ALLREDUCE, ...)": no stack,
# but it says which collective each rank waited in, and at which sequence number.
# One frame of the C++ backtrace torch prints under an error ("Exception raised from doWait
# at TCPStore.cpp:550 (most recent call first):"), innermost first:
# "frame #2: c10d::TCPStore::doGet(std::string const&) + 0x32 (0x7f60.. in /x/libtorch_cpu.so)".
_TORCH_CXX_FRAME = re.compile(r"^frame #(\d{1,4}): (\S.{0,3000}?) \+ 0x[0-9a-fA-F]{1,16}(?: \((?:0x[0-9a-fA-F]{0,16})?(?: in ?(\S{0,1000}?))?\)?)?$")
_WATCHDOG = re.compile(r"WorkNCCL\(SeqNum=(\d{1,12}), OpType=([A-Za-z_]{1,40})")
# The header above one of those backtraces: "Exception raised from run at /p/ProcessGroupNCCL.cpp:2063
# (most recent call first):" names the function that raised (cache-dit#761).
_RAISED_FROM = re.compile(r"^Exception raised from (\S{1,300}) at (\S{1,1000}?):(\d{1,7})\b")
# Where the NCCL watchdog thread raises when it finds a collective timed out or failed: a
# backtrace raised there is that thread's own (not the rank's hung stack), and it says that
# a collective never completed.
_NCCL_WATCHDOG_RAISERS = frozenset(("run", "ncclCommWatchdog", "watchdogHandler", "checkTimeout", "runLoop",
                                    "heartbeatMonitor", "checkAndSetException", "handleException"))
# torch's fatal-signal handler (TORCH_SHOW_CPP_STACKTRACES / c10::FatalSignalHandler), one
# block per thread of the process: "SIGABRT(6), PID: 15837, Thread 15853: " then that
# thread's "frame #k: fn + 0x.. (0x.. in lib)" lines (pytorch#94003, pytorch#99218).
_SHM_WAIT = "No available shared memory broadcast block found"
_SIGNAL_THREAD = re.compile(r"^(SIG[A-Z0-9]{2,8})\((\d{1,3})\), PID: (\d{1,10}), Thread (\d{1,10}):?$")
# Horovod's stall inspector, one stalled tensor per entry (several on the warning's line in
# older logs): "allreduce.conv1.weight [ready ranks: 0, 7, 3]" (horovod#364), TensorFlow op
# names "HorovodBroadcast_w_0 [missing ranks: 0]" (horovod#534), Keras names with "/"
# (horovod#457). Ready ranks wait in that collective; missing ones never submitted it.
_HOROVOD_STALL = re.compile(r"(?:^|[\s,:])([^\s\[\],]{1,300}?)\s{0,4}\[(ready|missing) ranks:\s{0,4}([\d,\s]{0,4000})\]")
_HOROVOD_OP = re.compile(r"(?i)^(allreduce|allgather|broadcast|alltoall|reducescatter|adasum)\.|horovod_?(allreduce|allgather|broadcast|alltoall|reducescatter)")
_PID_IN_PREFIX = re.compile(r"\bpid=(\d{1,10})\b")
# A library name the paste cut: "cudaLaunchKernel (libcudart.so…)".
_NATIVE_CUT = re.compile(r"\.(so|dylib|dll)(\.\d{0,6}){0,4}$")
_ARROWS = (" → ", " -> ", " ⇒ ", " => ")
_LEFT_NOTES = ("<-", "←", "⟵", "#", "//", "<==")


@dataclass
class ParseReport:
    """What ``read_text`` understood of a paste, for the verdict's caveats."""

    processes: tuple[ProcessDump, ...] = ()
    lines: int = 0
    frames: int = 0
    skipped: int = 0
    skipped_examples: list[str] = field(default_factory=list)
    thread_headers: int = 0
    process_headers: int = 0
    headerless_threads: int = 0
    abbreviated: int = 0
    cut_frames: int = 0
    bare_frames: int = 0
    cut_lines: int = 0
    dropped_frames: int = 0
    pid_inferred: int = 0
    watchdog_only: int = 0
    #: what faulthandler said above the stacks ('Fatal Python error: Segmentation fault'):
    #: the dump was printed as the process died, not taken from a live hang
    fatal_error: str = ""
    #: lines of py-spy top/record output (sampled totals, collapsed stacks): never frames
    profile_lines: int = 0
    #: stacks read from an exception's traceback (the paste had no other stack)
    error_tracebacks: int = 0
    ranks: dict[int, int] = field(default_factory=dict)
    #: pid -> py-spy's error, for processes the paste shows py-spy failing on.
    undumped: dict[int, str] = field(default_factory=dict)
    #: Horovod's stall warning: (tensor, the ranks that never submitted it)
    horovod_missing: tuple[str, tuple[int, ...]] | None = None
    #: the signal torch's fatal-signal handler printed the threads at ('SIGABRT(6)')
    signal_dump: str = ""
    #: only the NCCL watchdog's own error backtrace was pasted (it raised on a collective)
    watchdog_raised: bool = False
    #: processes known only from vLLM's "No available shared memory broadcast block found"
    #: lines, and the most such lines one of them logged (one a minute by default)
    shm_wait_only: int = 0
    shm_wait_minutes: int = 0

    @property
    def confidence(self) -> str:
        """high: py-spy's own shape; medium: headers missing or text skipped;
        low: frames without any header, or more skipped text than frames."""
        if not self.frames:
            return "none"
        if self.headerless_threads and not self.thread_headers:
            return "low"
        if self.frames < 3 or self.skipped > 2 * self.frames:
            return "low"
        if (not self.process_headers or self.headerless_threads or self.skipped or self.cut_frames or self.abbreviated
                or self.bare_frames):
            return "medium"
        return "high"

    def notes(self) -> list[str]:
        out = []
        if not self.process_headers:
            out.append("no 'Process N:' header" + (f" (pid taken from the main thread's id for {self.pid_inferred})" if self.pid_inferred else ""))
        if self.headerless_threads:
            out.append(f"{self.headerless_threads} frame list(s) without a 'Thread' header")
        if self.abbreviated:
            out.append(f"{self.abbreviated} elided or abbreviated line(s) ('...')")
        if self.cut_frames:
            out.append(f"{self.cut_frames} frame(s) cut off mid-line")
        if self.bare_frames:
            out.append(f"{self.bare_frames} frame(s) given by name only (no file or library)")
        if self.skipped:
            out.append(f"skipped {self.skipped} line(s) that are not stack text")
        if self.undumped:
            out.append(f"{len(self.undumped)} process(es) py-spy could not dump ({'; '.join(f'{p}: {r}' for p, r in list(self.undumped.items())[:3])})")
        if self.error_tracebacks:
            out.append(f"{self.error_tracebacks} stack(s) read from an exception's traceback (where that thread was when the "
                       "error was raised: for a timeout, where it waited; not a live dump)")
        if self.fatal_error:
            out.append(f"printed at 'Fatal Python error: {self.fatal_error}': " + (
                "SIGABRT (a kill -ABRT of a hung process, or an abort()): each thread is where it was then"
                if self.fatal_error.strip().lower().startswith("aborted") else
                "the process crashed; the stacks show where each thread was at the crash, which need not be a hang"))
        if self.shm_wait_only:
            out.append(f"{self.shm_wait_only} process(es) known only from vLLM's 'No available shared memory broadcast "
                       f"block found' lines (up to {self.shm_wait_minutes} of them, one per wait of VLLM_RINGBUFFER_WARNING_INTERVAL, "
                       "60 s by default): it waits on its shared-memory queue for the other side (the workers, or the "
                       "engine core); no stack: dump the workers (py-spy dump --pid) to see where they are")
        if self.signal_dump:
            out.append(f"printed by torch's fatal-signal handler at {self.signal_dump}: each thread is where it was when the "
                       "signal came (a kill of a hung process, or an abort after an error)")
        if self.watchdog_raised:
            out.append("only the NCCL watchdog's own error backtrace was pasted: it raised because a collective timed out "
                       "or failed; no rank's stack shows where each one waited")
        if self.profile_lines:
            out.append(f"ignored {self.profile_lines} line(s) of py-spy top/record output (sampled totals, not a thread's stack)")
        if self.horovod_missing is not None:
            tensor, missing = self.horovod_missing
            out.append(f"Horovod's stall warning: rank {', '.join(map(str, missing[:16]))} never submitted {tensor[:120]}: look there first")
        if self.watchdog_only:
            out.append(f"{self.watchdog_only} rank(s) known only from NCCL watchdog timeout lines or Horovod stall warnings (no stack: the collective and its sequence number or tensor)")
        if self.cut_lines:
            out.append(f"{self.cut_lines} line(s) over {MAX_LINE_CHARS} characters cut")
        if self.dropped_frames:
            out.append(f"{self.dropped_frames} frame(s) beyond {MAX_FRAMES} per thread dropped")
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "confidence": self.confidence,
            "processes": len(self.processes),
            "threads": sum(len(p.threads) for p in self.processes),
            "frames": self.frames,
            "lines": self.lines,
            "skipped_lines": self.skipped,
            "skipped_examples": list(self.skipped_examples),
            "notes": self.notes(),
        }


def parse_location(inner: str) -> tuple[str, int | None, bool] | None:
    """``path:line`` / ``lib.so`` / ``<string>:1`` inside parentheses:
    (file, line, native), or None when it does not look like a code location."""
    inner = inner.strip()
    if "\\_" in inner and not _WINDOWS_SEP.search(inner):
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
    elif sep and tail in _LINE_PLACEHOLDERS and head.endswith(_PY_EXT):
        path = head  # "barrier (torch/distributed/distributed_c10d.py:...)": the line left out
    if not path or len(path) > 1000:
        return None
    if path[0] == "<" and path[-1] == ">":
        return path, line, False
    if _WS.search(path) or "(" in path or ")" in path:
        return None
    if path.endswith(_PY_EXT):
        return path, line, False
    if _NATIVE_PATH.search(path):
        return path, line, True
    if path[-1:] == "…" or path[-3:] == "...":
        if _NATIVE_CUT.search(path.rstrip(".…")):
            return path.rstrip(".…"), None, True
    if path in ("?", "???", "unknown"):
        return "?", None, True
    if line is not None and _IDENT.match(path) and path[0] not in "0123456789":
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
        fn = head.replace("\\_", "_") + sep + (tail if _WINDOWS_SEP.search(tail) else tail.replace("\\_", "_"))
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
    if not _WS.search(fn):
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
        mb = _BARE_FILE_FRAME.match(s)
        if mb:
            return [Frame(mb.group(3) or "?", mb.group(1).replace("\\", "/"), int(mb.group(2)))], False, False
    fn_text, abbreviated = _clean_function(s)
    if not fn_text:
        return None
    # "a → b → c": a chain written on one line, innermost first.
    for arrow in _ARROWS:
        if arrow in fn_text:
            parts = [p.strip() for p in fn_text.split(arrow)]
            first = _single_frame(parts[0])
            chain: list[Frame] = []
            if first is not None:
                chain.append(first[0])
            elif _IDENT.match(parts[0]):
                chain.append(Frame(parts[0], "?"))
            else:
                return None
            for p in parts[1:]:
                one = _single_frame(p)
                if one is not None:
                    chain.append(one[0])
                elif _IDENT.match(p):
                    chain.append(Frame(p, "?"))
                else:
                    break
            if len(chain) >= 2 or first is not None:
                return chain, abbreviated, False
            return None
    one = _single_frame(fn_text)
    if one is not None:
        return [one[0]], abbreviated, one[1]
    return None


def _faulthandler_frame(s: str) -> tuple[list[Frame], bool, bool] | None:
    """``File "path", line N in func`` (faulthandler: innermost first, like py-spy).
    A traceback's ``line N, in func`` (outermost first) is not a stack dump."""
    m = _FAULTHANDLER_FRAME.match(s)
    if m:
        path, line, fn = m.group(1).replace("\\", "/"), m.group(2), m.group(3)
        if line is None:
            return [Frame("?", path, None)], False, True
        if fn is None:  # cut after the line number
            return [Frame("?", path, int(line))], False, True
        return [Frame(fn, path, int(line))], False, False
    m = _FAULTHANDLER_CUT.match(s)
    if m:
        return [Frame("?", m.group(1) + "…", None)], False, True
    return None


def _single_frame(s: str) -> tuple[Frame, bool] | None:
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
            if path == "?" and not _HEX.match(fn):
                native = True
            if _function_ok(fn, native):
                return Frame(fn, path, None if native and not path.endswith((".c", ".cc", ".cpp", ".cu", ".rs", ".h")) else line, native), False
            return None
        i = s.find("(", j + 1)
    if i > 0 and s[i - 1] in " \t" and s.find(")", i) == -1:
        # Cut mid-line: "replay (torch/cuda/" or "_forward_raw (". py-spy puts a space
        # before the parenthesis; a call in quoted code ("rank_zero_warn(") has none.
        fn, rest = s[:i].strip(), s[i + 1 :].strip()
        if fn and _IDENT.match(fn) and (not rest or re.match(r"^[\w./<>-]{1,500}:?\d{0,7}$", rest)):
            if rest and not _WS.search(rest):
                rest = rest.rstrip(":").replace("\\", "/")
                whole = _CUT_WITH_LINE.match(rest)
                if whole:  # "f (pkg/mod.py:1242": only ")" lost, the location is whole
                    return Frame(fn, whole.group(1), int(whole.group(2))), True
                if _NATIVE_PATH.search(rest):  # "cuEventSynchronize (libcuda.so.5": only ")" lost
                    return Frame(fn, rest, None, native=True), True
                return Frame(fn, rest + "…", None), True
            return Frame(fn, "?", None), True
        return None
    # Columns without parentheses: "dequeue      vllm/x/shm_broadcast.py:779".
    parts = s.split()
    if len(parts) == 2 and _IDENT.match(parts[0]):
        loc = parse_location(parts[1])
        if loc is not None and not loc[2] and loc[1] is not None and (loc[0].endswith(_PY_EXT) or "/" in loc[0]):
            return Frame(parts[0], loc[0], loc[1]), False
    return None


def split_flattened(s: str) -> list[str] | None:
    """A dump whose line breaks were lost (a web page or a digest flattened it):
    'Process 7: X Python v3.12 (/p) Thread 7 (active+gil): "MainThread" f (a.py:1) g (b.py:2) h (c...'.
    Two frames or more on one line that is not a frame chain come back as one
    line per header and frame, in order; else None. Linear: one left-to-right scan."""
    tokens: list[tuple[int, int, str]] = []
    frames = 0
    for m in _FLAT_FRAME.finditer(s):
        text = m.group(0)
        if m.group("proc"):
            tokens.append((m.start(), m.end(), "proc"))
        elif m.group("thread"):
            tokens.append((m.start(), m.end(), "thread"))
        elif _single_frame(text) is not None:
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
    if tail and "(" in tail and _single_frame(tail) is not None:  # the last frame, cut: "h (c..."
        out.append("    " + tail)
    return out


def _cxx_name(name: str) -> str:
    """A demangled C++ name without its parameter list and qualifiers:
    "at::native::f(at::Tensor const&)::{lambda()#1}::operator()() const" -> "at::native::f".
    Parentheses inside template arguments (<...>) or lambdas ({...}) are kept; one pass."""
    depth = 0
    for i, ch in enumerate(name):
        if ch in "<{":
            depth += 1
        elif ch in ">}" and depth:
            depth -= 1
        elif ch == "(" and depth == 0 and name.startswith("(anonymous namespace)", i):
            depth += 1  # "c10d::ops::(anonymous namespace)::recv_CUDA(...)": part of the name
        elif ch == ")" and depth and name.endswith("(anonymous namespace)", 0, i + 1):
            depth -= 1
        elif ch == "(" and depth == 0 and i > 0 and not name.endswith("operator", 0, i):
            return name[:i].strip()
    return name.strip()


def _gdb_call(text: str, addressed: bool) -> Frame | None:
    """A gdb frame after its "#N  0x.. in " prefix: "poll () at x.S:81", "ns::f(int) () from
    /lib/x.so", "c10::Foo::bar (this=...) at f.cpp:53", "g () at init.cc:XXX" (a re-typed
    placeholder line), or cut anywhere ("ccl_comm::allgather(", "c10d::abortComm").
    ``addressed``: it had "0x.. in ", so a name alone (cut before its arguments) is a frame."""
    where = "?"
    for mark in (") from ", ") at "):
        i = text.rfind(mark)
        if i != -1 and not _WS.search(text[i + len(mark):].strip()):
            where = text[i + len(mark):].strip()
            if where.startswith("target:"):
                where = where[7:]  # gdb reading the target's files remotely or in a container
            if mark == ") at ":
                where = where.split(":", 1)[0]  # "f.cpp:53", "init.cc:XXX", "futex.cc:217:18"
            text = text[: i + 1]
            break
    text = text.strip()
    if text.endswith(")"):
        # The argument list is the last balanced "(...)" (walked back once).
        depth = 0
        for i in range(len(text) - 1, -1, -1):
            ch = text[i]
            if ch == ")":
                depth += 1
            elif ch == "(":
                depth -= 1
                if depth == 0:
                    text = text[:i]
                    break
        else:
            return None
    elif not addressed and where == "?":
        return None
    name = _cxx_name(text)
    if not name or len(name) > 2000 or (_WS.search(name) and "::" not in name and "<" not in name):
        return None
    return Frame("?" if name == "??" else name, where, None, native=True)


def _ipython_frame(s: str) -> Frame | None:
    """One frame header of an IPython traceback (see _IPY_FRAME), else None."""
    m = _IPY_FRAME.match(s)
    if m is not None:
        return Frame(m.group(3), m.group(1).replace("\\", "/"), int(m.group(2)))
    m = _IPY_CELL.match(s)
    if m is not None:
        if m.group(1) is not None:
            return Frame(m.group(3) or "<module>", f"<ipython-input-{m.group(1)}>", int(m.group(2)))
        return Frame(m.group(5), f"<ipython-input-{m.group(4)}>", None)
    m = _IPY_OLD_FRAME.match(s)
    if m is not None:
        return Frame(m.group(2), m.group(1).replace("\\", "/"), None)
    return None


def _numbered_from(text: str) -> Frame | None:
    """'forward from /p/llama.py:2083' / 'poll from /lib/libc.so.6' (see _NUMBERED_FROM)."""
    m = _NUMBERED_FROM.match(text)
    if m is None:
        return None
    name, where, line = m.group(1), m.group(2).replace("\\", "/"), m.group(3)
    if where.endswith(_PY_EXT):
        return Frame(name, where, int(line) if line else None)
    if where.startswith(":") and where[1:].isdigit():
        return Frame(name, "?", None, native=True)  # "from :0": no file known
    if _NATIVE_PATH.search(where.rsplit("/", 1)[-1]) or _NATIVE_CUT.search(where):
        return Frame(name, where, None, native=True)
    return None  # "#12 Merge from upstream/main": a numbered list, not a frame


def _bare_name(s: str) -> str | None:
    """The function of a line that is only a code-shaped name (see _BARE_NAME), else None."""
    m = _BARE_NAME.match(s)
    if m is None:
        return None
    name = m.group(1)
    if "_" in name or "::" in name or _CAMEL.search(name):
        return name
    return None


# A reporter's note after a name, two spaces or more away: "cuStreamSynchronize   <- never returns".
_BARE_NOTE = re.compile(r"\s{2,}(?:<-|←|⟵|<==|#|//)(?:\s.{0,300})?$")


def _bare_frame_name(s: str) -> str | None:
    """A name alone on its line (see _bare_name), also with a note after it or written as a
    demangled C++ signature ("THPStorage_newSharedCuda(...)::{lambda(void*)#1}::_FUN")."""
    s = _BARE_NOTE.sub("", s)
    name = _bare_name(s)
    if name is None and "::" in s and "(" in s and " " not in s:
        name = _bare_name(_cxx_name(s))
    return name


def _names_stack(run: list[Frame]) -> bool:
    """Names alone on their lines that read as a native stack by themselves: four or more,
    at least one a C++ name ("ns::f") and half of them C++ or camelCase API names
    ("cuStreamSynchronize"), so a fenced list of config keys, Python names (snake_case) or
    class names ("LlamaForCausalLM") is not taken."""
    if len(run) < 4 or not any("::" in f.function for f in run):
        return False
    native = sum(1 for f in run if "::" in f.function or _CAMEL.search(f.function))
    return native * 2 >= len(run)


def _arrow_name(text: str) -> str | None:
    """The call in one link of a hand-written chain: "model_runner._dummy_run(uniform_decode=True)"
    -> "model_runner._dummy_run"; "wait / sched_yield" (either) -> "wait"."""
    text = text.strip().split(" / ", 1)[0].strip()
    if text.endswith(")") and "(" in text:
        text = text[: text.index("(")].strip()
    return text if _ARROW_NAME.match(text) else None


def _without_dumper(frames: tuple[Frame, ...]) -> tuple[Frame, ...]:
    """A thread that printed the dump itself (a SIGINT/SIGUSR1 handler calling
    traceback.extract_stack or a "dumpstacks" helper) has that code innermost, over
    the place the signal interrupted: the dumper's frames and the handler under them
    are dropped, so the wait they interrupted is what decides."""
    n = 0
    while n < len(frames) and n < 8 and _DUMPER.match(frames[n].function):
        n += 1
    if n and n < len(frames) and _HANDLER.search(frames[n].function):
        n += 1
    return frames[n:] if 0 < n < len(frames) else frames


def _strip_note(text: str) -> str:
    """A command line without a reporter's trailing note ("  ← stuck here")."""
    for mark in ("  ←", "  <-", " ← ", " <-- ", "  #"):
        i = text.find(mark)
        if i != -1:
            text = text[:i]
    return text.strip()


def parse_thread_header(s: str) -> tuple[str | None, str, str] | None:
    """(ident, state, name) for a thread header line, else None."""
    if s.startswith(("Thread", "Current thread")):
        m = _THREAD.match(s)
        if m:
            ident = m.group(1)
            if ident is not None and _PLACEHOLDER_IDENT.match(ident):
                ident = None
            return ident, m.group(2), m.group(3) or ""
        m = _FAULTHANDLER_THREAD.match(s)
        if m:  # Python's faulthandler (also PyTorch's dump on NCCL timeouts)
            ident = m.group(2)
            if ident is not None and _PLACEHOLDER_IDENT.match(ident):
                ident = None
            return ident, "unknown", m.group(3) or ""
        m = _NAMED_THREAD.match(s)
        if m:
            return None, "unknown", m.group(1)
        m = _NOTED_THREAD.match(s)
        if m:
            return m.group(1), "unknown", ""
        return None
    # Condensed: 'MainThread (active, 100% CPU):' / 'Thread-3 (worker) (idle):'
    if s.endswith("):") or s.endswith(")"):
        body = s[:-1] if s.endswith(":") else s
        i = body.rfind(" (")
        if i > 0 and len(body) < 300:
            state = body[i + 2 : -1].strip()
            m = _STATE.match(state)
            name = body[:i].strip().strip('"')
            if m and name and s.endswith(":") and not name.startswith(("(", "Process")):
                return None, m.group(1), name
            labelled = _labelled_header(body[:i], state) if s.endswith(":") else None
            if labelled is not None:
                return labelled
    return None


def _labelled_header(label: str, inner: str) -> tuple[str | None, str, str] | None:
    """'decode pid=951 (MainThread active+gil):' (a reporter's own caption): the
    thread name and state share the parentheses, the pid is in the label. The
    main thread's id is the pid, so it becomes the ident (and the process's pid)."""
    pid = _LABELLED_HEADER.search(label)
    name, sep, state = inner.replace(",", " ").rpartition(" ")
    name = name.strip().strip('"')
    m = _STATE.match(state)
    if pid is None or not sep or m is None or not _IDENT.match(name):
        return None
    return (pid.group(1) if name == "MainThread" else None), m.group(1), name


@dataclass
class _Thread:
    ident: str | None
    name: str
    state: str | None
    frames: list[Frame] = field(default_factory=list)
    headerless: bool = False
    outermost_first: bool = False  # pystack lists the outermost frame first
    number: str = ""  # gdb's thread number, for the thread its stop line started


@dataclass
class _Process:
    pid: int | None = None
    cmdline: str = ""
    python: str = ""
    rank: int | None = None
    threads: list[_Thread] = field(default_factory=list)
    has_header: bool = False


class _Reader:
    def __init__(self) -> None:
        self.report = ParseReport()
        self.processes: list[_Process] = []
        self.proc: _Process | None = None
        self.group: list[_Thread] = []  # threads receiving the next frames
        self.pid_hint: int | None = None
        self.in_locals = False
        self.locals_indent = 0
        self.after_break = False
        self.recent_first = False  # inside gdb's "Traceback (most recent call first):"
        self.pybt_seen = False  # the current thread already has py-bt frames
        # rank -> (pid, OpType, SeqNum) from NCCL watchdog timeout lines, first report per rank
        self.watchdog: dict[int | None, tuple[int | None, str, str]] = {}
        # Horovod's first "[missing ranks: ...]" entry: (op, tensor, ranks that never submitted it)
        self.horovod_missing: tuple[str, str, tuple[int, ...]] | None = None
        self.gdb_stop = False  # after gdb's 'Thread N "name" received signal' line: its stop location follows
        self.gdb_stopped_at: str | None = None  # that location's function, repeated by the bt's "#0"
        self.gdb_stop_thread: _Thread | None = None  # the thread the stop line started
        self.gdb_attached = False  # after gdb's attach preamble: the main thread's stop location may follow
        self.watchdog_pending: int | None = None
        self.after_file_frame = False  # the line before was faulthandler's header or frame
        # Inside a Python traceback (most recent call last): its frames, kept until the
        # exception line says whether it is a stack (KeyboardInterrupt: where the hung
        # process was when the user pressed Ctrl+C) or an error report (dropped).
        self.tb_frames: list[Frame] | None = None
        self.tb_lines = 0
        self.tb_indent = 0
        self.tb_caption = ""
        self.tb_ipython = False  # the open traceback is IPython's (numbered source lines)
        self.banner: tuple[str | None, str] | None = None  # (ident, name) of the thread whose banner was read last
        # Traceback-shaped blocks that ended without an exception line (a thread dump
        # printed with traceback.format_stack, or a cut traceback): kept only when the
        # paste has no other stack. (caption, frames, lines)
        self.tb_pending: list[tuple[str, list[Frame], int, bool, int | None]] = []  # ..., error, stream pid
        self.stream_pid: StreamKey = None  # the process whose interleaved lines are being read
        self.rank_hint: int | None = None  # the rank whose interleaved lines are being read
        self.shm_waits: dict[int | None, int] = {}  # pid -> vLLM's shm_broadcast wait lines logged
        self.cxx_blocks: list[list[Frame]] = []  # torch's C++ error backtraces, innermost first
        self.cxx_of: dict[int, list[Frame]] = {}  # tb_pending index -> the C++ backtrace under its error
        self.cxx_raised: tuple[str, str] | None = None  # the "Exception raised from F at FILE" above the next block
        self.cxx_watchdog: set[int] = set()  # ids of the blocks the NCCL watchdog raised
        # Inside a block of torch's fatal-signal handler: 2 before the handler's own frame,
        # 1 right after it (the signal trampoline may follow), 0 in the thread's frames.
        self.signal_frames = False
        self.signal_skip = 0
        self.error_tb_line = -10  # the line on which the last error traceback ended
        self.prev_text = ""  # the last non-blank line before the current one
        self.cur_text = ""
        self.gdb_open = False  # the last gdb frame had no library: "from ..." may follow
        self.trace: list[Frame] | None = None  # VLLM_TRACE_FUNCTION calls still open
        # Code-shaped names alone on their lines, waiting to see whether frames follow.
        self.bare: list[Frame] = []
        self.bare_runs: list[list[Frame]] = []  # fenced lists of names alone, kept if nothing else is a stack
        self.after_frame = False  # the line before was a frame (a bare name there continues it)
        self.caption: tuple[int | None, bool] | None = None  # (rank, main thread) a caption named
        self.arrow: list[Frame] | None = None  # a hand-written call chain being read, outermost first
        self.arrow_head = ""  # the line above the first arrow: the chain's outermost call
        self.numbered: list[Frame] | None = None  # Paddle's C++ traceback, outermost first
        self.pdb: list[Frame] | None = None  # pdb's "where", outermost first

    # -- structure ------------------------------------------------------------
    def new_process(self, pid: int | None = None, cmdline: str = "", header: bool = False) -> _Process:
        self.close_group()
        if pid is None and self.pid_hint is not None:
            pid = self.pid_hint
        self.pid_hint = None
        self.recent_first = False
        self.pybt_seen = False
        proc = _Process(pid, cmdline, has_header=header)
        if self.rank_hint is not None:
            proc.rank = self.rank_hint  # a rank's own interleaved lines ("[default1]:")
        if len(self.processes) < MAX_PROCESSES:
            self.processes.append(proc)
        self.proc = proc
        return proc

    def close_group(self) -> None:
        self.drop_bare()  # names before a header or a caption are not its frames
        self.group = []
        self.in_locals = False

    def start_thread(self, ident: str | None, state: str, name: str) -> None:
        # Headers in a row with the same name share the frames that follow (a
        # reporter folding identical ranks); py-spy itself prints a thread with
        # no Python frames as a bare header, which must not borrow the next one's.
        self.drop_bare()
        self.gdb_attached = False
        joining = bool(self.group) and not any(t.frames for t in self.group) and all(t.name == name for t in self.group)
        group = self.group if joining else []
        proc = self.proc
        is_main = name == "MainThread"
        if proc is None or (is_main and any(t.name == "MainThread" for t in proc.threads)):
            proc = self.new_process()
        if is_main and proc.pid is None and ident is not None and ident.isdigit():
            proc.pid = int(ident)
            self.report.pid_inferred += 1
        t = _Thread(ident, name, state)
        if len(proc.threads) < MAX_THREADS:
            proc.threads.append(t)
        group.append(t)
        self.group = group
        self.report.thread_headers += 1
        self.in_locals = False
        self.after_break = False
        self.recent_first = False
        self.pybt_seen = False
        self.caption = None
        self.gdb_stopped_at = None  # a stop location is repeated only by its own thread's "#0"

    def add_frames(self, frames: list[Frame]) -> None:
        if not self.group or (self.after_break and all(t.headerless for t in self.group)):
            recent_first = self.recent_first  # py-bt pasted without a thread header: still py-bt
            caption, self.caption = self.caption, None
            rank, main = caption if caption is not None else (None, False)
            proc = self.proc
            if proc is not None and proc.threads and (
                    rank is not None or (main and any(t.name == "MainThread" for t in proc.threads))):
                proc = None  # the caption names another process
            if proc is None:
                proc = self.new_process()
                if rank is not None:
                    proc.rank = rank
            self.recent_first = recent_first
            t = _Thread(None, "MainThread" if main else "", None, headerless=True)
            proc.threads.append(t)
            self.group = [t]
            self.report.headerless_threads += 1
        self.after_break = False
        for t in self.group:
            room = MAX_FRAMES - len(t.frames)
            if room <= 0:
                self.report.dropped_frames += len(frames)
                continue
            t.frames.extend(frames[:room])
        self.report.frames += len(frames)

    # -- lines ----------------------------------------------------------------
    def feed(self, raw: str) -> None:
        self.report.lines += 1
        if len(raw) > MAX_LINE_CHARS:
            raw = raw[:MAX_LINE_CHARS]
            self.report.cut_lines += 1
        raw = raw.rstrip().replace("\t", "    ")
        if "\x1b" in raw:
            raw = _ANSI.sub("", raw)
        if "&" in raw and _ENTITY.search(raw):
            raw = html.unescape(raw)  # copied from a page's source: &lt;module&gt;, &quot;MainThread&quot;
        if "Switching to thread" in raw and self.gdb_header(raw.strip()):
            return
        m = _PREFIX.match(raw)
        prefix = raw[: m.end()] if m else ""
        line = raw[m.end():] if m else raw
        s = line.strip()
        if s[:1] == "`" and s[:3] != "```" and (s.count("`") == 1 or (s.count("`") == 2 and s[-1] == "`")):
            # A line pasted as inline code, one backtick pair per line (py-spy#565: each gdb
            # frame wrapped in `...`); a line cut before its closing backtick has only one.
            line = s = s.strip("`").strip()
        if s[:2] == "# " and len(s) < MAX_LINE_CHARS:
            # A dump kept in a source or shell comment ("#     wait (x.py:9)", a py-spy dump
            # quoted in a code comment): the text behind "# " is read when it is stack text.
            # Anything else stays as it was (a root prompt "# cmd", a "# Thread: NAME" caption).
            rest = s[2:].strip()
            if rest and (_PROCESS.match(rest) or _PYTHON.match(rest) or parse_thread_header(rest) is not None
                         or parse_frame_line(rest) is not None):
                line = s = rest
        if "Thread" in s and not s.startswith("Thread") and len(s) < MAX_LINE_CHARS:
            # A py-spy thread header glued to the end of a sentence ("...卡死栈信息Thread 100777
            # (idle): "MainThread"", the frames on the next lines): the header is read. Only a
            # whole header ends the line (id, state, quoted name), so prose naming a thread is not.
            mg = _GLUED_THREAD.search(s)
            if mg and mg.start() > 0:
                line = s = mg.group(0)
        if not s:
            return
        self.prev_text, self.cur_text = self.cur_text, s
        if self.pdb is not None:
            if s.startswith("->"):
                return  # the source line under a pdb frame
            if s.startswith("(Pdb)") and len(self.pdb) == 1:
                self.pdb = None  # where pdb stopped ("> f.py(4)main()"): its "where" repeats it
            if not _PDB_FRAME.match(s):
                self.end_pdb()
        if (s[0] in "/<>(~." or s[1:3] == ":\\") and s.endswith(")") or "()->" in s:
            mp = _PDB_FRAME.match(s)
            if mp:
                if self.pdb is None:
                    self.end_traceback(keep=False)
                    self.drop_bare()
                    self.pdb = []
                if len(self.pdb) < MAX_FRAMES:
                    self.pdb.append(Frame(mp.group(3), mp.group(1).replace("\\", "/"), int(mp.group(2))))
                return
        if self.arrow is not None and not s.startswith(_ARROW):
            self.end_arrow()
        if self.numbered is not None and self.numbered_line(s):
            return
        rank = _RANK_PREFIX.search(prefix) if "[" in prefix else None
        if s[0] == "F" and s.startswith("Fatal Python error: ") and not self.report.fatal_error:
            self.report.fatal_error = s[len("Fatal Python error: "):][:200]
            return
        if (s[0] in "-0123456789%CTGp" or ";" in s) and self.profile_line(s):
            return
        if "%" in s and len(s) > 200 and _TOP_BANNER.search(s):
            self.report.profile_lines += 1
            return
        if s[0] in "~=-" and s[-1] in "~=-":
            mb = _BANNER_THREAD.match(s)
            if mb:
                self.banner_line(mb)
                return
        if s[0] in "WG" and s in _PYBT_MARKERS and not self.tb_frames:
            # gdb's py-bt (libpython.py) prints this above a thread's innermost Python
            # frame; the reporter may have replaced its "Traceback (most recent call
            # first):" line with a caption ("Thread 1 Python stack", pytorch#97833).
            if self.pybt_seen:
                self.close_group()  # another thread's py-bt, its header not pasted
            self.recent_first = True
            self.tb_frames = None
            if s == "Waiting for the GIL":
                self.add_frames([Frame(GIL_WAIT, "?", None, native=True)])
            return
        if self.tb_frames is None and s[0] == "F" and not self.recent_first and _TRACEBACK_FRAME.match(s):
            self.start_traceback(0)  # a traceback pasted without its first line
        if s.endswith("(most recent call last)") and _IPY_TB_START.match(s):
            self.end_traceback(keep=False)
            self.start_traceback(1)
            self.tb_ipython = True
            return
        if self.tb_frames is not None and self.traceback_line(s, line):
            return
        if "Watchdog caught collective" in s or "WorkNCCL(SeqNum=" in s:
            self.watchdog_line(s, prefix, rank)
            return
        if s[:2] == "No" and s.startswith(_SHM_WAIT):
            # vLLM's MessageQueue waiting on its shared-memory ring for a minute at a time
            # ("(EngineCore pid=N) INFO ... [shm_broadcast.py:466] No available shared memory
            # broadcast block found in 60 seconds"): where that process waits, without a stack.
            pid = _PID_IN_PREFIX.search(prefix)
            key = int(pid.group(1)) if pid else (self.stream_pid if isinstance(self.stream_pid, int) else None)
            if key not in self.shm_waits and len(self.shm_waits) < MAX_PROCESSES:
                self.shm_waits[key] = 0
            if key in self.shm_waits:
                self.shm_waits[key] += 1
            return
        if " ranks:" in s and self.horovod_stall_line(s):
            return
        if s[:3] == "SIG" and ", PID: " in s:
            ms = _SIGNAL_THREAD.match(s)
            if ms:
                self.signal_thread(ms)
                return
        if s.startswith("frame #") and "`" not in s:
            if self.signal_frames and self.signal_frame(s):
                return
            if self.cxx_frame(s):
                return
        self.signal_frames = False
        if s.startswith("Exception raised from ") and (mr := _RAISED_FROM.match(s)) is not None:
            self.cxx_raised = (mr.group(1), mr.group(2))
            self.skip(s)
            return
        if "Stack trace of the failed collective:" in s:
            # torch's flight recorder prints that rank's stack of the collective that timed
            # out ("#0 all_gather_into_tensor from /p/distributed_c10d.py:4186", vlm-training#26):
            # those frames are the rank's own stack, not another process.
            rank = rank or _RANK_PREFIX.search(s)
            self.new_process(header=True)
            if rank is not None:
                self.proc.rank = int(rank.group(1))  # type: ignore[union-attr]
            self.start_thread(None, "unknown", "MainThread")
            self.report.thread_headers -= 1  # no thread header was pasted
            return
        after_frame, self.after_frame = self.after_frame, False
        gdb_open, self.gdb_open = self.gdb_open, False
        if gdb_open and s.startswith(("from ", "at ")) and self.gdb_continuation(s):
            return
        if s[0] in "CR" and s.startswith(("Call to ", "Return from ")):
            mt = _TRACE_CALL.match(s)
            if mt:
                self.trace_line(mt)
                return
        if self.trace is not None:
            self.end_trace()
        if s[0] in "EeR" and self.pyspy_failure(s):
            return
        if s[0] in "*tf" and ("thread #" in s[:14] or "frame #" in s[:14]) and self.lldb_line(s):
            return
        if (s[0] == "*" or s[0].isdigit()) and (" Thread 0x" in s[:40] or " LWP " in s[:24]):
            mi = _GDB_INFO_THREAD.match(s)
            if mi and self.gdb_info_thread(mi):
                return
        if s.startswith(("```", "~~~")):
            if _names_stack(self.bare) and len(self.bare_runs) < 16:
                self.bare_runs.append(self.bare)  # kept aside: a stack if the paste has no other
            self.drop_bare()
            self.group = [] if any(t.frames for t in self.group) else self.group
            self.after_break = True
            s = s.lstrip("`~").strip()
            if not s or _IDENT.match(s):
                return  # a fence, maybe with a language tag
            line = s
        first = s[0]
        if first == "<" and _HTML.match(s):
            return
        if first in "-→=" and s.startswith(_ARROW) and self.arrow_line(s):
            return
        if first == "C" and _NUMBERED_CXX_HEAD.match(s):
            self.drop_bare()
            self.numbered = []
            return
        if first in ".…[(" and (s in ("[...]", "(...)") or set(s) <= {".", "…", " "}):
            self.report.abbreviated += 1
            return
        if ("py-spy" in s or "pystack" in s or "stack " in s or "gdb" in s
                or (("$" in s or "#" in s or "%" in s) and _PROMPT.match(s))):
            # "$ py-spy dump --pid 42", "$ pstack 42": what follows is process 42.
            m2 = _PYSPY_PID.search(s)
            if m2:
                self.expect_process(int(next(g for g in m2.groups() if g)))
                return
            if _PROMPT.match(s):
                return
        label = _GROUP_LABEL.match(s) if first in "DTPECRr" else None
        if label is not None and parse_frame_line(s[label.end():]) is not None:
            self.new_process(header=True)
            self.proc.rank = int(label.group(1))  # type: ignore[union-attr]
            self.report.process_headers += 1
            self.start_thread(None, "unknown", "MainThread")
            s = line = s[label.end():]
            first = s[0]
        if (first == "#" and s[1:2].isdigit()) or (first == "0" and s[:2] == "0x" and " in " in s):
            if self.gdb_frame(s):
                return
        elif first in "TU[" and self.gdb_header(s):
            return
        if self.recent_first and (first == "F" or first == "<"):
            m = _TRACEBACK_FRAME.match(s) if first == "F" else _GDB_BUILTIN.match(s)
            if m:
                frame = (Frame(m.group(3), m.group(1).replace("\\", "/"), int(m.group(2))) if first == "F"
                         else Frame(m.group(1), "?", None, native=True))
                self.add_frames([frame])
                self.pybt_seen = True
                indent = len(line) - len(line.lstrip())
                self.in_locals, self.locals_indent = True, indent  # its source line follows, deeper
                return
        after_file_frame, self.after_file_frame = self.after_file_frame, False
        if (first in "PSTt=-#" or s[-1] == ":") and self.handle_header(s, rank):
            self.after_file_frame = s.endswith("(most recent call first):")
            return
        indent = len(line) - len(line.lstrip())
        if _LOCALS_HEAD.match(s):
            self.in_locals, self.locals_indent = True, indent
            return
        if self.in_locals and indent > self.locals_indent:
            return
        self.in_locals = False
        m = _PYSTACK_FRAME.match(s)
        if m:
            kind, path, lineno, fn, lib = m.groups()
            if kind == "C":
                frame = Frame(fn.strip(), lib or path, None, native=True)
            else:
                frame = Frame(fn.strip(), path.replace("\\", "/"), int(lineno))
            self.add_frames([frame])
            self.in_locals, self.locals_indent = True, indent  # its source line follows, deeper
            return
        # Two frames or more on one line: a flattened dump (an arrow chain splits the same way).
        pieces = split_flattened(s) if s.count(" (") >= 2 and ") " in s else None
        if pieces is not None:
            for piece in pieces:  # each holds one header or frame: no further split
                self.feed(piece)
            return
        parsed = parse_frame_line(s)
        if parsed is not None and first == "F" and s.startswith('File "'):
            # 'File "/x/a.py' cut mid-path is faulthandler's only under its header or
            # after its frames; at the end of a Python traceback it is not a stack.
            if parsed[2] and not after_file_frame:
                parsed = None
            else:
                self.after_file_frame = True
        if parsed is None:
            name = _bare_frame_name(s) if len(s) <= 300 else None
            if name is not None and after_frame:
                self.add_frames([Frame(name, "?")])  # the list of frames goes on, by name only
                self.report.bare_frames += 1
                self.after_frame = True
                return
            if name is not None and len(self.bare) < 64:
                self.bare.append(Frame(name, "?"))  # a frame if real frames follow
                return
            self.drop_bare()
            inline = [f for f in (_gdb_call(m.group(1), addressed=False) for m in _INLINE_GDB.finditer(s)) if f] if "`" in s else []
            if inline:
                self.add_frames(inline[:MAX_FRAMES])
                self.report.bare_frames += len(inline)
                self.after_break = True  # prose: the next frames are another stack
                return
            self.skip(s)
            return
        frames, abbreviated, cut = parsed
        self.report.abbreviated += abbreviated
        self.report.cut_frames += cut
        if rank is not None and self.proc is not None and self.proc.rank is None and not self.proc.threads:
            self.proc.rank = int(rank.group(1))
        if self.bare:
            self.report.bare_frames += len(self.bare)
            frames, self.bare = self.bare + frames, []
        self.add_frames(frames)
        self.after_frame = True

    def arrow_line(self, s: str) -> bool:
        """One "-> call" of a hand-written chain; its first arrow takes the line above
        as the outermost call (it was read as text: "Class.method" is no frame alone)."""
        name = _arrow_name(s[2:])
        if name is None:
            return False
        if self.arrow is None:
            self.arrow = []
            head = _arrow_name(self.prev_text) if self.prev_text != self.arrow_head else None
            if head is not None:
                if self.bare and self.bare[-1].function == self.prev_text:
                    self.bare.pop()  # held as a maybe-frame: it is this chain's head
                elif self.report.skipped:
                    self.report.skipped -= 1  # skipped as text
                    if self.report.skipped_examples and self.report.skipped_examples[-1] == _example(self.prev_text):
                        self.report.skipped_examples.pop()
                self.arrow.append(Frame(head, "?"))
                self.report.bare_frames += 1
            self.drop_bare()
        if len(self.arrow) < MAX_FRAMES:
            self.arrow.append(Frame(name, "?"))
        self.report.bare_frames += 1
        self.arrow_head = s
        return True

    def end_pdb(self) -> None:
        frames, self.pdb = self.pdb, None
        if frames:
            self.traceback_thread("MainThread", frames)  # pdb shows the thread it stopped in

    def end_arrow(self) -> None:
        chain, self.arrow = self.arrow, None
        if chain and len(chain) >= 3:
            self.traceback_thread("", chain)  # outermost first, like a traceback
        elif chain:
            # "-> done" under a sentence: prose, not a call chain (a chain has 3 calls or more).
            self.report.bare_frames -= len(chain)
            self.report.skipped += len(chain)

    def numbered_line(self, s: str) -> bool:
        """A row of Paddle's C++ traceback ("10  ncclBarrierEnqueueWait(ncclComm*)");
        False (and the traceback ends) on anything else but its dashed rules."""
        if set(s) <= {"-", "="}:
            return True
        m = _NUMBERED_CXX.match(s)
        frame = _gdb_call(m.group(2), addressed=True) if m else None
        if frame is None:
            frames, self.numbered = self.numbered, None
            if frames:
                self.traceback_thread("", frames)
            return False
        if self.numbered is not None and len(self.numbered) < MAX_FRAMES:
            self.numbered.append(frame)
        return True

    def drop_bare(self) -> None:
        """Names alone on their lines that no frame followed: text, not a stack."""
        if self.bare:
            self.report.skipped += len(self.bare)
            self.bare = []

    def handle_header(self, s: str, rank: re.Match[str] | None) -> bool:
        m = _PROCESS.match(s)
        if m and split_flattened(m.group(2)) is None:  # else a whole flattened dump: split below
            pid = int(m.group(1)) if m.group(1).isdigit() else None
            if pid is not None and m.group(2).startswith("timed out with traceback"):
                # PyTorch's distributed test harness: "Process 3 timed out with traceback:"
                # numbers its ranks, not pids (pytorch PR #54818).
                self.new_process(None, "", header=True)
                self.proc.rank = pid  # type: ignore[union-attr]
                self.report.process_headers += 1
                return True
            self.new_process(pid, _strip_note(m.group(2)), header=True)
            self.report.process_headers += 1
            if rank is not None:
                self.proc.rank = int(rank.group(1))  # type: ignore[union-attr]
            return True
        m = _PYTHON.match(s)
        if m and (self.proc is not None and not self.proc.threads):
            self.proc.python = m.group(1)
            return True
        m = _STACK_DUMP_FOR.match(s)
        if m:
            tokens = m.group(1).split()
            pid = next((int(t) for t in tokens[:3] if t.isdigit()), None)
            self.new_process(pid, " ".join(tokens[10:]) if len(tokens) > 10 else m.group(1).strip(), header=True)
            self.report.process_headers += 1
            return True
        m = _SEPARATOR.match(s)
        if m:
            kind, num = m.group(1).lower(), int(m.group(2))
            proc = self.new_process(num if kind in ("pid", "process") else None, header=True)
            if kind == "rank":
                proc.rank = num
            self.report.process_headers += 1
            return True
        m = _PYSTACK_THREAD.match(s)
        if m:
            status = m.group(3) or ""
            self.start_thread(m.group(1), "active+gil" if "Has the GIL" in status else "unknown", m.group(2).strip())
            self.group[-1].outermost_first = True
            return True
        th = parse_thread_header(s)
        if th:
            ident, state, name = th
            self.start_thread(ident, state, name)
            if rank is not None and self.proc is not None and self.proc.rank is None:
                self.proc.rank = int(rank.group(1))
            return True
        return False

    def watchdog_line(self, s: str, prefix: str, rank: re.Match[str] | None) -> None:
        m = _WATCHDOG.search(s)
        if rank is None:
            rank = _RANK_PREFIX.search(s)
        if m is None:
            # "[rank7]: Watchdog caught collective operation timeout:" with the WorkNCCL(...)
            # on the next line (a reporter re-wrapping the log).
            self.watchdog_pending = int(rank.group(1)) if rank else None
            return
        key = int(rank.group(1)) if rank else self.watchdog_pending
        self.watchdog_pending = None
        if key not in self.watchdog and len(self.watchdog) < MAX_PROCESSES:
            pid = _PID_IN_PREFIX.search(prefix)
            self.watchdog[key] = (int(pid.group(1)) if pid else None, m.group(2).lower(), m.group(1))

    def horovod_stall_line(self, s: str) -> bool:
        """Horovod's stall warning: each rank ready in a stalled collective is a process
        waiting in it (like a watchdog line); the ranks that never submitted it are the
        ones missing below the highest (the suspects)."""
        found = False
        for m in _HOROVOD_STALL.finditer(s):
            found = True
            name = m.group(1)
            mo = _HOROVOD_OP.search(name)
            op = "horovod:" + (mo.group(1) or mo.group(2)).lower() if mo else "horovod:collective"
            if mo and mo.group(1):
                name = name[mo.end():]  # "allreduce.conv1.weight": the tensor is after the op
            ranks = [int(r) for r in m.group(3).replace(",", " ").split()][:MAX_PROCESSES]
            if m.group(2) == "missing":
                if self.horovod_missing is None:
                    self.horovod_missing = (op, name, tuple(sorted(set(ranks))))
                continue
            for key in ranks:
                if key not in self.watchdog and len(self.watchdog) < MAX_PROCESSES:
                    self.watchdog[key] = (None, op, name)
        return found

    def cxx_frame(self, s: str) -> bool:
        """A line of torch's C++ error backtrace: the raising thread's native frames, kept
        (one block per backtrace) for a paste that has no other stack."""
        m = _TORCH_CXX_FRAME.match(s)
        if m is None:
            return False
        name = m.group(2)
        name = "?" if name.startswith("<unknown") else (_cxx_name(name) or name)
        frame = Frame(name, m.group(3) or "?", None, native=True)
        if m.group(1) == "0" or not self.cxx_blocks:
            if len(self.cxx_blocks) >= MAX_THREADS:
                return True
            self.cxx_blocks.append([])
            raised, self.cxx_raised = self.cxx_raised, None
            if raised is not None and raised[1].endswith("ProcessGroupNCCL.cpp") and raised[0].rsplit("::", 1)[-1] in _NCCL_WATCHDOG_RAISERS:
                self.cxx_watchdog.add(id(self.cxx_blocks[-1]))
            if self.report.lines - self.error_tb_line <= 4 and self.tb_pending:
                # Right under an error's Python traceback (its message, then "Exception raised
                # from X (most recent call first):"): the same thread's inner, native part.
                self.cxx_of[len(self.tb_pending) - 1] = self.cxx_blocks[-1]
        if len(self.cxx_blocks[-1]) < MAX_FRAMES:
            self.cxx_blocks[-1].append(frame)
        return True

    def signal_thread(self, m: re.Match[str]) -> None:
        """'SIGABRT(6), PID: 15837, Thread 15853:' of torch's fatal-signal handler: a thread of
        that process (the one whose id is the pid is the main thread); its frames follow."""
        pid, tid = int(m.group(3)), m.group(4)
        proc = next((p for p in self.processes if p.pid == pid), None)
        if proc is None:
            self.new_process(pid)
        else:
            self.close_group()
            self.proc = proc
        self.start_thread(tid, "unknown", "MainThread" if int(tid) == pid else "")
        self.signal_frames, self.signal_skip = True, 2
        if not self.report.signal_dump:
            self.report.signal_dump = f"{m.group(1)}({m.group(2)})"

    def signal_frame(self, s: str) -> bool:
        """A frame of the thread torch's fatal-signal handler is printing. The handler's own
        frame and the signal trampoline under it are where the dump was printed from, not
        where the thread was: dropped."""
        m = _TORCH_CXX_FRAME.match(s)
        if m is None:
            return False
        name = m.group(2)
        name = "?" if name.startswith("<unknown") else (_cxx_name(name) or name)
        if self.signal_skip == 2 and "SignalHandler" in name:
            self.signal_skip = 1
            return True
        if self.signal_skip == 1 and name == "?":
            self.signal_skip = 0
            return True
        self.signal_skip = 0
        self.add_frames([Frame(name, m.group(3) or "?", None, native=True)])
        return True

    def gdb_frame(self, s: str) -> bool:
        """One gdb backtrace line: a py-bt frame ("#3 Frame 0x.., for file F, line N, in f (...")
        or a native one ("#0  0x.. in poll () at x.S:81", "... from /lib/libc.so.6")."""
        m = _GDB_PYFRAME.match(s)
        if m:
            self.add_frames([Frame(m.group(3), m.group(1).replace("\\", "/"), int(m.group(2)))])
            self.after_break = False
            return True
        self.drop_bare()
        m = _GDB_NUMBERED.match(s)
        if m is not None:
            frame = _gdb_call(s[m.end():], addressed=m.group(1) is not None) or _numbered_from(s[m.end():].strip())
        else:
            head, sep, rest = s.partition(" in ")  # "0x00007f.. in poll () ..."
            frame = _gdb_call(rest, addressed=True) if sep and _HEX.match(head) else None
        if frame is None:
            return False
        if m is None and self.gdb_attached:
            # where the attached main thread stopped: its thread until its own bt replaces it
            self.gdb_attached = False
            self.start_thread(None, "unknown", "MainThread")
            if self.group:
                self.gdb_stop_thread = self.group[-1]
                self.gdb_stop_thread.number = "1"
                self.gdb_stop = True
        stop, self.gdb_stop = self.gdb_stop, False
        if m is not None and s[1:2] == "0" and not s[2:3].isdigit() and self.gdb_stopped_at == frame.function:
            # "#0" of the bt after gdb's stop location: the same frame, already read.
            self.gdb_stopped_at = None
            self.after_break = False
            return True
        self.gdb_stopped_at = frame.function if stop and m is None else None
        self.add_frames([frame])
        self.gdb_open = frame.file == "?"  # gdb may wrap "from /lib/x.so" onto the next line
        self.after_break = False
        return True

    def gdb_continuation(self, s: str) -> bool:
        """'   from /opt/lib/libccl.so.1' under a gdb frame that gdb wrapped: its library."""
        self.gdb_open = False
        where = s[5:].strip() if s.startswith("from ") else s[3:].strip().split(":", 1)[0]
        if not where or _WS.search(where):
            return False
        for t in self.group:
            if t.frames and t.frames[-1].file == "?":
                last = t.frames[-1]
                t.frames[-1] = Frame(last.function, where, None, native=True)
        return True

    def lldb_line(self, s: str) -> bool:
        """lldb's "thread #N, name = 'x', ..." and "frame #N: 0x.. lib.so`symbol + off [at f.cc:1:2]"."""
        m = _LLDB_FRAME.match(s)
        if m is not None:
            lib, sym = m.group(1), m.group(2)
            i = sym.rfind(" at ")
            if i != -1 and not _WS.search(sym[i + 4:].strip()):
                sym = sym[:i]
            sym = _LLDB_OFFSET.sub("", sym.strip())
            name = _cxx_name(sym)
            if not name:
                return False
            self.add_frames([Frame(name, lib, None, native=True)])
            self.after_break = False
            return True
        m = _LLDB_THREAD.match(s)
        if m is not None:
            name = "MainThread" if m.group(1) == "1" else (m.group(3) or "")
            self.start_thread(m.group(2) or f"lldb-{m.group(1)}", "unknown", name)
            return True
        return False

    def gdb_info_thread(self, m: re.Match[str]) -> bool:
        """One row of gdb's "info threads": a thread and its innermost frame."""
        rest = m.group(5)
        head, sep, call = rest.partition(" in ")
        frame = _gdb_call(call, addressed=True) if sep and _HEX.match(head) else _gdb_call(rest, addressed=False)
        if frame is None:
            return False
        self.start_thread(m.group(2) or m.group(3), "unknown", "MainThread" if m.group(1) == "1" else (m.group(4) or ""))
        self.add_frames([frame])
        self.after_break = False
        return True

    def trace_line(self, m: re.Match[str]) -> None:
        """One VLLM_TRACE_FUNCTION line: the open calls are kept as a stack."""
        kind, fn, path, line, caller, cpath, cline = m.groups()
        stack = self.trace if self.trace is not None else []
        self.trace = stack
        if kind == "Call to":
            if stack and stack[-1].function == caller:
                top = stack[-1]
                stack[-1] = Frame(top.function, top.file, int(cline))  # the caller's line now
            elif len(stack) < MAX_FRAMES:
                stack.append(Frame(caller, cpath.replace("\\", "/"), int(cline)))
            if len(stack) < MAX_FRAMES:
                stack.append(Frame(fn, path.replace("\\", "/"), int(line)))
        else:
            for k in range(len(stack) - 1, max(len(stack) - 64, -1), -1):
                if stack[k].function == fn:
                    del stack[k:]
                    break

    def end_trace(self) -> None:
        stack, self.trace = self.trace, None
        if stack:
            self.traceback_thread("MainThread", stack)  # outermost first, like a traceback

    def pyspy_failure(self, s: str) -> bool:
        """py-spy's error for the process the paste was about to show: not dumped."""
        m = _PYSPY_ERROR.match(s)
        if m is None or not any(k in m.group(1).lower() for k in _PYSPY_FAILURES):
            return False
        proc = self.proc
        pid = self.pid_hint if self.pid_hint is not None else (proc.pid if proc is not None and not proc.threads else None)
        if pid is None:
            return False
        reason = m.group(1).strip()
        before = self.report.undumped.get(pid)
        if before is None and len(self.report.undumped) < MAX_PROCESSES:
            self.report.undumped[pid] = reason
        elif before is not None and reason not in before and len(before) < 300:
            self.report.undumped[pid] = f"{before}; {reason}"
        return True

    def gdb_header(self, s: str) -> bool:
        """gdb's thread headers and py-bt's "Traceback (most recent call first):"."""
        m = _GDB_THREAD.match(s) or _GDB_THREAD_LWP.match(s)
        if m:
            stopped = self.gdb_stop_thread
            at = next((i for i, t in enumerate(self.proc.threads) if t is stopped), None) if stopped and self.proc else None
            if at is not None and stopped.number == m.group(1):  # type: ignore[union-attr]
                # `thread apply all bt` after the stop line: the stopped thread's own bt
                # follows (its "#0" is the stop location), so the stop line's thread goes.
                del self.proc.threads[at]  # type: ignore[union-attr]
                self.report.thread_headers -= 1
                self.report.frames -= len(stopped.frames)  # type: ignore[union-attr]
                self.gdb_stop_thread = None
            self.start_thread(m.group(2), "unknown", "MainThread" if m.group(1) == "1" else (m.group(3) or ""))
            return True
        if _GDB_ATTACHED.match(s):
            self.gdb_attached = not (self.proc is not None and self.proc.threads)
            return True
        m = _GDB_STOPPED.match(s)
        if m:
            self.start_thread(None, "unknown", "MainThread" if m.group(1) == "1" else m.group(2))
            self.gdb_stop = True
            if self.group:
                self.gdb_stop_thread = self.group[-1]
                self.gdb_stop_thread.number = m.group(1)
            return True
        m = _RECENT_FIRST.match(s)
        if m:
            # py-bt of the thread whose native frame gdb just showed: the same thread;
            # after py-bt frames already read, another thread's (`thread apply all py-bt`
            # with its thread lines not pasted).
            if m.group(1) == "first" and self.pybt_seen:
                self.close_group()
            self.recent_first = m.group(1) == "first"
            self.after_break = False
            if not self.recent_first:
                self.end_traceback(keep=False)
                self.start_traceback(1)
            return True
        return False

    def traceback_line(self, s: str, line: str) -> bool:
        """A line inside a Python traceback (most recent call last); False ends it
        without consuming the line (something that is not traceback text)."""
        m = _TRACEBACK_FRAME.match(s)
        if m:
            if self.tb_frames is not None and len(self.tb_frames) < MAX_FRAMES:
                self.tb_frames.append(Frame(m.group(3), m.group(1).replace("\\", "/"), int(m.group(2))))
            self.tb_lines += 1
            self.tb_indent = len(line) - len(line.lstrip())
            return True
        if self.tb_ipython:
            frame = _ipython_frame(s)
            if frame is not None or _IPY_SOURCE.match(s) or set(s) <= {"-"}:
                if frame is not None and self.tb_frames is not None and len(self.tb_frames) < MAX_FRAMES:
                    self.tb_frames.append(frame)
                self.tb_lines += 1
                return True
        if self.tb_frames and len(line) - len(line.lstrip()) > self.tb_indent:
            one = _single_frame(s) if "(" in s else None
            if one is None or one[0].line is None:
                self.tb_lines += 1  # the source line under a frame, or 3.11's ^^^^ markers
                return True
            # "wait (threading.py:320)": a py-spy frame after a cut traceback, not its source line
        m = _EXCEPTION_LINE.match(s)
        if m:
            evidence = "WorkNCCL(SeqNum=" in s  # "...was aborted ... Watchdog caught ...": read it too
            self.tb_lines += not evidence
            interrupted = m.group(1).rsplit(".", 1)[-1] == "KeyboardInterrupt"
            self.end_traceback(keep=interrupted, error=not interrupted)
            return not evidence
        self.end_traceback(keep=False)
        return False

    def start_traceback(self, lines: int) -> None:
        self.tb_ipython = False
        m = _CAPTION_THREAD.match(self.prev_text) if len(self.prev_text) < 200 else None
        self.tb_caption = m.group(1) if m else ""
        self.tb_frames, self.tb_lines = [], lines

    def profile_line(self, s: str) -> bool:
        """py-spy top/record output: a table row, its banner, record's messages, or a
        collapsed stack ('f (a.py:1);g (b.py:2) 431', outermost first, a sample count
        last): a profile, not a snapshot, so none of it is read as frames."""
        if ";" in s and s[-1].isdigit():
            rest, _, count = s.rpartition(" ")
            parts = rest.split(";")
            collapsed = count.isdigit() and len(parts) >= 2 and all(x.endswith(")") and " (" in x for x in parts)
        else:
            collapsed = False
        if not collapsed and _PROFILE_LINE.match(s) is None:
            return False
        self.report.profile_lines += 1
        return True

    def banner_line(self, m: re.Match[str]) -> None:
        """A thread's banner: the traceback open above it was the previous banner's
        thread (or, with none, a thread whose banner was not pasted)."""
        frames, self.tb_frames = self.tb_frames, None
        if frames:
            self.banner_thread(frames)
        self.tb_lines = 0
        name = (m.group(1) if m.group(1) is not None else m.group(4)) or ""
        self.banner = (m.group(2) or m.group(3), name.strip())

    def banner_thread(self, frames: list[Frame]) -> None:
        banner, self.banner = self.banner, None
        if banner is None:
            self.traceback_thread("", frames)  # the paste starts below that thread's banner
            return
        self.start_thread(banner[0], "unknown", banner[1])
        self.add_frames(list(reversed(frames)))  # outermost first, like a traceback

    def end_traceback(self, keep: bool, error: bool = False) -> None:
        frames, self.tb_frames = self.tb_frames, None
        if frames is None:
            return
        if self.banner is not None and frames:
            self.banner_thread(frames)  # a bannered thread's stack, not an error report
            self.tb_lines = 0
            return
        if keep and frames:
            self.traceback_thread("MainThread", frames)  # Ctrl+C lands in the main thread
        else:
            self.report.skipped += self.tb_lines
            if frames and len(self.tb_pending) < MAX_THREADS:
                # An error's traceback too: a paste whose only frames are in one (the
                # TimeoutError a hung RPC ended in, the DistBackendError of a barrier that
                # timed out) shows where that thread waited; kept only as the only stack.
                self.tb_pending.append((self.tb_caption, frames, self.tb_lines, error, self.stream_pid))
                if error:
                    self.error_tb_line = self.report.lines
        self.tb_lines = 0

    def traceback_thread(self, name: str, frames: list[Frame], inner: list[Frame] | None = None) -> None:
        self.start_thread(None, "unknown", name)
        self.report.thread_headers -= 1  # no header was pasted
        self.add_frames((inner or []) + list(reversed(frames)))  # outermost first in a traceback

    def start_stream(self, pid: StreamKey) -> None:
        """The lines that follow are process ``pid``'s own, or rank ``("rank", N)``'s (see
        ``_streams``); ``None``: lines no prefix claims (the whole paste when nothing
        interleaves)."""
        if pid is None and self.stream_pid is None:
            return
        self.end_traceback(keep=False)
        self.stream_pid = pid
        self.enter_stream(pid)

    def enter_stream(self, key: StreamKey) -> None:
        self.rank_hint = None
        if isinstance(key, tuple):
            self.close_group()
            self.proc = None
            self.pid_hint = None
            self.rank_hint = key[1]
        elif key is None:
            self.close_group()
            self.proc = None
            self.pid_hint = None
        else:
            self.expect_process(key)

    def expect_process(self, pid: int) -> None:
        """A line that introduces the dump of ``pid`` (a command, a caption)."""
        self.close_group()
        self.proc = None
        self.pid_hint = pid

    def skip(self, s: str) -> None:
        m = _PID_INTRO.search(s)
        if m and len(s) < 200:
            # "Pyspy dump for PID 309:" / "rank 3, pid 1234:": a caption.
            self.expect_process(int(m.group(1)))
            return
        self.report.skipped += 1
        self.after_break = True
        if len(self.report.skipped_examples) < 3:
            self.report.skipped_examples.append(_example(s))
        # A caption right above a stack with no header says whose it is: "**Rank 1
        # (waiting):**" is another process; "... py-spy MainThread:" is a main thread,
        # and a second such stack cannot be the same process's.
        self.caption = None
        if len(s) < 400 and s.rstrip("*_ ").endswith(":"):
            mr = _CAPTION_RANK.search(s)
            self.caption = (int(mr.group(1)) if mr else None, "MainThread" in s)
            if self.caption == (None, False):
                self.caption = None

    # -- result ---------------------------------------------------------------
    def finish(self, source: str) -> ParseReport:
        # Traceback-shaped blocks without an exception line (cut, or format_stack dumps of
        # every thread) are kept only when the paste has no other stack ("not a dump"
        # would say less than their frames do).
        self.end_traceback(keep=False)
        self.end_trace()
        self.end_arrow()
        self.end_pdb()
        if self.numbered:
            self.numbered_line("")  # a C++ traceback that ends the paste
        if _names_stack(self.bare) and len(self.bare_runs) < 16:
            self.bare_runs.append(self.bare)
        self.drop_bare()
        if self.bare_runs and not self.tb_pending and not any(t.frames for p in self.processes for t in p.threads):
            # Nothing in the paste is a stack but a fenced list of native-shaped names, one
            # per line, as people copy a `py-spy dump --native` or a gdb bt by hand
            # (sglang#17870: "THPStorage_dealloc / ... / cudaStreamSynchronize /
            # cuStreamSynchronize <- never returns"): each list is one thread, as written.
            for run in self.bare_runs:
                self.report.skipped -= len(run)
                self.report.bare_frames += len(run)
                self.start_thread(None, "unknown", "")
                self.report.thread_headers -= 1  # no header was pasted
                self.add_frames(run)
        pending_used = bool(self.tb_pending) and not any(t.frames for p in self.processes for t in p.threads)
        if pending_used:
            stream: StreamKey = None
            for n, (caption, frames, lines, error, pid) in enumerate(self.tb_pending):
                self.report.skipped -= lines
                self.report.error_tracebacks += error
                fresh = pid != stream
                if fresh:
                    # each interleaved process its own; after them, a traceback no prefix
                    # claims is not theirs
                    self.enter_stream(pid)
                stream = pid
                self.traceback_thread(caption or ("MainThread" if n == 0 or pid is not None or fresh else ""), frames,
                                      inner=_raised_from(self.cxx_of.get(n, [])))
        used = {id(b) for b in self.cxx_of.values()} if pending_used else set()
        cxx_lines = sum(len(b) for b in self.cxx_blocks if id(b) not in used)
        if self.cxx_blocks and not self.watchdog and not any(t.frames for p in self.processes for t in p.threads):
            # Only torch's C++ error backtrace was pasted: the raising thread's native stack
            # (where a store get or a communicator setup was waiting when it timed out).
            for block in self.cxx_blocks:
                if id(block) in self.cxx_watchdog or any("watchdog" in f.function.lower() or "checkTimeout" in f.function for f in block):
                    continue  # the NCCL watchdog thread's own stack, never the hung one
                self.group = []
                self.add_frames(_raised_from(block) or block)
            if self.cxx_watchdog and not any(t.frames for p in self.processes for t in p.threads):
                # Only the NCCL watchdog's own backtraces, and torch's header says the
                # watchdog raised ("Exception raised from run at ...ProcessGroupNCCL.cpp"): a
                # collective timed out or failed. That is all the paste says (no rank's stack,
                # no WorkNCCL line): one rank known only from the watchdog, in a collective.
                # (A frame list alone that merely names the watchdog says no such thing.)
                self.watchdog[None] = (None, "collective", "?")
                self.report.watchdog_raised = True
        else:
            self.report.skipped += cxx_lines
        rounds: dict[int | None, int] = {}
        out = []
        for p in self.processes:
            threads = []
            for n, t in enumerate(p.threads):
                if not t.frames:
                    continue
                ident = t.ident if t.ident is not None else (f"?{n + 1}")
                if ident.lower().startswith("0x"):
                    ident = ident.lower()
                active = None if t.state in (None, "unknown") else (t.state not in ("idle", "sleeping", "waiting"))
                frames = _without_dumper(tuple(reversed(t.frames)) if t.outermost_first else tuple(t.frames))
                threads.append(ThreadDump(ident, t.name, frames, active, "gil" in (t.state or "")))
            if not threads:
                continue
            key = p.pid
            rounds[key] = rounds.get(key, 0) + 1 if key is not None else 1
            # A pasted command line is echoed in the verdict and its JSON: its secrets
            # (--hf_token hf_..., WANDB_API_KEY=...) never are, as in a bundle.
            out.append(ProcessDump(p.pid, tuple(threads), redact_text(p.cmdline), p.python, rounds[key], rank=p.rank))
            if p.rank is not None and p.pid is not None:
                self.report.ranks[p.pid] = p.rank
        # Ranks the paste shows only through the NCCL watchdog: one process each, waiting in
        # that collective (a rank whose stack is also pasted keeps its stack).
        dumped = {d.rank for d in out if d.rank is not None}
        for key, (pid, op, seq) in self.watchdog.items():
            if key is not None and key in dumped:
                continue
            # A Horovod stall line names the tensor, not a sequence number.
            frame = Frame(op, seq, None) if op.startswith("horovod:") else Frame(f"nccl:{op}", f"SeqNum {seq}", None)
            out.append(ProcessDump(pid, (ThreadDump("watchdog", "MainThread", (frame,)),), rank=key))
            self.report.frames += 1
            self.report.watchdog_only += 1
            if pid is not None and key is not None:
                self.report.ranks[pid] = key
        # A paste of vLLM's shm_broadcast wait lines and no stack: each process that logged
        # them waits on its shared-memory queue. Only then: next to real stacks, a process
        # known from one log line would stand out from a crowd in a collective and take the
        # suspect from the rank that is really stuck (the engine core waits on its workers).
        for pid, lines in self.shm_waits.items() if not out else ():
            if len(out) >= MAX_PROCESSES:
                break
            frame = Frame("wait", "vllm/distributed/device_communicators/shm_broadcast.py", None)
            out.append(ProcessDump(pid, (ThreadDump("shm_broadcast", "MainThread", (frame,)),)))
            self.report.frames += 1
            self.report.shm_wait_only += 1
            self.report.shm_wait_minutes = max(self.report.shm_wait_minutes, lines)
        if self.horovod_missing is not None:
            op, tensor, missing = self.horovod_missing
            self.report.horovod_missing = (tensor, missing)
            if not self.watchdog:
                # Only the missing ranks are named: the ranks that did submit wait in the
                # collective, one process standing for all of them (their ranks unknown).
                out.append(ProcessDump(None, (ThreadDump("horovod", "MainThread", (Frame(op, tensor, None),)),)))
                self.report.frames += 1
        self.report.processes = tuple(out)
        return self.report


#: Keys under which JSON log records keep their text (Docker's json-file driver: "log";
#: journald/structured loggers: "message"/"MESSAGE"/"msg"; Google Cloud Logging: "textPayload").
_JSON_TEXT_KEYS = ("log", "message", "msg", "MESSAGE", "textPayload", "text", "line")
_JSON_LINE_MAX = 1 << 20


def _unwrap_json_lines(lines: list[str]) -> list[str]:
    """Log records saved as one JSON object a line (``{"log": "    f (a.py:1)\\n", ...}``)
    or a dump kept as one JSON string: their text, line by line. Other lines as they are."""
    out: list[str] = []
    for line in lines:
        s = line.strip()
        if len(s) > 2 and s[0] == "{" and s[-1] == "}" and len(s) < _JSON_LINE_MAX:
            try:
                record = json.loads(s)
            except ValueError:
                record = None
            if isinstance(record, dict):
                text = next((v for k in _JSON_TEXT_KEYS if isinstance(v := record.get(k), str)), None)
                if text is None:
                    text = max((v for v in record.values() if isinstance(v, str)), key=len, default=None)
                if text is not None:
                    out.extend(text.replace("\r\n", "\n").replace("\r", "\n").rstrip("\n").split("\n"))
                    continue
        out.append(line)
    return out


# A line led by a ray / vLLM process prefix: "(Worker_TP2 pid=291276) ERROR ...".
_STREAM_PID = re.compile(r"^[ \t]*\d{0,9}\((?:\w{1,40}[ ])?pid=(\d{1,10})(?:,[ ]ip=[\w.:\[\]-]{1,60})?\)")
# A rank's own line prefix: torchrun's "[default0]:" (its role, 'default' unless --role
# names one, and the local rank; --tee / log_line_prefix_template) and torch's "[rank3]:".
# Several ranks' faulthandler or py-spy output printed through one terminal interleaves
# line by line under these.
_STREAM_RANK = re.compile(r"^[ \t]*\[(?:rank|RANK|Rank|[A-Za-z_][A-Za-z_-]{0,40}?)(\d{1,6})\]:")
# The rest of a 'File "..."' traceback line that a terminal wrapped: 'm/v1/x.py", line 9, in f'.
_WRAPPED_FILE_TAIL = re.compile(r'^[^\s"]{1,1000}", line \d{1,7}')
# A 'File "...", line N, in f' traceback line wrapped after its line number: the head ends in
# 'line 235,' and the next line is ' in <module>' (a paste re-wrapped at a fixed width, pytorch#45042).
_WRAPPED_LINE_HEAD = re.compile(r'^\s{0,40}File:? "[^"\n]{1,1000}", line \d{1,7},$')
_WRAPPED_IN_TAIL = re.compile(r"^\s{0,40}in \S{1,300}\s*$")
# A torch C++ backtrace line wrapped before its library: "frame #2: f() + 0xd8 (0x7f.. in" + "/x/lib.so)".
_WRAPPED_CXX_HEAD = re.compile(r"^\s{0,8}frame #\d{1,4}: .{1,3000} \(0x[0-9a-fA-F]{1,16} in$")
_WRAPPED_CXX_TAIL = re.compile(r"^\s{0,8}/\S{1,1000}\)$")


def _example(s: str) -> str:
    """A skipped line as the parse report quotes it: redacted (a paste carries whatever the
    reporter's terminal showed: an export HF_TOKEN=..., a curl with a bearer token), then cut."""
    return redact_text(s)[:100]


def _raised_from(block: list[Frame]) -> list[Frame]:
    """A torch C++ error backtrace without the frames that build the error itself
    (c10::Error, TORCH_CHECK's helpers) or that have no name."""
    return [f for f in block if f.function != "?" and not f.function.startswith(("c10::Error::", "c10::detail::torchCheck"))]


StreamKey = int | tuple[str, int] | None


def _streams(lines: list[str]) -> list[tuple[StreamKey, list[str]]]:
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
        m = _STREAM_PID.match(line) if "pid=" in line else None
        if m is not None:
            key = int(m.group(1))
        elif "]:" in line[:60]:
            mr = _STREAM_RANK.match(line)
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


def _join_wrapped(lines: list[str]) -> list[str]:
    """'File "/a/vll' + 'm/v1/x.py", line 9, in f' -> one traceback line, as is
    'File "x.py", line 9,' + ' in f', and a torch C++ frame wrapped before its library
    likewise (a terminal's hard wrap, kept by the copy)."""
    out: list[str] = []
    for line in lines:
        if out and _WRAPPED_FILE_TAIL.match(line):
            prev = out[-1]
            cut = prev.rfind('File "')
            if cut != -1 and '"' not in prev[cut + 6:]:
                out[-1] = prev.rstrip("\r") + line.strip()
                continue
        if out and _WRAPPED_IN_TAIL.match(line) and _WRAPPED_LINE_HEAD.match(out[-1].rstrip()):
            out[-1] = out[-1].rstrip() + " " + line.strip()
            continue
        if out and line[:1] in (" ", "/") and _WRAPPED_CXX_TAIL.match(line) and _WRAPPED_CXX_HEAD.match(out[-1].rstrip()):
            out[-1] = out[-1].rstrip() + " " + line.strip()
            continue
        out.append(line)
    return out


def read_text(text: str, *, source: str = "text") -> ParseReport:
    """Every process in a pasted dump, and what was skipped. Raises ``InputError``
    only when there is not a single recognisable frame."""
    reader = _Reader()
    if _INVISIBLE.search(text):
        # Zero-width spaces, joiners, soft hyphens, marks and stray BOMs that web pages,
        # chat tools and wikis put into copied text: "wait\u200b (threading.py:320)" is no frame.
        text = _INVISIBLE.sub("", text)
    if "\r" in text:
        # CRLF reads as LF below (rstrip); a lone CR (old Mac line ends, a terminal
        # capture's carriage returns) ends a line too, else the paste is one long line.
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    lines_in = text.split("\n")
    if "{" in text:
        lines_in = _unwrap_json_lines(lines_in)
    for pid, lines in _streams(lines_in):
        reader.start_stream(pid)
        for line in _join_wrapped(lines):
            reader.feed(line)
    report = reader.finish(source)
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
