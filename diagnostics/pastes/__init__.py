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
* eu-stack: ``TID N:`` and ``#N  0x.. f`` (``- MODULE`` with ``-m``);
* WinDbg ``k``/``kb`` (``Id: PID.TID Suspend:`` headers, ``module!function+0xNN``) and
  Visual Studio's call stack (``module.dll!function(...) Line N``);
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

The package, bottom up: ``patterns`` holds every regex and limit; ``parse_report``
the ``ParseReport``; ``unwrap`` turns the paste into lines (JSON log records,
interleaved processes, wrapped lines); ``builder`` keeps the parse state; ``frames``
reads one line as frames. One module per dialect reads its lines into the builder:
``lines`` (prefixes and markup), ``pyspy_text`` (headers, locals, py-spy's own
errors, top/record), ``tracebacks`` (tracebacks, faulthandler, pdb, IPython),
``gdb`` (gdb and lldb), ``cxx_traces`` (torch's and Paddle's C++ backtraces),
``logs`` (NCCL watchdog, Horovod, vLLM) and ``handwritten``. ``reader`` puts every
line through its table of steps, and ``result`` turns the state into the report.
"""

from __future__ import annotations

from hangwatch.diagnostics.pastes.frames import parse_frame_line, parse_location, split_flattened
from hangwatch.diagnostics.pastes.parse_report import ParseReport
from hangwatch.diagnostics.pastes.patterns import GIL_WAIT, MAX_FRAMES, MAX_LINE_CHARS, MAX_PROCESSES, MAX_THREADS
from hangwatch.diagnostics.pastes.pyspy_text import parse_thread_header
from hangwatch.diagnostics.pastes.reader import read_text
from hangwatch.diagnostics.pastes.unwrap import StreamKey

__all__ = [
    "GIL_WAIT",
    "MAX_FRAMES",
    "MAX_LINE_CHARS",
    "MAX_PROCESSES",
    "MAX_THREADS",
    "ParseReport",
    "StreamKey",
    "parse_frame_line",
    "parse_location",
    "parse_thread_header",
    "read_text",
    "split_flattened",
]
