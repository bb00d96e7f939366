"""Reading dumps wrapped in what carried them: log prefixes and terminal colours, code fences,
HTML escapes, JSON log records, line ends, invisible characters from web pages, a dump
flattened onto one line or kept in a source comment."""

from __future__ import annotations

import json
import time

import pytest

from diag_helpers import PASTED, frame_texts, one_process, pasted_verdict, text_verdict
from hangwatch.diagnostics.pastes import read_text
from hangwatch.diagnostics.pastes.unwrap import join_wrapped

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize("lead", ["When stuck, py-spy shows: ``` ", ""])
def test_a_dump_flattened_onto_one_line_is_split_back(lead):
    """Line breaks lost (a web page or digest flattened the paste, vllm#25890 in data/pasted)."""
    text = (lead + 'Process 1829647: VLLM::EngineCore Python v3.12.9 (envs/vllm/bin/python3.12) '
            'Thread 1829647 (active+gil): "MainThread" get_num_common_prefix_blocks (vllm/v1/core/kv_cache_coordinator.py:138) '
            "schedule (vllm/v1/core/sched/scheduler.py:540) step (vllm...\n")
    _, proc = one_process(text)
    assert (proc.pid, proc.cmdline) == (1829647, "VLLM::EngineCore")
    (t,) = proc.threads
    assert t.name == "MainThread" and [f.function for f in t.frames] == ["get_num_common_prefix_blocks", "schedule", "step"]


def test_cluster_log_prefixes_and_terminal_colours_are_stripped():
    """Kubernetes/containerd log lines, `srun --label` task prefixes, ANSI colours."""
    text = ("2025-03-01T10:00:00.123456789Z stdout F Process 42: python train.py\n"
            '2025-03-01T10:00:00.123456789Z stdout F \x1b[1mThread 42 (idle): "MainThread"\x1b[0m\n'
            "2025-03-01T10:00:00.123456789Z stdout F     all_reduce (torch/distributed/distributed_c10d.py:2050)\n"
            '3: Thread 43 (active): "MainThread"\n3:     forward (model.py:12)\n')
    report = read_text(text)
    assert [(p.pid, [f.function for f in p.threads[0].frames]) for p in report.processes] == [(42, ["all_reduce"]), (43, ["forward"])]
    assert report.skipped == 0


def test_prefixes_fences_html_prompts_and_locals():
    text = (
        "<details><summary>py-spy</summary>\n\n"
        "````Text\n"
        "user@host:~$ py-spy dump --pid 4242\n"
        "sglang-1  | [2025-10-29 11:25:58 TP3] Thread 4242 (active): \"MainThread\"\n"
        "> [rank3]: 2024-05-01T12:00:00Z     forward (model.py:1)\n"
        "    Arguments:\n"
        "        self: <Model at 0x7f>\n"
        "    step (train.py:2)\n"
        "(EngineCore pid=4242)     loop (core.py:3)\n"
        "````\n</details>\n"
    )
    report, proc = one_process(text)
    assert proc.pid == 4242
    assert frame_texts(proc.threads[0]) == ["forward (model.py:1)", "step (train.py:2)", "loop (core.py:3)"]
    assert report.skipped == 0


@pytest.mark.parametrize("line_end", ["\r\n", "\r"])
def test_crlf_and_lone_cr_line_ends_are_read(line_end):
    text = 'Thread 1 (idle): "MainThread"\n    all_reduce (torch/distributed/distributed_c10d.py:2050)\n    main (train.py:9)\n'
    (proc,) = read_text(text.replace("\n", line_end)).processes
    assert [f.function for f in proc.threads[0].frames] == ["all_reduce", "main"]


def test_json_log_records_and_html_escaped_pastes_are_read():
    import json

    dump = 'Thread 7 (idle): "MainThread"\n    all_reduce (torch/distributed/distributed_c10d.py:2050)\n    <module> (train.py:9)\n'
    # Docker's json-file driver: one record a line, the text under "log" with its newline.
    docker = "".join(json.dumps({"log": line + "\n", "stream": "stdout", "time": "2024-01-01T00:00:00Z"}) + "\n"
                     for line in dump.splitlines())
    escaped = dump.replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")
    for text in (docker, json.dumps({"message": dump}), escaped):
        (proc,) = read_text(text).processes
        (thread,) = proc.threads
        assert thread.name == "MainThread"
        assert [f.function for f in thread.frames] == ["all_reduce", "<module>"]


