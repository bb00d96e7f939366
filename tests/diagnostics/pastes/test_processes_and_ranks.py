"""Reading pasted dumps of several processes: where one process ends and the next begins, and
the pid or rank each is known by (labels, prefixes, interleaved lines, test harness numbers)."""

from __future__ import annotations

import json

import pytest

from diag_helpers import PASTED, frame_texts, one_process
from hangwatch.diagnostics.pastes import read_text

pytestmark = pytest.mark.timeout(60)


def test_rank_labelled_lines_are_one_process_per_label():
    """'DP0,1,2: frame' / 'DP3..7:  frame': ranks folded onto labelled lines (GLM notes in data/pasted)."""
    text = ("   DP0,1,2: synchronize (torch/cuda/__init__.py:1083)\n"
            "              _make_launchers (torch/_inductor/runtime/triton_heuristics.py:646)\n"
            "   DP3..7:  broadcast (torch/distributed/distributed_c10d.py:2841)\n")
    procs = read_text(text).processes
    assert [(p.rank, [f.function for f in p.threads[0].frames]) for p in procs] == [
        (0, ["synchronize", "_make_launchers"]), (3, ["broadcast"])]


def test_several_processes_and_their_separators():
    text = (
        "Process 10: python a.py\nPython v3.12.1 (/usr/bin/python3)\n\n"
        'Thread 10 (idle): "MainThread"\n    a (a.py:1)\n'
        "Stack dump for ddrl     20768  0.1  0.1 1751908 151888 pts/0  Sl   12:48   0:01 ray_worker\n"
        "Thread 0x7F4AACDE7700 (active)\n\t main_loop (ray/worker.py:1005)\n"
        "=== PID 30 ===\n"
        'Thread 31 (idle): "pool"\n    b (b.py:2)\n'
        "[rank5]: Process 50: python b.py\n[rank5]: Thread 50 (idle): \"MainThread\"\n[rank5]:     d (d.py:4)\n"
        "Pyspy dump for PID 40:\n"
        "    c (c.py:3)\n"
    )
    procs = read_text(text).processes
    assert [(p.pid, p.cmdline) for p in procs] == [(10, "python a.py"), (20768, "ray_worker"), (30, ""), (50, "python b.py"), (40, "")]
    assert procs[0].python == "v3.12.1" and procs[3].rank == 5


def test_condensed_headers_sharing_frames_are_separate_processes():
    text = (
        'Thread 688510 (active): "MainThread"\nThread 688511 (active): "MainThread"\n'
        "    broadcast (torch/distributed/distributed_c10d.py:1191)\n"
        '1 in:\nThread 688514 (idle): "MainThread"\n    _try_get_data (torch/utils/data/dataloader.py:1011)\n'
    )
    procs = read_text(text).processes
    assert [p.pid for p in procs] == [688510, 688511, 688514]  # the main thread's id is the pid
    assert [f.function for p in procs for f in p.threads[0].frames] == ["broadcast", "broadcast", "_try_get_data"]


def test_py_spy_failing_on_a_process_is_recorded_as_not_dumped():
    """A paste that shows py-spy failing on a process (m4 notes in data/pasted: the rank in
    D state): that pid is recorded as not dumped, with py-spy's reason."""
    text = (
        'Thread 280064 (active): "MainThread"\n    barrier (torch/distributed/distributed_c10d.py:2784)\n'
        "$ py-spy dump --pid 280058\nProcess 280058: ...\nError: Failed to suspend process\nReason: EPERM: Operation not permitted\n"
    )
    report = read_text(text)
    assert [p.pid for p in report.processes] == [280064]
    assert report.undumped == {280058: "Failed to suspend process; EPERM: Operation not permitted"}
    assert any("could not dump" in n for n in report.notes())


