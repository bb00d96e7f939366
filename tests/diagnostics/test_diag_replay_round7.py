"""Replay on a seventh round of real pasted dumps (data/pasted/, held out): torch's
fatal-signal handler printing every thread ('SIGABRT(6), PID: n, Thread n:'), the NCCL
watchdog's own error backtrace ('Exception raised from run at ProcessGroupNCCL.cpp'),
a forked child stuck outside its target, any process-group backend's teardown, and
Apple MPS's device synchronize in lldb frames."""

from __future__ import annotations

import json

import pytest

from diag_helpers import PASTED, pasted_verdict, text_verdict
from hangwatch.diagnostics.pastes import read_text

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        # only the watchdog thread's 'Exception raised from run at ...ProcessGroupNCCL.cpp'
        # backtrace: it raised because a collective timed out (before: unknown, c10::Error)
        ("cachedit_761_watchdog_exception_raised_from_run_rank_suffix", "nccl-collective-wait"),
        # ProcessGroupMPI::destroy -> std::thread::join at interpreter exit
        ("pytorch_76760_gdb_processgroupmpi_destroy_join", "process-group-destroy"),
        # lldb on macOS: MPSModule_deviceSynchronize -> [_MTLCommandBuffer waitUntilCompleted]
        ("pytorch_pr141296_lldb_mps_waituntilcompleted", "cuda-synchronize-wait"),
        # a forked child in _bootstrap -> _flush_std_streams, on top of the parent's Popen
        ("vmware_runtimes_94_fork_child_flush_std_streams", "fork-inherited-lock"),
        # MPICH under mpi4py: PMPI_Bcast -> MPIR_Bcast_* -> MPIC_Recv, a rank in a different
        # collective from its peers (before: unknown, no signature knew MPI)
        ("mlcommons_storage_172_quoted_gdb_mpich_bcast", "nccl-collective-wait"),
    ],
)
def test_round7_real_dumps(name, expected):
    assert pasted_verdict(name) == expected


# torch's fatal-signal handler: one block per thread, the handler's own frame and the signal
# trampoline first. Thread 4242 is the main thread (its id is the pid).
CRASH_HANDLER = """\
SIGABRT(6), PID: 4242, Thread 4250: 
 frame #0: c10::FatalSignalHandler::stacktraceSignalHandler(bool) + 0x59 (0x7fe481bc0009 in /x/torch/lib/libc10.so)
frame #1: <unknown function> + 0x12980 (0x7fe4d2fb9980 in /lib/x86_64-linux-gnu/libpthread.so.0)
frame #2: pthread_cond_timedwait + 0x335 (0x7fe4d2fb5065 in /lib/x86_64-linux-gnu/libpthread.so.0)
frame #3: c10d::ProcessGroupNCCL::ncclCommWatchdogInternal() + 0xbab (0x7fe482f08f0b in /x/torch/lib/libtorch_cuda.so)
frame #4: c10d::ProcessGroupNCCL::ncclCommWatchdog() + 0x98 (0x7fe482f09678 in /x/torch/lib/libtorch_cuda.so)
frame #5: clone + 0x3f (0x7fe4d253261f in /lib/x86_64-linux-gnu/libc.so.6)

SIGABRT(6), PID: 4242, Thread 4242: 
 frame #0: c10::FatalSignalHandler::stacktraceSignalHandler(bool) + 0x59 (0x7fe481bc0009 in /x/torch/lib/libc10.so)
frame #1: <unknown function> + 0x12980 (0x7fe4d2fb9980 in /lib/x86_64-linux-gnu/libpthread.so.0)
frame #2: recv + 0x6f (0x7fe4d2fb8a1f in /lib/x86_64-linux-gnu/libpthread.so.0)
frame #3: c10d::TCPStore::doGet(std::string const&) + 0x32 (0x7f60aaaa0000 in /x/torch/lib/libtorch_cpu.so)
frame #4: c10d::TCPStore::get(std::string const&) + 0x55 (0x7f60aaaa1000 in /x/torch/lib/libtorch_cpu.so)
"""


