"""Parsing py-spy output (real dumps of real processes, and pasted text), grouping dumps into
one series per process, and what a frame's path says."""

from __future__ import annotations

import subprocess

import pytest

from diag_helpers import DATA
from hangwatch.diagnostics.errors import InputError
from hangwatch.diagnostics.pyspy import find_pyspy, parse_json, parse_text
from hangwatch.diagnostics.stacks import group_series


def test_native_gpu_model_runner_paste_with_timestamps():
    (dump,) = parse_text((DATA / "gpu_model_runner_native.txt").read_text())
    assert dump.pid == 48213 and dump.python == "v3.12.9"
    assert dump.cmdline == "python -m trl.scripts.grpo --config grpo_qwen.yaml"
    assert [t.name for t in dump.threads] == ["MainThread", "pt_autograd_0", "Thread-3 (_report_usage_worker)"]
    main = dump.threads[0]
    assert main.active is False
    names = [f.function for f in main.frames]
    assert names[:4] == ["0x7f1c9a4f2d61", "0x7f1b2e6c1a3f", "0x7f1b2e5d90b2", "cuEventSynchronize"]
    assert "c10::cuda::CUDAEvent::synchronize() const" in names
    cu = main.frames[3]
    assert cu.native and cu.file == "libcuda.so.1" and cu.line is None
    gmr = next(f for f in main.frames if f.function == "get_output")
    assert gmr.file == "vllm/v1/worker/gpu_model_runner.py" and gmr.line == 214 and not gmr.native
    assert main.frames[-1].render() == "0x7f1c9a47624a (libc.so.6)"


def test_locals_blocks_and_elisions_are_skipped():
    (dump,) = parse_text((DATA / "gdn_chunk.txt").read_text())
    assert dump.pid == 90211 and dump.cmdline == "VLLM::EngineCore"
    (thread,) = dump.threads
    assert thread.active is True and thread.owns_gil is True
    names = [f.function for f in thread.frames]
    assert names[:5] == ["chunk_gated_delta_rule_fwd", "forward", "chunk_gated_delta_rule", "_forward_core", "qwen_gdn_attention_core"]
    assert not any(":" in n or "Tensor" in n for n in names)
    assert len(names) == 10


def test_rank_prefix_and_hex_thread_ids():
    (dump,) = parse_text((DATA / "nccl_all_reduce.txt").read_text())
    assert dump.pid == 771
    assert dump.threads[0].ident == "0x7f3a5c1fe740" and dump.threads[0].name == "MainThread"
    assert dump.threads[0].frames[0].function == "all_reduce"
    assert dump.threads[1].name == "Thread-2 (_pin_memory_loop)"


def test_same_pid_twice_is_two_rounds_and_frozen():
    text = (DATA / "unknown_reward.txt").read_text()
    series = group_series(parse_text(text + "\n" + text))
    (s,) = series
    assert [d.round for d in s.dumps] == [1, 2]
    assert s.frozen(s.latest.threads[0].ident) is True
    changed = text.replace("(rewards/judge.py:48)", "(rewards/judge.py:49)")
    (s2,) = group_series(parse_text(text + changed))
    assert s2.frozen(s2.latest.threads[0].ident) is False


def test_garbage_is_rejected_with_the_source_named():
    with pytest.raises(InputError, match="notes.txt: no py-spy stacks"):
        parse_text("hello\nworld\n", source="notes.txt")
    with pytest.raises(InputError, match="x.json"):
        parse_json('{"not": "a dump"}', source="x.json")


def _py(frames):
    return [(f.function, f.short_file, f.line) for f in frames if not f.native]


@pytest.mark.timeout(60)
def test_real_pyspy_text_and_json_agree_also_when_pasted_with_prefixes(hung_tree):
    tree = hung_tree(0)
    pid = tree.pids[0]
    pyspy = find_pyspy()
    assert pyspy, "py-spy is a dependency and must be installed for the tests"
    text = subprocess.run([pyspy, "dump", "--pid", str(pid)], capture_output=True, text=True, timeout=30, check=True).stdout
    js = subprocess.run([pyspy, "dump", "--pid", str(pid), "--json"], capture_output=True, text=True, timeout=30, check=True).stdout
    native = subprocess.run([pyspy, "dump", "--pid", str(pid), "--native"], capture_output=True, text=True, timeout=30, check=True).stdout

    (from_text,) = parse_text(text)
    from_json = parse_json(js)
    assert from_text.pid == from_json.pid == pid
    by_name_t = {t.name: _py(t.frames) for t in from_text.threads}
    by_name_j = {t.name: _py(t.frames) for t in from_json.threads}
    assert by_name_t == by_name_j
    assert by_name_j["MainThread"][0] == ("CUDAGraphWrapper.replay", "cuda_graph.py", 14)
    full = next(t for t in from_json.threads if t.name == "MainThread").frames[0]
    assert full.file.endswith("vllm/compilation/cuda_graph.py")

    pasted = "\n".join(f"> {line}   " for line in text.splitlines()).replace("    execute_model", "    ...\n>     execute_model")
    (again,) = parse_text(pasted)
    assert {t.name: _py(t.frames) for t in again.threads} == by_name_t

    (nat,) = parse_text(native)
    main = next(t for t in nat.threads if t.name == "MainThread")
    assert any(f.native for f in main.frames) and _py(main.frames) == by_name_t["MainThread"]