@pytest.mark.parametrize("invisible", ["\u200b", "\ufeff", "\u00ad", "\u200e", "\u2060"])
def test_invisible_characters_from_web_copies_are_ignored(invisible):
    text = 'Thread 7 (idle): "MainThread"\n    all_reduce (torch/distributed/distributed_c10d.py:2050)\n    main (train.py:9)\n'
    (proc,) = read_text(text.replace(" (", invisible + " (").replace("Main", "Main" + invisible)).processes
    (thread,) = proc.threads
    assert thread.name == "MainThread" and [f.function for f in thread.frames] == ["all_reduce", "main"]


@pytest.mark.parametrize("space", ["\u00a0", "\u2002", "\u202f", "\u3000"])
def test_typographic_spaces_and_curly_quotes_from_rendered_pages_are_plain(space):
    """A traceback copied from a blog or a forum's rendered page: no-break spaces for its
    indents and curly quotes around the file and the thread name. Refused before as 'no
    line looks like a stack frame'."""
    text = ('Thread 0x00007f0a (most recent call first):\n'
            '  File "/usr/lib/python3.11/threading.py", line 320 in wait\n'
            '  File "/srv/app/worker.py", line 12 in run\n')
    curly = text.replace('"/', "\u201c/").replace('py"', "py\u201d").replace("  ", space * 2)
    (proc,) = read_text(curly).processes
    (thread,) = proc.threads
    assert [(f.function, f.file) for f in thread.frames] == [("wait", "/usr/lib/python3.11/threading.py"), ("run", "/srv/app/worker.py")]


def test_curly_quotes_that_are_the_texts_own_are_kept():
    """Where the paste has plain quotes, curly ones are its own: in a JSON record's message
    (turned into plain ones, the record was no JSON any more) or a folder's name."""
    dump = 'Thread 7 (idle): "MainThread"\n    wait (threading.py:320)\n    run (/srv/\u201cdata\u201d/worker.py:9)\n'
    record = json.dumps({"textPayload": "Hang detected in \u201ctrain\u201d step\n" + dump})
    for text in (dump, record):
        (proc,) = read_text(text).processes
        (thread,) = proc.threads
        assert thread.name == "MainThread"
        assert [(f.function, f.file) for f in thread.frames] == [("wait", "threading.py"), ("run", "/srv/\u201cdata\u201d/worker.py")]