def test_interleaved_worker_tracebacks_are_read_per_pid_and_wrapped_paths_rejoined():
    """Two vLLM workers' tracebacks printed at once interleave line by line behind their
    "(Worker_TP2 pid=N) ERROR MM-DD hh:mm:ss [file.py:N]" prefixes, and the terminal wraps a
    long path onto an unprefixed line (llm-scaler#235 in data/pasted): one process per pid,
    each with its own frames; Ray's "ip=[IPv6]" and a log viewer's line number glued in front
    (OpenRLHF#1052) are prefixes too."""
    p2 = "(Worker_TP2 pid=291276) ERROR 01-12 02:58:31 [multiproc_executor.py:654] "
    p0 = "(Worker_TP0 pid=291274) ERROR 01-12 02:58:31 [multiproc_executor.py:654] "
    text = (
        p2 + "Traceback (most recent call last):\n"
        + p0 + "Traceback (most recent call last):\n"
        + p2 + '  File "/usr/lib/python3.12/dist-packages/vllm-0.10.3.egg/vll\n'
        'm/v1/worker/gpu_model_runner.py", line 3776, in _to_list\n'
        + p0 + '  File "/usr/lib/python3.12/dist-packages/vllm-0.10.3.egg/vll\n'
        'm/v1/executor/multiproc_executor.py", line 649, in worker_busy_loop\n'
        + p2 + "    self.transfer_event.synchronize()\n"
        + p2 + "RuntimeError: Native API failed. Native API returns: 20 (UR_RESULT_ERROR_DEVICE_LOST)\n"
        + p0 + "RuntimeError: Native API failed. Native API returns: 20 (UR_RESULT_ERROR_DEVICE_LOST)\n"
    )
    report = read_text(text)
    assert sorted((p.pid, frame_texts(p.threads[0])) for p in report.processes) == [
        (291274, ["worker_busy_loop (multiproc_executor.py:649)"]), (291276, ["_to_list (gpu_model_runner.py:3776)"])]
    ray = "(LLMRayActor pid=3823828, ip=[2605:340:cd51:4900:c06a:4260:c8a8:4be7])   "
    _, proc = one_process(ray + 'File "/x/vllm/device_allocator/cumem.py", line 204 in sleep\n'
                   "49192" + ray + 'File "/x/vllm/v1/worker/gpu_worker.py", line 76 in sleep\n')
    assert frame_texts(proc.threads[0]) == ["sleep (cumem.py:204)", "sleep (gpu_worker.py:76)"]


def test_a_stack_pasted_below_interleaved_worker_logs_borrows_no_pid():
    """Unprefixed lines continue the prefixed line above them (a terminal's wrap) only up
    to a blank line: a headerless stack pasted under interleaved worker logs is its own."""
    logs = "".join(f"(Worker_TP{n} pid={100 + n}) INFO 01-12 02:58:31 [a.py:1] step\n" for n in (0, 1, 0, 1))
    report = read_text(logs + "\n    all_reduce (torch/distributed/distributed_c10d.py:2050)\n    step (train.py:9)\n")
    (proc,) = report.processes
    assert proc.pid is None and frame_texts(proc.threads[0]) == ["all_reduce (distributed_c10d.py:2050)", "step (train.py:9)"]


def test_flight_recorder_stack_belongs_to_its_rank():
    """torch's flight recorder prints the timed-out rank's own stack under its watchdog line
    ("Stack trace of the failed collective:" then "#N f from /p/x.py:L", vlm-training#26 in
    data/pasted): one process, that rank, with those frames; not a second, unknown process."""
    text = (
        "[rank9]:[E607 23:46:59.25 ProcessGroupNCCL.cpp:689] [Rank 9] Watchdog caught collective operation timeout: "
        "WorkNCCL(SeqNum=190346, OpType=_ALLGATHER_BASE, NumelIn=1, NumelOut=16, Timeout(ms)=600000) ran for 600010 milliseconds before timing out.\n"
        "[rank9]:[E607 23:46:59.25 ProcessGroupNCCL.cpp:733] Stack trace of the failed collective: \n"
        "#0 all_gather_into_tensor from /env/lib/python3.12/site-packages/torch/distributed/distributed_c10d.py:4186\n"
        "#1 wrapper from /env/lib/python3.12/site-packages/torch/distributed/c10d_logger.py:83\n"
    )
    _, proc = one_process(text)
    assert proc.rank == 9 and frame_texts(proc.threads[0]) == ["all_gather_into_tensor (distributed_c10d.py:4186)", "wrapper (c10d_logger.py:83)"]


def test_pytorch_test_harness_process_number_is_a_rank_not_a_pid():
    report = read_text((PASTED / "pytorch_pr54818_faulthandler_process_timed_out_barrier.txt").read_text())
    (proc,) = report.processes
    assert proc.pid is None and proc.rank == 3


