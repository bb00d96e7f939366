"""Where a pasted traceback or C++ trace says a thread was blocked: Ctrl-C tracebacks,
tracebacks cut above the blocking frame, IPython tracebacks, torch's C++ frame traces."""

from __future__ import annotations

import pytest

from hangwatch.diagnostics.pastes import read_text
from hangwatch.diagnostics.waits import wait_of


def _main_thread(text: str):
    report = read_text(text)
    (proc,) = report.processes
    return proc.threads[0]


def test_a_keyboard_interrupt_traceback_blocked_in_a_c_call_names_it_from_the_source_line():
    t = _main_thread('Traceback (most recent call last):\n  File "/home/u/train.py", line 88, in <module>\n    main()\n'
                     '  File "/home/u/train.py", line 80, in main\n    time.sleep(30)\nKeyboardInterrupt\n')
    assert [f.render() for f in t.frames] == ["time.sleep (<call>)", "main (train.py:80)", "<module> (train.py:88)"]
    w = wait_of(t)
    assert w is not None and w.category == "sleep" and w.caller is not None and w.caller.function == "main"


def test_the_innermost_frame_of_a_keyboard_interrupt_traceback_is_where_it_blocked():
    t = _main_thread('^CTraceback (most recent call last):\n  File "/home/u/run.py", line 5, in <module>\n    out = q.get()\n'
                     '  File "/usr/lib/python3.10/queue.py", line 171, in get\n    self.not_empty.wait()\n'
                     '  File "/usr/lib/python3.10/threading.py", line 320, in wait\n    waiter.acquire()\nKeyboardInterrupt\n')
    w = wait_of(t)
    assert w is not None and w.category == "queue-wait" and w.caller is not None and w.caller.file.endswith("run.py")
    assert t.frames[0].function == "wait"  # a known wait already: no frame for its source line


def test_a_traceback_cut_above_the_blocking_frame_uses_the_innermost_visible_blocking_call():
    t = _main_thread('Traceback (most recent call last):\n  File "/home/u/train.py", line 88, in <module>\n    main()\n'
                     '  File "/home/u/train.py", line 80, in main\n    p.join()\n'
                     '  File "/usr/lib/python3.10/multiprocessing/process.py", line 149, in join\nKeyboardInterrupt\n')
    w = wait_of(t)
    assert w is not None and w.category == "subprocess-wait" and w.cut
    assert "cut above the blocking frame" in w.describe("MainThread")


def test_a_join_at_exit_interrupted_by_ctrl_c():
    t = _main_thread("Exception ignored in: <module 'threading' from '/usr/lib/python3.10/threading.py'>\n"
                     'Traceback (most recent call last):\n  File "/usr/lib/python3.10/threading.py", line 1567, in _shutdown\n'
                     "    lock.acquire()\nKeyboardInterrupt:\n")
    w = wait_of(t)
    assert w is not None and w.category == "thread-join" and w.calls[0] == "`threading._shutdown`"


def test_an_ipython_keyboard_interrupt_traceback_is_read_innermost_first():
    text = ("---------------------------------------------------------------------------\n"
            "KeyboardInterrupt                         Traceback (most recent call last)\n"
            "Cell In[3], line 5\n      4 ds = load_dataset('foo')\n----> 5 ds = ds.map(tokenize, num_proc=4)\n\n"
            "File /usr/local/lib/python3.10/dist-packages/datasets/utils/py_utils.py:1350, in iflatmap_unordered(pool, func)\n"
            "-> 1350     yield queue.get(timeout=0.05)\n\n"
            "File /usr/local/lib/python3.10/dist-packages/multiprocess/connection.py:253, in _ConnectionBase.recv(self)\n"
            "--> 253 buf = self._recv_bytes()\n\nKeyboardInterrupt: \n")
    t = _main_thread(text)
    assert [f.function for f in t.frames] == ["_ConnectionBase.recv", "iflatmap_unordered", "<module>"]
    w = wait_of(t)
    assert w is not None and w.category == "queue-wait" and w.caller is not None and w.caller.function == "iflatmap_unordered"