def test_crash_handler_blocks_are_threads_of_the_process(tmp_path):
    # pytorch#94003/#99218: before, the 'SIGABRT(6), PID: n, Thread n:' headers were not
    # read and the frames under them were taken for an error's C++ backtrace and dropped.
    report = read_text(CRASH_HANDLER)
    (proc,) = report.processes
    assert proc.pid == 4242
    threads = {t.ident: t for t in proc.threads}
    assert set(threads) == {"4250", "4242"}
    assert threads["4242"].name == "MainThread"
    watchdog = [f.function for f in threads["4250"].frames]
    # the handler's frame and the trampoline under it are where the dump was printed from
    assert watchdog[0] == "pthread_cond_timedwait" and not any("SignalHandler" in f for f in watchdog)
    assert "c10d::ProcessGroupNCCL::ncclCommWatchdogInternal" in watchdog
    assert any("fatal-signal handler at SIGABRT(6)" in n for n in report.notes())
    # the main thread decides; the watchdog idle in its loop is a helper
    assert text_verdict(tmp_path, CRASH_HANDLER) == "nccl-comm-init"


def test_real_crash_handler_paste_reads_every_frame():
    report = read_text((PASTED / "pytorch_94003_sigabrt_crash_handler_watchdog_threads.txt").read_text())
    assert [p.pid for p in report.processes] == [15837]
    (thread,) = [t for t in report.processes[0].threads if t.ident == "15853"]
    assert [f.function for f in thread.frames][:3] == [
        "pthread_cond_timedwait", "c10d::ProcessGroupNCCL::ncclCommWatchdogInternal", "c10d::ProcessGroupNCCL::ncclCommWatchdog"]


def test_a_watchdog_stuck_outside_its_wait_still_counts(tmp_path):
    # The helper needs the watchdog's loop AND a condition-variable wait: a watchdog
    # thread stuck aborting a communicator is the stall.
    text = """\
SIGABRT(6), PID: 77, Thread 78: 
 frame #0: c10::FatalSignalHandler::stacktraceSignalHandler(bool) + 0x59 (0x7f0000000001 in /x/libc10.so)
frame #1: <unknown function> + 0x12980 (0x7f0000000002 in /lib/libpthread.so.0)
frame #2: usleep + 0x4d (0x7f0000000003 in /lib/libc.so.6)
frame #3: ncclCommAbort + 0x21 (0x7f0000000004 in /x/libnccl.so.2)
frame #4: c10d::ProcessGroupNCCL::ncclCommWatchdog() + 0x98 (0x7f0000000005 in /x/libtorch_cuda.so)
"""
    assert text_verdict(tmp_path, text) == "process-group-destroy"


def test_watchdog_raise_site_is_read_from_the_exception_header():
    # cache-dit#761: the block under 'Exception raised from run at .../ProcessGroupNCCL.cpp'
    # has only c10::Error and unnamed frames; the header says the watchdog raised it.
    report = read_text((PASTED / "cachedit_761_watchdog_exception_raised_from_run_rank_suffix.txt").read_text())
    frames = [f.function for p in report.processes for t in p.threads for f in t.frames]
    assert frames == ["nccl:collective"]
    assert any("NCCL watchdog's own error backtrace" in n for n in report.notes())


def test_an_error_backtrace_raised_elsewhere_is_still_the_stack(tmp_path):
    # Not the watchdog: a store get that timed out is where that thread waited.
    text = """\
RuntimeError: Socket Timeout
Exception raised from doWait at /pytorch/torch/csrc/distributed/c10d/TCPStore.cpp:550 (most recent call first):
frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x57 (0x7f1 in /x/libc10.so)
frame #1: c10d::TCPStore::doWait(c10::ArrayRef<std::string>, std::chrono::milliseconds) + 0x3a0 (0x7f2 in /x/libtorch_cpu.so)
frame #2: c10d::TCPStore::doGet(std::string const&) + 0x32 (0x7f3 in /x/libtorch_cpu.so)
"""
    assert text_verdict(tmp_path, text) == "nccl-comm-init"


