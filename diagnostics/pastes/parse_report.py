"""What the reader understood of a paste: ``ParseReport``, for the verdict's caveats.

Counts of what was read and what was skipped, the confidence they add up to, and the
notes a replay prints under its verdict: a paste is rarely py-spy's clean output, and
the notes say in which ways this one was not.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hangwatch.contract.redact import redact_text
from hangwatch.diagnostics.pastes.patterns import MAX_FRAMES, MAX_LINE_CHARS
from hangwatch.diagnostics.stacks import ProcessDump


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
    #: processes known only from a library's wait messages (see pastes.logs.WAIT_MESSAGES):
    #: what each waits on, and how many lines said so
    message_waits: list[str] = field(default_factory=list)
    #: the same, put on top of a stack that shows no wait (cut above it)
    message_on_stack: list[str] = field(default_factory=list)
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
        if self.message_waits:
            out.append(f"no stack: {len(self.message_waits)} process(es) known only from the messages a library logs while it "
                       f"waits ({'; '.join(self.message_waits[:4])}); dump the process (py-spy dump --pid) to see its stack")
        if self.message_on_stack:
            out.append(f"the stack shows no blocking call (cut above it); the paste's log says what it waited on: "
                       f"{'; '.join(self.message_on_stack[:4])}, put on top of the main thread")
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


def example(s: str) -> str:
    """A skipped line as the parse report quotes it: redacted (a paste carries whatever the
    reporter's terminal showed: an export HF_TOKEN=..., a curl with a bearer token), then cut."""
    return redact_text(s)[:100]