def test_a_cxx_frame_trace_behind_a_timestamp_prefix_is_read_as_native_frames():
    lines = [
        "frame #0: pthread_cond_wait + 0x1c (0x7f in /lib/x86_64-linux-gnu/libc.so.6)",
        "frame #1: std::condition_variable::wait(std::unique_lock<std::mutex>&) + 0x10 (0x7f in /lib/x86_64-linux-gnu/libstdc++.so.6)",
        "frame #2: c10d::TCPStore::doWait(c10::ArrayRef<std::string>, std::chrono::milliseconds) + 0x2c (0x7f in /opt/torch/lib/libtorch_cpu.so)",
        "frame #3: c10d::TCPStore::get(std::string const&) + 0x3b (0x7f in /opt/torch/lib/libtorch_cpu.so)",
    ]
    t = _main_thread("".join(f"2024-05-01 10:00:0{i} | node-7 | {line}\n" for i, line in enumerate(lines)))
    assert [f.function for f in t.frames][:3] == ["pthread_cond_wait", "std::condition_variable::wait", "c10d::TCPStore::doWait"]
    assert all(f.native for f in t.frames)
    w = wait_of(t)
    assert w is not None and w.category == "store-wait"



@pytest.mark.parametrize(("source", "category"), [
    ("preds = logits.argmax(-1).cpu()", "cuda-synchronize-wait"),  # the copy to the host, at the end of a chain
    ("rc = os.system(cmd)", "subprocess-wait"),
    ('answer = input("Do you wish to run the custom code? [y/N] ")', "socket-read"),  # a prompt nobody answers
    ("line = sys.stdin.readline()", "socket-read"),
    # a blocking call inside another call's arguments runs first, and blocks there
    ("_port = int(proc.stdout.readline())", "socket-read"),
    ("print(fut.result())", "future-wait"),
])
def test_a_ctrl_c_tracebacks_last_source_line_names_the_call_it_blocked_in(source, category):
    """Before, a chain's later call (.cpu() after .argmax()), os.system and input() named
    no wait."""
    t = _main_thread('Traceback (most recent call last):\n  File "/home/u/eval.py", line 88, in <module>\n    main()\n'
                     f'  File "/home/u/eval.py", line 80, in main\n    {source}\nKeyboardInterrupt\n')
    w = wait_of(t)
    assert w is not None and w.category == category, w


@pytest.mark.parametrize("source", [
    'outputs = model(input_ids, attention_mask=batch.get("attention_mask"))',  # a dict's get
    'run_server(port=int(os.environ.get("PORT", "8000")))',
    'torch.save(model.state_dict(), os.path.join(args.output_dir, f"step_{step}.pt"))',  # a path's join
])
def test_a_nested_get_or_join_on_a_busy_line_is_no_wait(source):
    """A Ctrl-C traceback of a busy loop stopped on an ordinary line: a dict's ``get`` or a
    path's ``join`` inside the arguments is no queue or thread."""
    t = _main_thread('Traceback (most recent call last):\n  File "/home/u/proj/train.py", line 88, in <module>\n    train()\n'
                     f'  File "/home/u/proj/train.py", line 61, in train\n    {source}\nKeyboardInterrupt\n')
    w = wait_of(t)
    assert w is None or w.category not in ("queue-wait", "thread-join"), w


def test_a_traceback_cut_inside_a_library_keeps_the_call_its_line_makes_with_a_nested_call():
    """ray.get(trainer.fit.remote(config)) cut inside ray's wrappers: the line's own call,
    ray.get, is the wait; the nested remote call does not hide it."""
    t = _main_thread('Traceback (most recent call last):\n'
                     '  File "/home/u/proj/train.py", line 52, in <module>\n    results = ray.get(trainer.fit.remote(config))\n'
                     '  File "/opt/conda/lib/python3.10/site-packages/ray/_private/auto_init_hook.py", line 21, in auto_init_wrapper\n'
                     '    return fn(*args, **kwargs)\n'
                     '  File "/opt/conda/lib/python3.10/site-packages/ray/_private/client_mode_hook.py", line 103, in wrapper\n'
                     '    return func(*args, **kwargs)\n')
    w = wait_of(t)
    assert w is not None and w.category == "ray-get-wait", w