# A forked DataLoader-style worker running its target: _bootstrap and the parent's
# popen_fork._launch are below run(), not within the innermost three frames.
FORKED_WORKER = """\
Thread 0x00007f0000000001 (most recent call first):
  File "/usr/lib/python3.10/threading.py", line 324 in wait
  File "/usr/lib/python3.10/multiprocessing/queues.py", line 113 in get
  File "/srv/app/work.py", line 12 in worker_fn
  File "/usr/lib/python3.10/multiprocessing/process.py", line 108 in run
  File "/usr/lib/python3.10/multiprocessing/process.py", line 315 in _bootstrap
  File "/usr/lib/python3.10/multiprocessing/popen_fork.py", line 71 in _launch
  File "/usr/lib/python3.10/multiprocessing/popen_fork.py", line 19 in __init__
  File "/srv/app/main.py", line 40 in <module>
"""


@pytest.mark.parametrize("text", [
    FORKED_WORKER,
    # its target blocked in C: the target's own frame is innermost
    "\n".join(line for line in FORKED_WORKER.splitlines() if "threading.py" not in line and "queues.py" not in line) + "\n",
])
def test_a_forked_child_running_its_target_is_not_an_inherited_lock(tmp_path, text):
    assert text_verdict(tmp_path, text) != "fork-inherited-lock"


def test_only_idle_nccl_watchdog_threads_decide_nothing():
    # pytorch#94003's paste shows only NCCL watchdog threads waiting for their next check:
    # helpers, so nothing is stalled (read as frames, without the helper, they were 'unknown').
    assert pasted_verdict("pytorch_94003_sigabrt_crash_handler_watchdog_threads") == "all-idle"


# A py-spy dump --locals pasted with the reporter's shell lines above it: the command line,
# the locals and the skipped shell lines carry secrets.
LOCALS_PASTE = """\
export HF_TOKEN=hf_abcdefghijklmnopqrstuvwxyzABCDEF
curl -H "Authorization: Bearer abcdefghijklmnopqrstuvwxyz0123456789" https://example.invalid
Process 4242: python train.py --hf_token hf_bcdefghijklmnopqrstuvwxyzABCDEFG --password hunter2secret
Python v3.10.12 (/usr/bin/python3.10)

Thread 4242 (idle): "MainThread"
    all_reduce (torch/distributed/distributed_c10d.py:2050)
        Arguments:
            tensor: <Tensor at 0x7f01>
        Locals:
            api_key: "sk-live-1234567890abcdef1234567890"
            password: "hunter3secret"
    main (train.py:120)
"""
SECRETS = ("hf_abcdefghijklmnopqrstuvwxyzABCDEF", "hf_bcdefghijklmnopqrstuvwxyzABCDEFG", "hunter2secret", "hunter3secret",
           "sk-live-1234567890abcdef1234567890", "abcdefghijklmnopqrstuvwxyz0123456789")


def test_replay_never_echoes_a_pastes_secrets(tmp_path, capsys):
    # Before: the pasted 'Process N:' command line was printed as is ('process: python
    # train.py --hf_token hf_...') and the skipped shell lines were quoted in --json's
    # parse report ('export HF_TOKEN=hf_...'). Locals were never echoed; still not.
    from hangwatch.cli.main import main  # noqa: PLC0415

    path = tmp_path / "dump.txt"
    path.write_text(LOCALS_PASTE)
    for argv in (["replay", str(path)], ["replay", "--json", str(path)]):
        main(argv)
        out = capsys.readouterr()
        shown = out.out + out.err
        assert "all_reduce" in shown and "[REDACTED]" in shown
        for secret in SECRETS:
            assert secret not in shown, (argv, secret)
    assert text_verdict(tmp_path, LOCALS_PASTE) == "nccl-collective-wait"