def test_the_text_rendering_keeps_a_traced_process_own_words_on_one_line():
    """A thread name (the trainer's own choice) with a newline forged a line of stacks.txt,
    and escape sequences in it reached whoever printed the file."""
    from hangwatch.diagnostics.stacks import Frame, ProcessDump, ProcessSeries, ThreadDump, render_text

    thread = ThreadDump(ident="1", name="main\n    forged_frame (x.py:1)\x1b]0;pwned\x07",
                        frames=(Frame("step", "train.py", 3),), active=True)
    dump = ProcessDump(pid=7, threads=(thread,), cmdline="python train.py\nProcess 1: init", round=0)
    text = render_text([ProcessSeries(7, (dump,))])
    assert "\x1b" not in text and "\x07" not in text
    assert [line for line in text.splitlines() if line.startswith(("Process", "    forged"))] == \
        ["Process 7: python train.py\\nProcess 1: init  [round 0]"]


def test_frozen_reads_each_threads_signature_once_per_round(monkeypatch):
    """``frozen`` is asked for every thread of a process; it scanned every round's threads each
    time: quadratic (a 40,000-thread bundle, under the size cap, took 6 min to report)."""
    from hangwatch.diagnostics import stacks

    reads = []
    real = stacks.ThreadDump.signature
    monkeypatch.setattr(stacks.ThreadDump, "signature", property(lambda self: reads.append(1) or real.fget(self)))
    frame = stacks.Frame("wait", "a.py", 1)
    threads = tuple(stacks.ThreadDump(str(i), "t", (frame,)) for i in range(300))
    series = stacks.ProcessSeries(1, tuple(stacks.ProcessDump(1, threads, round=r) for r in (1, 2)))
    assert all(series.frozen(t.ident) for t in threads)
    assert len(reads) == 600, "one read per thread and round, not per thread asked"


@pytest.mark.timeout(60)
def test_two_containers_pid_1_are_two_processes_not_two_looks():
    """Every container's first process is pid 1: two dumps of 'Process 1' whose other
    threads share no id are two processes (marin#7344 read as one process looked at twice,
    and the second look's event-loop thread made it 'all-idle')."""
    from hangwatch.diagnostics.stacks import Frame, ProcessDump, ThreadDump, group_series

    def dump(rnd, *idents):
        threads = (ThreadDump("1", "MainThread", (Frame("step", "train.py", 3),)),) + tuple(
            ThreadDump(i, "worker", (Frame("select", "selectors.py", 468),)) for i in idents)
        return ProcessDump(1, threads, round=rnd)

    assert [len(s.dumps) for s in group_series([dump(1, "1440", "1441"), dump(2, "1439")])] == [1, 1]
    # The same process looked at twice keeps its threads: one series of two looks.
    assert [len(s.dumps) for s in group_series([dump(1, "1440", "1441"), dump(2, "1441")])] == [2]
    # Only the main thread shown: nothing says they differ.
    assert [len(s.dumps) for s in group_series([dump(1), dump(2)])] == [2]


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("path", "stdlib"),
    [
        ("C:/Users/me/AppData/Local/Programs/Python/Python312/Lib/threading.py", True),
        ("D:/Anaconda/Lib/multiprocessing/queues.py", True),
        ("C:/venv/Lib/site-packages/torch/utils/data/dataloader.py", False),
        ("C:/work/project/train.py", False),
    ],
)
def test_windows_standard_library_paths_are_recognised(path, stdlib):
    """A Windows install keeps the standard library in '<install>\\Lib\\': a drive-letter
    path was never standard library, so a feeder thread looked like the job's own code."""
    from hangwatch.diagnostics.stacks import Frame

    assert Frame("f", path, 1).is_stdlib is stdlib
