"""The parse state: the processes and threads read so far, and what the lines before
left open (a traceback, a gdb stop, names that may turn out to be frames).

Every dialect module reads its lines into one ``Builder``; the structural steps they
share live here: a new process, a new thread (or a group of headers sharing the next
frames), frames added to the current group, a line skipped as text. ``Line`` is the
line being read, as each step of ``reader.STEPS`` sees it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from hangwatch.diagnostics.pastes.parse_report import ParseReport, example
from hangwatch.diagnostics.pastes.patterns import (
    CAPTION_RANK, MAX_FRAMES, MAX_GROUP, MAX_PROCESSES, MAX_THREADS, PID_INTRO,
)
from hangwatch.diagnostics.pastes.unwrap import StreamKey
from hangwatch.diagnostics.stacks import Frame


@dataclass
class ThreadDraft:
    ident: str | None
    name: str
    state: str | None
    frames: list[Frame] = field(default_factory=list)
    headerless: bool = False
    outermost_first: bool = False  # pystack lists the outermost frame first
    orient_guess: bool = False  # read from a shape that does not say which end comes first
    source: str = ""  # pystack: the source line under the last Python frame read
    number: str = ""  # gdb's thread number, for the thread its stop line started
    pybt: bool = False  # holds frames of gdb's py-bt (see ``result._one_thread_in_two_halves``)
    # The indentation of each line that gave it frames, in order: a hand-written call tree
    # indents each call under its caller (``result._staircase``).
    indents: list[int] = field(default_factory=list)


@dataclass
class ProcessDraft:
    pid: int | None = None
    cmdline: str = ""
    python: str = ""
    rank: int | None = None
    threads: list[ThreadDraft] = field(default_factory=list)
    has_header: bool = False


@dataclass(slots=True)
class Line:
    """One line being read: its log prefix, the text after it, and what steps took from it.

    A step may take a part off the front of the text for the steps after it (a fence,
    a rank label): ``retext``, which keeps ``first`` (``s[0]``) with it. Slots and a
    plain ``first``: every step looks at them, for every line."""

    prefix: str
    line: str  # the text after the prefix, its indentation kept
    s: str  # that text stripped, never empty
    rank: re.Match[str] | None  # "[rank3]" in the prefix
    first: str  # s[0]
    after_frame: bool = False  # the builder's after_frame as this line found it
    after_file_frame: bool = False  # likewise after_file_frame
    gdb_open: bool = False  # likewise gdb_open

    def retext(self, s: str) -> None:
        """The rest of the line, ``s``, is what the steps after this one read."""
        self.s = self.line = s
        self.first = s[0]

    @property
    def indent(self) -> int:
        return len(self.line) - len(self.line.lstrip())


@dataclass(eq=False)
class Builder:
    """The state of one paste's reading (see the module's docstring)."""

    report: ParseReport = field(default_factory=ParseReport)
    processes: list[ProcessDraft] = field(default_factory=list)
    proc: ProcessDraft | None = None
    group: list[ThreadDraft] = field(default_factory=list)  # threads receiving the next frames
    pid_hint: int | None = None
    source_open: bool = False  # a pystack frame's source line may follow
    in_locals: bool = False
    locals_indent: int = 0
    after_break: bool = False
    after_frame: bool = False  # the line before was a frame (a bare name there continues it)
    after_file_frame: bool = False  # the line before was faulthandler's header or frame
    innermost_first: bool = False  # under a thread header that says "(most recent call first)"
    frame_source: int = -1  # the indentation of a frame line whose source line may follow
    prev_text: str = ""  # the last non-blank line before the current one
    cur_text: str = ""
    caption: tuple[int | None, bool] | None = None  # (rank, main thread) a caption named
    stream_pid: StreamKey = None  # the process whose interleaved lines are being read
    rank_hint: int | None = None  # the rank whose interleaved lines are being read
    learned_prefix: re.Pattern[str] | None = None  # the prefix this paste's frame lines share (see ``prefixes``)

    # -- gdb and lldb
    recent_first: bool = False  # inside gdb's "Traceback (most recent call first):"
    pybt_seen: bool = False  # the current thread already has py-bt frames
    gdb_stop: bool = False  # after gdb's 'Thread N "name" received signal' line: its stop location follows
    gdb_stopped_at: str | None = None  # that location's function, repeated by the bt's "#0"
    gdb_stop_thread: ThreadDraft | None = None  # the thread the stop line started
    gdb_attached: bool = False  # after gdb's attach preamble: the main thread's stop location may follow
    gdb_open: bool = False  # the last gdb frame had no library: "from ..." may follow
    gdb_number: int = -1  # the number of the last gdb frame read
    gdb_frame_line: int = -2  # the paste's line (report.lines) it was read on
    gdb_more: int = -1  # gdb said "(More stack frames follow...)" after that frame number
    gdb_args: int = 0  # lines left of a gdb frame whose arguments gdb wrapped (its parentheses still open)
    gdb_depth: int = 0  # how many of its parentheses are open

    # -- Python tracebacks
    # Inside a Python traceback (most recent call last): its frames, kept until the
    # exception line says whether it is a stack (KeyboardInterrupt: where the hung
    # process was when the user pressed Ctrl+C) or an error report (dropped).
    tb_frames: list[Frame] | None = None
    tb_lines: int = 0
    tb_indent: int = 0
    tb_source: str = ""  # the source line under the traceback's innermost frame so far
    tb_sources: list[str] = field(default_factory=list)  # each frame's source line (outermost first)
    tb_rank: int | None = None  # the rank its lines' log prefix names ("[rank2]:"), read while it lasts
    # The indentation of the lines that gave names held as frames, not yet a thread's
    # (``note_indent``).
    held_indents: list[int] = field(default_factory=list)
    tb_caption: str = ""
    # The process, stream and rank whose Ctrl-C traceback, kept as its main thread's stack,
    # showed a wait (None: none yet), and CPython's notice that an exit handler raised
    # ("Exception ignored in atexit callback") above the next traceback.
    interrupt_kept: tuple[object, object, object] | None = None
    exit_notice: bool = False
    # pytest's long traceback: its frames so far (outermost first), the function of the
    # source shown above the next location line, the ">" line of that source, and the
    # innermost ">" line once its location came
    pytest_frames: list[Frame] | None = None
    pytest_short_open: bool = False  # a --tb=short frame's source line may follow
    pytest_def: str = ""
    pytest_marker: str = ""
    pytest_source: str = ""
    pytest_interrupted: bool = False
    # macOS sample/spindump call graphs (see ``macos``): inside one, the thread being read,
    # its heaviest path so far (outermost first), the last depth, whether that path ended
    coredump_threads: int = 0  # systemd-coredump / eu-stack thread headers read
    mac_graph: bool = False
    mac_seen: bool = False
    mac_tentative: bool = False  # a graph opened by a thread's line alone, no frame of its tree yet
    mac_threads: int = 0
    mac_thread: str = ""
    mac_frames: list[Frame] | None = None
    mac_depth: int = -1
    mac_done: bool = False
    tb_frame_line: bool = False  # the line before was a traceback's frame line
    tb_ipython: bool = False  # the open traceback is IPython's (numbered source lines)
    banner: tuple[str | None, str] | None = None  # (ident, name) of the thread whose banner was read last
    # Traceback-shaped blocks that ended without an exception line (a thread dump
    # printed with traceback.format_stack, or a cut traceback): kept only when the
    # paste has no other stack. (caption, frames, lines)
    tb_pending: list[tuple[str, list[Frame], int, bool, int | None, int | None]] = field(default_factory=list)  # ..., error, stream pid, rank
    error_tb_line: int = -10  # the line on which the last error traceback ended
    pdb: list[Frame] | None = None  # pdb's "where", outermost first
    pdb_source: str = ""  # the source line under its last frame so far
    # `python -m trace --trace`: the lines run so far, (file, line, source, function), last kept
    pytrace: list[tuple[str, int, str, str]] | None = None
    pytrace_function: str = ""
    # faulthandler's C stack of the current thread (Python 3.14): the thread it goes into, and
    # where its next frame goes (C frames are under the Python frames already read)
    c_stack: ThreadDraft | None = None
    c_stack_at: int = 0

    # -- native backtraces printed by torch and Paddle
    cxx_blocks: list[list[Frame]] = field(default_factory=list)  # torch's C++ error backtraces, innermost first
    cxx_of: dict[int, list[Frame]] = field(default_factory=dict)  # tb_pending index -> the C++ backtrace under its error
    cxx_raised: tuple[str, str] | None = None  # the "Exception raised from F at FILE" above the next block
    cxx_watchdog: set[int] = field(default_factory=set)  # ids of the blocks the NCCL watchdog raised
    # Inside a block of torch's fatal-signal handler: 2 before the handler's own frame,
    # 1 right after it (the signal trampoline may follow), 0 in the thread's frames.
    signal_frames: bool = False
    signal_skip: int = 0
    numbered: list[Frame] | None = None  # Paddle's C++ traceback, outermost first

    # -- logs
    # rank -> (pid, OpType, SeqNum) from NCCL watchdog timeout lines, first report per rank
    watchdog: dict[int | None, tuple[int | None, str, str]] = field(default_factory=dict)
    watchdog_pending: int | None = None
    # Horovod's first "[missing ranks: ...]" entry: (op, tensor, ranks that never submitted it)
    horovod_missing: tuple[str, str, tuple[int, ...]] | None = None
    shm_waits: dict[int | None, int] = field(default_factory=dict)  # pid -> vLLM's shm_broadcast wait lines logged
    trace: list[Frame] | None = None  # VLLM_TRACE_FUNCTION calls still open
    # pid (None: no pid in the prefix) -> (the frame a library's wait message stands for, its
    # message, how many lines said so): see logs.WAIT_MESSAGES
    message_waits: dict[int | None, tuple[Frame, str, int]] = field(default_factory=dict)

    # -- stacks written by hand
    # Code-shaped names alone on their lines, waiting to see whether frames follow.
    bare: list[Frame] = field(default_factory=list)
    bare_runs: list[list[Frame]] = field(default_factory=list)  # fenced lists of names alone, kept if nothing else is a stack
    arrow: list[Frame] | None = None  # a hand-written call chain being read, outermost first
    arrow_head: str = ""  # the line above the first arrow: the chain's outermost call

    # -- structure ------------------------------------------------------------
    def new_process(self, pid: int | None = None, cmdline: str = "", header: bool = False) -> ProcessDraft:
        self.close_group()
        if pid is None and self.pid_hint is not None:
            pid = self.pid_hint
        self.pid_hint = None
        self.recent_first = False
        self.pybt_seen = False
        proc = ProcessDraft(pid, cmdline, has_header=header)
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
        # (a group's threads share their frames and their name: its last one says for all;
        # a group stops growing at MAX_GROUP, so that a run of headers stays linear and
        # the frames after it are not copied into thousands of threads)
        last = self.group[-1] if self.group else None
        joining = last is not None and not last.frames and last.name == name and len(self.group) < MAX_GROUP
        group = self.group if joining else []
        proc = self.proc
        is_main = name == "MainThread"
        if proc is None or (is_main and any(t.name == "MainThread" for t in proc.threads)):
            proc = self.new_process()
        if is_main and proc.pid is None and ident is not None and ident.isdigit():
            proc.pid = int(ident)
            self.report.pid_inferred += 1
        t = ThreadDraft(ident, name, state)
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

    def add_frames(self, frames: list[Frame], *, pybt: bool = False) -> None:
        """``frames`` onto the threads being read (a headerless thread when none is);
        ``pybt``: they are gdb py-bt's."""
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
            t = ThreadDraft(None, "MainThread" if main else "", None, headerless=True)
            proc.threads.append(t)
            self.group = [t]
            self.report.headerless_threads += 1
        self.after_break = False
        for t in self.group:
            t.pybt |= pybt
            room = MAX_FRAMES - len(t.frames)
            if room <= 0:
                self.report.dropped_frames += len(frames)
                continue
            t.frames.extend(frames[:room])
        self.report.frames += len(frames)

    def note_indent(self, indent: int, frames_before: int, held_before: int) -> None:
        """After a line is read: the indentation of a line that gave the current threads
        frames goes to them (with the held names' lines, when those became their frames);
        a line that gave a held name waits with it; held names dropped take theirs along."""
        held = len(self.bare)
        if self.report.frames > frames_before:
            lines = (self.held_indents if held < held_before else []) + [indent]
            for t in self.group:
                if len(t.indents) < MAX_FRAMES:
                    t.indents.extend(lines)
            self.held_indents = []
        elif held > held_before:
            if len(self.held_indents) < MAX_FRAMES:
                self.held_indents.append(indent)
        elif held < held_before:
            self.held_indents = []

    def traceback_thread(self, name: str, frames: list[Frame], inner: list[Frame] | None = None, rank: int | None = None) -> None:
        """A traceback's frames (outermost first) as a thread; ``rank``: the rank its lines'
        log prefix named ("[rank2]:"), the process's when it has none and no other thread."""
        self.start_thread(None, "unknown", name)
        self.report.thread_headers -= 1  # no header was pasted
        if rank is not None and self.proc is not None and self.proc.rank is None and len(self.proc.threads) == 1:
            self.proc.rank = rank
        self.add_frames((inner or []) + list(reversed(frames)))  # outermost first in a traceback

    def drop_bare(self) -> None:
        """Names alone on their lines that no frame followed: text, not a stack."""
        if self.bare:
            self.report.skipped += len(self.bare)
            self.bare = []

    # -- streams and captions -------------------------------------------------
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
        m = PID_INTRO.search(s)
        if m and len(s) < 200:
            # "Pyspy dump for PID 309:" / "rank 3, pid 1234:": a caption.
            self.expect_process(int(m.group(1)))
            return
        self.report.skipped += 1
        self.after_break = True
        if len(self.report.skipped_examples) < 3:
            self.report.skipped_examples.append(example(s))
        # A caption right above a stack with no header says whose it is: "**Rank 1
        # (waiting):**" is another process; "... py-spy MainThread:" is a main thread,
        # and a second such stack cannot be the same process's.
        self.caption = None
        if len(s) < 400 and s.rstrip("*_ ").endswith(":"):
            mr = CAPTION_RANK.search(s)
            self.caption = (int(mr.group(1)) if mr else None, "MainThread" in s)
            if self.caption == (None, False):
                self.caption = None