def test_open_mpi_collective_in_native_frames_is_a_collective_wait(tmp_path):
    text = """\
Thread 1 (Thread 0x7f1 (LWP 10)):
#0  0x00007f01 in opal_progress () from /usr/lib/libopen-pal.so.40
#1  0x00007f02 in ompi_request_default_wait () from /usr/lib/libmpi.so.40
#2  0x00007f03 in ompi_coll_base_allreduce_intra_recursivedoubling () from /usr/lib/libmpi.so.40
#3  0x00007f04 in PMPI_Allreduce () from /usr/lib/libmpi.so.40
"""
    assert text_verdict(tmp_path, text) == "nccl-collective-wait"


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


def test_vllm_shm_broadcast_wait_lines_alone_are_a_process_waiting_on_the_queue():
    # vllm#51986 / vllm-ascend#3717: only the engine core's log lines were pasted; before,
    # 'neither a hangwatch bundle nor a py-spy dump'.
    assert pasted_verdict("vllm_51986_shm_broadcast_log_lines_mnnvl_init") == "vllm-shm-broadcast-wait"
    report = read_text((PASTED / "vllm_ascend_3717_shm_broadcast_log_lines_only.txt").read_text())
    assert [p.pid for p in report.processes] == [323240]
    assert any("shared memory broadcast" in n for n in report.notes())


def test_a_pasted_stack_of_the_same_process_wins_over_its_shm_wait_lines():
    line = ("(EngineCore pid=77) INFO 08-13 11:27:02 [shm_broadcast.py:802] No available shared memory broadcast "
            "block found in 60 seconds. This typically happens when some processes are hanging.\n")
    stack = ('Process 77: VLLM::EngineCore\nPython v3.12.3 (/usr/bin/python3)\n\nThread 77 (idle): "MainThread"\n'
             "    get_response (vllm/v1/executor/multiproc_executor.py:387)\n    step (vllm/v1/engine/core.py:59)\n")
    report = read_text(line + line + "\n" + stack)
    (proc,) = report.processes
    assert proc.pid == 77 and proc.threads[0].frames[0].function == "get_response"
    assert report.shm_wait_only == 0


def test_shm_wait_lines_next_to_worker_stacks_do_not_take_the_suspect(tmp_path, capsys):
    # The engine core that logged the wait is waiting on its workers: with the workers'
    # stacks pasted, the odd worker out stays the suspect.
    from hangwatch.cli.main import main  # noqa: PLC0415

    line = ("(EngineCore pid=100) INFO 08-13 11:27:02 [shm_broadcast.py:802] No available shared memory broadcast "
            "block found in 60 seconds. This typically happens when some processes are hanging.\n")
    workers = "".join(
        f'Process {pid}: VLLM::Worker_TP{n}\nPython v3.12.3 (/usr/bin/python3)\n\nThread {pid} (active): "MainThread"\n'
        f"    {top}\n    execute_model (vllm/v1/worker/gpu_worker.py:300)\n"
        "    worker_busy_loop (vllm/v1/executor/multiproc_executor.py:973)\n\n"
        for n, (pid, top) in enumerate([(201, "all_reduce (torch/distributed/distributed_c10d.py:2050)"),
                                        (202, "all_reduce (torch/distributed/distributed_c10d.py:2050)"),
                                        (203, "synchronize (torch/cuda/__init__.py:1083)")]))
    path = tmp_path / "mix.txt"
    path.write_text(line + workers)
    main(["replay", "--json", str(path)])
    data = json.loads(capsys.readouterr().out)
    assert data["suspect"]["pid"] == 203
    assert 100 not in [p["pid"] for p in data["processes"]]