def test_a_pastes_page_source_is_read_as_its_text():
    """A dump copied from a page's source (a mail archive, a forum's export): "<br>" line
    breaks, "&nbsp;" indents, escaped "&lt;module&gt;" and "&quot;", markup around it. Refused
    before (one line, or indents that were no spaces); "<module>" itself is no tag."""
    lines = ['Thread 7 (idle): "MainThread"', "    wait (threading.py:320)", "    get (queue.py:171)", "    <module> (train.py:9)"]
    escaped = [line.replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;") for line in lines]
    for text in ("<p>" + "<br>".join(line.replace("  ", "&nbsp;&nbsp;") for line in escaped) + "</p>",
                 "<pre><code>" + "\n".join(escaped) + "</code></pre>",
                 "\n".join(line.replace(" ", "&nbsp;") for line in escaped)):
        (proc,) = read_text(text).processes
        (thread,) = proc.threads
        assert thread.name == "MainThread" and [f.function for f in thread.frames] == ["wait", "get", "<module>"]


def test_text_that_only_looks_like_a_page_source_is_left_as_it_is():
    """Tags alone (a C++ template's "<b>", python-gdb's "<code at remote 0x..>") make no page
    source, and only whole entities are decoded ("&region=eu" in a URL stays)."""
    text = ('Thread 7 (idle): "MainThread"\n    pop (queue<b>.py:3)\n    fetch (client.py:9)\n'
            "# at <code at remote 0x7f12> https://x.test/?a=1&region=eu&section=2 <b>note</b>\n")
    (proc,) = read_text(text).processes
    assert [f.file for f in proc.threads[0].frames] == ["queue<b>.py", "client.py"]
    page = "<p>a<br>b<br>see https://x.test/?a=1&region=eu&amp;x=2</p>\n" + "\n".join(
        ['Thread 7 (idle): "MainThread"', "    wait (threading.py:320)"])
    (proc,) = read_text(page).processes
    assert [f.function for f in proc.threads[0].frames] == ["wait"]


def test_a_dump_quoted_in_a_source_comment_is_read():
    """Every line behind '# ' (a py-spy dump kept in a code comment): refused as 'no line
    looks like a stack frame'. It is the exiting executor joining its own children."""
    report = read_text((PASTED / "loky_executor_code_comment_exit_join_children.txt").read_text())
    (proc,) = report.processes
    assert proc.pid == 73472
    assert [f.function for f in proc.threads[0].frames][:5] == ["select", "wait", "poll", "wait", "join"]
    assert pasted_verdict("loky_executor_code_comment_exit_join_children") == "child-process-wait"  # the exit waits on its children


def test_gdb_frame_numbers_are_no_comment_marker():
    report = read_text("#0  0x00007f0000001000 in cudaStreamSynchronize () from /usr/lib/libcudart.so.12\n")
    assert report.processes[0].threads[0].frames[0].function == "cudaStreamSynchronize"


def test_a_traceback_with_every_line_in_backticks_keeps_its_source_lines():
    """Each line of a traceback pasted as inline code, with ragged spaces around the
    backticks: one thread, the source lines under their frames (not ends of the traceback)."""
    text = ('`  File "main.py", line 5, in <module>`\n'
            '   ` from pkg import ext`\n'
            '  `File "/x/pkg/ext.py", line 9, in <module>`\n'
            '  `  _backend = load(name="ext")`\n'
            ' ` File "/x/site-packages/torch/utils/cpp_extension.py", line 1371, in _jit_compile`\n'
            '    `baton.wait()`\n')
    report = read_text(text)
    (proc,) = report.processes
    (thread,) = proc.threads
    assert [f.function for f in thread.frames] == ["baton.wait", "_jit_compile", "<module>", "<module>"]


def test_a_hard_wrap_turned_into_padding_inside_a_frame_line_is_joined():
    """A terminal that wrapped each traceback line at its width, the wraps copied as runs
    of spaces: the halves of a path, a function name or the ', in' are joined."""
    pad = " " * 60
    text = ("Traceback (most recent call last):\n"
            f'  File "/opt/lib/python3.6/site-packages/torch/utils/data/dataload{pad}er.py", line 761, in _try_get_data\n'
            "    data = self._data_queue.get(timeout=timeout)\n"
            f'  File "/opt/lib/python3.6/multiprocessing/queues.py", line 108, in g{pad}et\n'
            "    res = self._recv_bytes()\n"
            f'  File "/opt/lib/python3.6/multiprocessing/connection.py", line 216,{pad}in recv_bytes\n')
    (proc,) = read_text(text).processes
    assert [(f.function, f.file.rsplit("/", 1)[-1]) for f in proc.threads[0].frames] == [
        ("recv_bytes", "connection.py"), ("get", "queues.py"), ("_try_get_data", "dataloader.py")]


@pytest.mark.parametrize("width", [60, 72, 80])
@pytest.mark.parametrize("at_spaces", [True, False])
def test_frame_lines_wrapped_at_a_fixed_width_are_joined(width, at_spaces):
    """A dump re-wrapped by a mail client or an editor (at spaces) or a terminal (anywhere
    in a word): each traceback, py-spy and C++ frame line comes back whole. Before, a
    traceback frame wrapped inside its path or before its line number was lost, as was a
    py-spy frame whose location went to the next line."""
    import textwrap

    def wrap(text: str) -> str:
        if at_spaces:
            return "\n".join(textwrap.fill(l, width, break_long_words=False, break_on_hyphens=False) if len(l) > width else l
                             for l in text.split("\n"))
        return "\n".join("\n".join(l[i:i + width] for i in range(0, len(l), width)) for l in text.split("\n"))

    site = "/home/researcher/miniconda3/envs/train-2024/lib/python3.10/site-packages/"
    traceback = ("Traceback (most recent call last):\n"
                 '  File "/home/researcher/projects/rl-finetune/scripts/train_grpo.py", line 88, in <module>\n'
                 "    main()\n"
                 f'  File "{site}torch/distributed/c10d_logger.py", line 83, in wrapper\n'
                 "    return func(*args, **kwargs)\n"
                 f'  File "{site}torch/distributed/distributed_c10d.py", line 2501, in all_reduce\n'
                 "    work = group.allreduce([tensor], opts)\n"
                 "KeyboardInterrupt\n")
    tb = read_text(wrap(traceback)).processes[0].threads[0]
    # (a terminal's wrap inside the function's name, at the line's end, cannot be told from
    # the exception's name on the next line: the name is kept as far as the wrap)
    assert all(f.function == want or (not at_spaces and want.startswith(f.function))
               for f, want in zip(tb.frames, ["all_reduce", "wrapper", "<module>"], strict=True))
    assert tb.frames[0].file == site + "torch/distributed/distributed_c10d.py"

    pyspy = ('Thread 4242 (idle): "MainThread"\n'
             f"    wait_for_tstate_lock_and_cleanup_all_the_workers ({site}concurrent/futures/thread.py:1116)\n"
             f"    all_gather_into_tensor ({site}torch/distributed/distributed_c10d.py:2950)\n"
             "    train (scripts/train_grpo.py:88)\n")
    t = read_text(wrap(pyspy)).processes[0].threads[0]
    assert [(f.function, f.line) for f in t.frames] == [
        ("wait_for_tstate_lock_and_cleanup_all_the_workers", 1116), ("all_gather_into_tensor", 2950), ("train", 88)]

    cxx = ("frame #0: c10d::TCPStore::doWait(c10::ArrayRef<std::string>, std::chrono::duration<long, std::ratio<1l, 1000l> >) "
           f"+ 0x3a2 (0x7f62e1663ec2 in {site}torch/lib/libtorch_cpu.so)\n"
           f"frame #1: c10d::TCPStore::get(std::string const&) + 0x4d (0x7f62e1664ec2 in {site}torch/lib/libtorch_cpu.so)\n"
           "frame #2: <unknown function> + 0x8609 (0x7f635258f609 in /lib/x86_64-linux-gnu/libpthread.so.0)\n")
    frames = read_text(wrap(cxx)).processes[0].threads[0].frames
    assert [f.function.split("(")[0] for f in frames[:2]] == ["c10d::TCPStore::doWait", "c10d::TCPStore::get"]
    assert {f.file for f in frames[:2]} == {site + "torch/lib/libtorch_cpu.so"}


def test_a_py_spy_frame_cut_before_its_location_keeps_it_with_the_space_first():
    """A terminal's cut at the space before the location leaves that space first on the next line."""
    text = 'Thread 1 (idle): "MainThread"\n    wait\n (/usr/lib/python3.11/threading.py:320)\n    main (app.py:5)\n'
    (proc,) = read_text(text).processes
    assert [(f.function, f.line) for f in proc.threads[0].frames] == [("wait", 320), ("main", 5)]


def test_curly_quotes_inside_json_log_records_read_as_plain():
    """A JSON log's keys have plain quotes; the dump inside it had only curly ones."""
    dump = 'Traceback (most recent call last):\n  File \u201c/app/main.py\u201d, line 9, in <module>\n    run()\n' \
           '  File \u201c/app/main.py\u201d, line 5, in run\n    lock.acquire()\nKeyboardInterrupt\n'
    record = "".join(json.dumps({"log": line + "\n", "stream": "stderr"}) + "\n" for line in dump.splitlines())
    (proc,) = read_text(record).processes
    assert [f.function for f in proc.threads[0].frames][-2:] == ["run", "<module>"]


def test_a_gdb_frame_and_an_error_header_wrapped_by_a_mail_client_are_rejoined():
    """A mail client wraps at spaces and starts the rest in the first column: a gdb frame's
    argument list (gdb's own wrap is indented) and an error's "(most recent call" + "first):"."""
    text = ("#0  0x00007f0a in __lll_lock_wait (futex=0x7f0b, private=0) at\n"
            "lowlevellock.c:52\n"
            "#1  0x00007f0b in __pthread_mutex_lock (mutex=0x7f0b <logging_lock>,\n"
            "recursive=1) at pthread_mutex_lock.c:80\n"
            "#2  0x00007f0c in emit_record () from /opt/app/libjoblog.so\n")
    (proc,) = read_text(text).processes
    assert [f.function for f in proc.threads[0].frames] == ["__lll_lock_wait", "__pthread_mutex_lock", "emit_record"]
    header = ("Exception raised from run at /pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:2074 (most recent call\n"
              "first):\n"
              "frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x96 (0x7f1 in /x/libc10.so)\n")
    from hangwatch.diagnostics.pastes.unwrap import join_wrapped
    assert join_wrapped(header.split("\n"))[0].endswith("(most recent call first):")


@pytest.mark.parametrize("text, functions", [
    # prefixed torch frames, one with nothing after its function: each its own line
    ("[rank0]: frame #2: <omitting python frames>\n"
     "[rank0]: frame #3: c10d::ProcessGroupNCCL::barrier(c10d::BarrierOptions const&) + 0x1d2 (0x7f0c in /x/libtorch_cuda.so)\n"
     "[rank0]: frame #4: __libc_start_main + 0xf3 (0x7f0d in /lib/libc.so.6)\n",
     ["c10d::ProcessGroupNCCL::barrier", "__libc_start_main"]),
    # a traceback flattened by markdown: the source line is no function name
    ('File "/srv/train_sft.py", line 94, in\nmain()\nFile "/srv/train_sft.py", line 60, in main\ntrainer.train()\n', None),
    # py-spy frames by name only, then one with its location: three frames
    ("Thread 1 (idle): \"MainThread\"\n    _acquire_restore\n    wait_for_item\n    get (queue.py:171)\n    run (app.py:3)\n",
     ["_acquire_restore", "wait_for_item", "get", "run"]),
])
def test_lines_that_are_no_wrap_are_not_joined(text, functions):
    """Only a frame line a wrap left unfinished takes the lines after it, and only lines in
    the first column that hold no frame of their own (a review found prefixed frames,
    source lines and names by themselves glued together)."""
    (proc,) = read_text(text).processes
    names = [f.function.split("(")[0] for t in proc.threads for f in t.frames]
    if functions is None:
        assert not any("(" in n or " " in n for n in names) and "main()" not in names
    else:
        assert [n for n in names if n in functions] == functions


def test_a_terminal_capture_padded_to_its_width_is_unwrapped():
    """Every line padded with spaces to the terminal's width: a line that fills the width
    without padding was wrapped, and the next line is its rest."""
    head = '  File "/home/u/.local/lib/python3.6/site-packages/ray/worker.py", li'
    w = len(head)  # the wrapped line fills the width to its last column
    rest = ["ne 1358, in cleanup", "    disconnect()", "KeyboardInterrupt"]
    text = "\n".join(["Error in atexit._run_exitfuncs:".ljust(w), "Traceback (most recent call last):".ljust(w), head]
                     + [r.ljust(w) for r in rest]) + "\n"
    (proc,) = read_text(text).processes
    assert [(f.function, f.line) for f in proc.threads[0].frames] == [("cleanup", 1358)]


def test_a_log_viewers_line_numbers_on_lines_of_their_own_are_dropped():
    """A traceback copied from a web log viewer: each line preceded by its number on a
    line of its own, indentation lost. The numbers go; the source lines stay under their frames."""
    body = ["Traceback (most recent call last):",
            'File "/app/train.py", line 12, in <module>', "main()",
            'File "/app/train.py", line 8, in main', "dist.barrier()",
            'File "/opt/torch/distributed/distributed_c10d.py", line 3685, in barrier', "work.wait()",
            "KeyboardInterrupt"]
    text = "".join(f"{n}\n{line}\n" for n, line in enumerate(body, 3))
    (proc,) = read_text(text).processes
    assert [f.function for f in proc.threads[0].frames] == ["barrier", "main", "<module>"]


def test_lines_a_mail_client_wrapped_at_spaces_are_put_back(tmp_path):
    """Wrapped at 76 columns at spaces (the space dropped): a printer's 'File:' whose
    path went to the next line whole, a C++ frame whose number stayed alone, and an NCCL
    watchdog line wrapped inside its WorkNCCL(...)."""
    text = ('File:\n"/home/u/miniconda3/envs/x/lib/python3.8/multiprocessing/spawn.py",\nline 116, in spawn_main\n'
            '  exitcode = _main(fd, parent_sentinel)\n')
    assert frame_texts(one_process(text)[1].threads[0]) == ["spawn_main (spawn.py:116)"]
    cxx = ("frame #1:\nc10d::ProcessGroupNCCL::WorkNCCL::checkTimeout(std::optional<std::chrono::duration<long,\n"
           "std::ratio<1l, 1000l> > >) + 0x1d2 (0x7f307b2b38d2 in\n/root/env/lib/python3.12/site-packages/torch/lib/libtorch_cuda.so)\n")
    assert join_wrapped(cxx.splitlines()) == [
        "frame #1: c10d::ProcessGroupNCCL::WorkNCCL::checkTimeout(std::optional<std::chrono::duration<long,std::ratio<1l, 1000l> > >)"
        " + 0x1d2 (0x7f307b2b38d2 in /root/env/lib/python3.12/site-packages/torch/lib/libtorch_cuda.so)"]
    watchdog = ("[rank6]:[E1206 18:44:16.997991020 ProcessGroupNCCL.cpp:1515] [PG 1 Rank 6] Watchdog\n"
                "caught collective operation timeout: WorkNCCL(SeqNum=7753,\n"
                "OpType=_REDUCE_SCATTER_BASE, NumelIn=544997376, NumelOut=68124672,\n"
                "Timeout(ms)=600000) ran for 600003 milliseconds before timing out.\n")
    assert text_verdict(tmp_path, watchdog) == "nccl-collective-wait"


def test_frame_lines_wrapped_inside_a_mail_quote_are_rejoined():
    """A mail reply quotes each line ("> ") and the mail client wraps inside the quote: a gdb
    frame's library goes to the next quoted line. Before, the quote hid the frame from the
    rejoin and every frame became a thread of its own."""
    text = ("> #0  0x00007f549b341d2d in read () from\n"
            "> /lib/x86_64-linux-gnu/libpthread.so.0\n"
            "> #1  0x00007f5497429112 in vio_read_buff () from\n"
            "> /usr/lib/x86_64-linux-gnu/libmysqlclient.so.18\n"
            "> #2  0x00007f5497413f8b in mysql_next_result () from\n"
            "> /usr/lib/x86_64-linux-gnu/libmysqlclient.so.18\n")
    (proc,) = read_text(text).processes
    (thread,) = proc.threads
    assert [(f.function, f.file.rsplit("/", 1)[-1]) for f in thread.frames] == [
        ("read", "libpthread.so.0"), ("vio_read_buff", "libmysqlclient.so.18"), ("mysql_next_result", "libmysqlclient.so.18")]


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_joining_a_padded_console_capture_of_sixteen_megabytes_is_linear():
    """160,000 rows padded to one width joined back: a joined line stops growing at the
    longest a frame line can be, so each join copies a bounded line. Before, each copied
    the whole line so far: over a hundred seconds of CPU for a file under the cap."""
    from hangwatch.diagnostics.pastes.unwrap import join_padded

    rows = ["x" * 99 + " "] * 3 + ["y" * 100] * 160_000
    start = time.process_time()
    joined = join_padded(rows)
    assert len(joined) < len(rows) and time.process_time() - start < 10.0


def test_frame_lines_wrapped_behind_a_timestamp_are_rejoined():
    """Each continuation carries its own prefix (a timestamp, a rank tag): the frame comes
    back whole behind the first line's."""
    text = ("2026-01-01T12:00:01.12Z #0  0x00007f549b341d2d in read () from\n"
            "2026-01-01T12:00:02.12Z /lib/x86_64-linux-gnu/libpthread.so.0\n"
            "2026-01-01T12:00:03.12Z #1  0x00007f5497429112 in vio_read_buff () from\n"
            "2026-01-01T12:00:04.12Z /usr/lib/x86_64-linux-gnu/libmysqlclient.so.18\n")
    (proc,) = read_text(text).processes
    assert [(f.function, f.file.rsplit("/", 1)[-1]) for f in proc.threads[0].frames] == [
        ("read", "libpthread.so.0"), ("vio_read_buff", "libmysqlclient.so.18")]


GDB_QP = """\
Thread 1 (Thread 0x7f7face37740 (LWP 1043353) "git"):
#0=A0 0x00007f7face375a5 in read () from /lib64/libc.so.6
#1=A0 0x00007f7facdc7418 in __GI__IO_file_underflow () from /lib64/libc.so.=
6
#2=A0 0x00007f7facdbbdc8 in getdelim () from /lib64/libc.so.6
#3=A0 0x0000000000635eb8 in strbuf_getwholeline (sb=3Dsb@entry=3D0x7ffe7067=
cbf0, fp=3D0x1cf4f20, term=3D10) at strbuf.c:633
#4=A0 0x000000000064dacc in recvline_fh (helper=3D0x1cf02c0) at transport-helper.c:=
55
"""


def test_a_mail_archives_quoted_printable_body_is_decoded():
    """A gdb backtrace kept as a mailing list archived it (quoted-printable: "=3D" for
    "=", "=A0" for a no-break space, soft breaks at the end of long lines): read as the
    backtrace it was, its innermost frame the read."""
    t = one_process(GDB_QP)[1].threads[0]
    assert [f.function for f in t.frames[:3]] == ["read", "__GI__IO_file_underflow", "getdelim"]
    assert t.frames[1].file.endswith("libc.so.6")


@pytest.mark.parametrize("text", [
    # a watchdog line: "SeqNum=18" is one escape-shaped pair and no soft break
    "[rank0]: Watchdog caught collective operation timeout: WorkNCCL(SeqNum=18, OpType=ALLREDUCE, NumelIn=1, "
    "Timeout(ms)=600000)\nThread 1 (idle): \"MainThread\"\n    wait (threading.py:320)\n",
    # code with an assignment broken at its "=": not a soft break of an encoder
    'Traceback (most recent call last):\n  File "/app/x.py", line 3, in main\n    value =\\\n    q.get()\nKeyboardInterrupt\n',
])
def test_plain_text_with_equals_signs_is_not_read_as_quoted_printable(text):
    from hangwatch.diagnostics.pastes.reader import is_quoted_printable  # noqa: PLC0415

    assert not is_quoted_printable(text)


def test_torchs_cxx_error_header_rewrapped_at_spaces_is_put_back_together(tmp_path):
    """A mail client's wrap at 76 columns splits torch's "Exception raised from run at
    /p/ProcessGroupNCCL.cpp:2074 (most recent call first):" over three lines: put back
    together, it still says the NCCL watchdog raised (a collective timed out)."""
    text = (
        "Exception raised from run at\n"
        "/pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:2074 (most recent\n"
        "call first):\n"
        "frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x80 (0x7f633ea9eeb0 in\n"
        "/opt/venv/lib/python3.10/site-packages/torch/lib/libc10.so)\n"
        "frame #1: <unknown function> + 0xe1c1a1 (0x7f62e163b1a1 in\n"
        "/opt/venv/lib/python3.10/site-packages/torch/lib/libtorch_cuda.so)\n"
        "frame #2: <unknown function> + 0xdf0e6 (0x7f634ef6e0e6 in\n"
        "/opt/venv/lib/libstdc++.so.6)\n"
    )
    assert text_verdict(tmp_path, text) == "nccl-collective-wait"


def test_a_pybt_frame_rewrapped_before_its_path_and_its_function_is_joined(tmp_path):
    """gdb's py-bt line "#12 Frame 0x.., for file /p/connection.py, line 192, in
    _read_from_socket (self=...)" wrapped by a mail client at spaces, its arguments cut."""
    text = (
        "#12 Frame 0x558935950720, for file\n"
        "/workspace/redis-py/redis/connection.py, line 192, in\n"
        "_read_from_socket (self=<SocketBuffer(_sock=<socket at remote\n"
        "0x7f01866520e0>, socket_read_size=65536, socket_timeout=None, _buffe\n"
    )
    assert text_verdict(tmp_path, text) == "socket-read"


def test_empty_variables_and_key_value_pairs_are_not_quoted_printable():
    """Two empty environment variables ("NCCL_IB_HCA=") and a watchdog line's
    "SeqNum=18": no encoder's soft breaks at its width, no "=3D": read as they are."""
    from hangwatch.diagnostics.pastes.reader import is_quoted_printable  # noqa: PLC0415

    text = ("NCCL_SOCKET_IFNAME=\nNCCL_IB_HCA=\n[rank1]:[E ProcessGroupNCCL.cpp:1316] [PG 0 Rank 1] Watchdog caught "
            "collective operation timeout: WorkNCCL(SeqNum=18, OpType=ALLREDUCE, NumelIn=1048576, NumelOut=1048576, "
            "Timeout(ms)=600000) ran for 600012 milliseconds before timing out.\n")
    assert not is_quoted_printable(text)
    assert not is_quoted_printable("prefetch workers=20\nloader workers=20\nio workers=20\n")