def _interleaved(prefix: str) -> str:
    """Two ranks' faulthandler output through one terminal (torchrun --tee), line by line:
    rank 0 waits in all_reduce, rank 1 is stuck in a CUDA-graph replay."""
    a = ["Thread 0x00007f1c2d7fe700 (most recent call first):",
         '  File "/usr/lib/python3.10/threading.py", line 324 in wait',
         '  File "/usr/local/lib/python3.10/dist-packages/tqdm/_monitor.py", line 60 in run',
         "",
         "Current thread 0x00007f1d8a1b7740 (most recent call first):",
         '  File "/usr/local/lib/python3.10/dist-packages/torch/distributed/distributed_c10d.py", line 2050 in all_reduce',
         '  File "/workspace/train.py", line 77 in step',
         '  File "/workspace/train.py", line 120 in main']
    b = ["Thread 0x00007f3a11ffe700 (most recent call first):",
         '  File "/usr/lib/python3.10/threading.py", line 324 in wait',
         '  File "/usr/local/lib/python3.10/dist-packages/tqdm/_monitor.py", line 60 in run',
         "",
         "Current thread 0x00007f3b5c2a1740 (most recent call first):",
         '  File "/usr/local/lib/python3.10/dist-packages/torch/cuda/graphs.py", line 88 in replay',
         '  File "/workspace/train.py", line 70 in step',
         '  File "/workspace/train.py", line 120 in main']
    return "".join(f"{prefix.format(0)}{x}\n{prefix.format(1)}{y}\n" for x, y in zip(a, b))


@pytest.mark.parametrize("prefix", ["[default{}]:", "[rank{}]:", "[trainer{}]:"])
def test_ranks_interleaved_under_their_prefixes_are_separate_processes(tmp_path, capsys, prefix):
    # Before: the ranks' lines were read in order as one process whose main thread had
    # both stacks merged (all_reduce on top of a graph replay), no ranks, no suspect.
    from hangwatch.cli.main import main  # noqa: PLC0415

    report = read_text(_interleaved(prefix))
    assert sorted(p.rank for p in report.processes) == [0, 1]
    for p in report.processes:
        (main_thread,) = [t for t in p.threads if t.frames[0].function in ("all_reduce", "replay")]
        assert [f.function for f in main_thread.frames] in (["all_reduce", "step", "main"], ["replay", "step", "main"])
    path = tmp_path / "ranks.txt"
    path.write_text(_interleaved(prefix))
    main(["replay", "--json", str(path)])
    data = json.loads(capsys.readouterr().out)
    assert data["suspect"]["rank"] == 1 and data["suspect"]["signature_id"] == "cuda-graph-replay"


@pytest.mark.parametrize("prefix", ["[rank2]: ", "2026-09-17 13:40:02 [rank2]: "])
def test_a_rank_prefixed_traceback_is_that_ranks_process(prefix):
    """One rank's traceback, every line under torchrun's "[rank2]:" (behind a timestamp or
    not), cut before its blocking frame: the process is rank 2, which is what tells a rank's
    stalled step (a collective its peers wait in) from any process's."""
    lines = ["Traceback (most recent call last):",
             '  File "/opt/venv/lib/python3.12/site-packages/swift/cli/sft.py", line 20, in <module>',
             "    sft_main()",
             '  File "/opt/venv/lib/python3.12/site-packages/swift/pipelines/base.py", line 52, in main',
             "    result = self.run()"]
    (proc,) = read_text("".join(prefix + line + "\n" for line in lines)).processes
    assert proc.rank == 2 and [f.function for f in proc.threads[0].frames] == ["main", "<module>"]


def test_ranks_tracebacks_one_after_another_are_each_ranks_process():
    """Two ranks' cut tracebacks pasted one after the other, each under its "[rankN]:": two
    processes, each with its own rank; a stack of another shape after a rank's traceback
    takes no rank from it."""
    def tb(rank, call):
        return "".join(f"[rank{rank}]: {line}\n" for line in [
            "Traceback (most recent call last):", '  File "/w/train.py", line 10, in <module>', "    main()",
            '  File "/w/train.py", line 5, in main', f"    {call}"])
    procs = read_text(tb(0, "dist.barrier()") + tb(1, "dist.all_reduce(t)")).processes
    assert [(p.rank, p.threads[0].frames[0].function) for p in procs] == [(0, "dist.barrier"), (1, "dist.all_reduce")]
    gdb = "Thread 1 (Thread 0x7f (LWP 9)):\n#0  0x00007f0d in pthread_cond_wait () from /lib/x86_64-linux-gnu/libc.so.6\n"
    procs = read_text(tb(3, "dist.barrier()") + "KeyboardInterrupt\n\n" + gdb).processes
    assert [p.rank for p in procs] == [3, None]
