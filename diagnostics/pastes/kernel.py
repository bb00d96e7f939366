"""Linux kernel stacks: where a task sleeps inside the kernel.

A process that ignores every signal, SIGKILL included, is in uninterruptible sleep (state
``D``) in a kernel call: a GPU driver's ioctl, a network filesystem, disk I/O, memory
reclaim. Its Python stack stops at the call; the kernel's stack says where it waits.
People paste three shapes of it:

* ``cat /proc/PID/stack``: ``[<0>] futex_wait_queue_me+0xbb/0x120`` (the address is
  ``0`` unless the reader is root and kptr_restrict allows it);
* the hung-task watchdog's report in ``dmesg``: ``INFO: task python3:1234 blocked for
  more than 120 seconds.``, then ``Call Trace:`` and `` schedule+0x2d/0x90`` lines, a
  module's frames marked ``[nvidia]``, frames the unwinder is unsure of marked ``?``
  (a driver's own ``dump_stack`` report starts ``CPU: 7 PID: 1234 Comm: python3``);
* SysRq ``t``/``w`` and newer hung-task reports, whose header is
  ``task:python3 state:D stack:0 pid:1234 ppid:1 flags:0x00004000``, the frames between
  ``<TASK>`` and ``</TASK>``.

Each task is a process of its own (the task's id may be a thread of a process the paste
does not name); each frame is native, its file the module (``[nvidia]``) or ``[kernel]``.
Frames marked ``?`` are left out: they are stale words on the stack, not calls.
"""

from __future__ import annotations

from hangwatch.diagnostics.pastes.builder import Builder, Line
from hangwatch.diagnostics.pastes.patterns import KERNEL_FRAME, KERNEL_SYSRQ_ROW, KERNEL_TASK, KERNEL_TASK_FIELDS
from hangwatch.diagnostics.stacks import Frame

#: The lines of a kernel report that carry no frame and no task.
_STRUCTURE = ("Call Trace:", "<TASK>", "</TASK>", "<IRQ>", "</IRQ>")


def kernel_line(b: Builder, ln: Line) -> bool:
    """A kernel frame, a task's header, or the report's own structure."""
    s = ln.s
    if "+0x" in s and "/0x" in s:
        m = KERNEL_FRAME.match(s)
        if m is None:
            return False
        if m.group("unsure") is None:
            module = m.group("module")
            last = b.group[-1].frames[-1] if b.group and b.group[-1].frames else None
            if last is not None and not (last.file.startswith("[") and last.file.endswith("]")):
                b.close_group()  # a kernel stack after another stack is the kernel's own, not its outer frames
            b.add_frames([Frame(m.group("function"), f"[{module}]" if module else "[kernel]", None, native=True)])
        b.after_break = False
        return True
    if s.startswith(_STRUCTURE) and len(s) < 40:
        return True
    m = KERNEL_TASK.search(s) if ("task " in s or "Comm: " in s) else None
    if m is not None:
        _task(b, m.group("comm") or m.group("comm2"), int(m.group("pid") or m.group("pid2")))
        return True
    m = KERNEL_TASK_FIELDS.match(s) if s.startswith("task:") else None
    if m is not None:
        if not (b.group and b.group[0].ident == m.group("pid")):  # (the header after "INFO: task")
            _task(b, m.group("comm"), int(m.group("pid")))
        return True
    m = KERNEL_SYSRQ_ROW.match(s) if b.group else None
    if m is not None and b.group[0].ident == m.group("pid"):
        return True  # the old report's "python3  D  0 13282  13274 0x00004000" row of the task just named
    return False


def _task(b: Builder, comm: str, pid: int) -> None:
    b.new_process(pid, comm, header=True)
    b.start_thread(str(pid), "sleeping", comm)
