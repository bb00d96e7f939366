"""Reading log lines that stand for a stack: NCCL watchdog timeouts, Horovod's stall warnings,
vLLM's shared-memory broadcast waits, the messages libraries log while they wait, and
vLLM's function trace log."""

from __future__ import annotations

import pytest

from diag_helpers import PASTED, frame_texts, one_process, pasted_verdict, text_verdict
from hangwatch.diagnostics.pastes import read_text

pytestmark = pytest.mark.timeout(60)


def test_nccl_watchdog_timeout_lines_are_one_rank_each_in_its_collective():
    """PyTorch's watchdog log is the only evidence many hang reports carry (Automodel#1574,
    PyTorch#20630, vLLM#6042 in data/pasted): each rank becomes a process waiting in the
    collective the watchdog names, at its sequence number; repeats of a rank are one;
    a WorkNCCL(...) wrapped onto the next line keeps the rank of the line before."""
    text = (
        "[rank2]:[E ProcessGroupNCCL.cpp:563] [Rank 2] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=4084, "
        "OpType=ALLREDUCE, NumelIn=48, NumelOut=48, Timeout(ms)=600000) ran for 600077 milliseconds before timing out.\n"
        "(RayWorkerWrapper pid=4009) [rank1]:[E ProcessGroupNCCL.cpp:563] [Rank 1] Watchdog caught collective operation timeout: "
        "WorkNCCL(SeqNum=4084, OpType=ALLREDUCE, NumelIn=48, NumelOut=48, Timeout(ms)=600000) ran for 600095 milliseconds.\n"
        "[rank1]:[E ProcessGroupNCCL.cpp:1414] [PG 1 Rank 1] Process group watchdog thread terminated with exception: [Rank 1] "
        "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=4084, OpType=ALLREDUCE, NumelIn=48)\n"
        "  [rank7]: Watchdog caught collective operation timeout:\n"
        "    WorkNCCL(SeqNum=4084, OpType=BROADCAST, NumelIn=1, NumelOut=8, Timeout(ms)=60000)\n"
    )
    report = read_text(text)
    got = {p.rank: (p.pid, frame_texts(p.threads[0])) for p in report.processes}
    assert got == {2: (None, ["nccl:allreduce (SeqNum 4084)"]), 1: (4009, ["nccl:allreduce (SeqNum 4084)"]),
                   7: (None, ["nccl:broadcast (SeqNum 4084)"])}
    assert report.skipped == 0 and "3 rank(s) known only from NCCL watchdog timeout lines" in " ".join(report.notes())
    # A rank whose stack is pasted too keeps its stack.
    report = read_text(text + '=== rank 2 ===\nThread 9 (idle): "MainThread"\n    all_reduce (torch/distributed/distributed_c10d.py:2050)\n')
    assert [frame_texts(p.threads[0]) for p in report.processes if p.rank == 2] == [["all_reduce (distributed_c10d.py:2050)"]]


def test_vllm_trace_function_log_keeps_the_calls_still_open():
    """VLLM_TRACE_FUNCTION's "Call to"/"Return from" lines (vLLM#5170): the calls never
    returned from are the stack the process hung in, innermost first."""
    text = (
        "2024-06-03 16:53:30.700000 Call to __init__ in /v/vllm/distributed/device_communicators/pynccl.py:60 from init in /v/vllm/worker.py:10\n"
        "2024-06-03 16:53:30.710000 Call to helper in /v/vllm/utils.py:5 from __init__ in /v/vllm/distributed/device_communicators/pynccl.py:90\n"
        "2024-06-03 16:53:30.720000 Return from helper in /v/vllm/utils.py:7 to __init__ in /v/vllm/distributed/device_communicators/pynccl.py:90\n"
        "2024-06-03 16:53:30.748291 Call to synchronize in /v/torch/cuda/streams.py:93 from __init__ in /v/vllm/distributed/device_communicators/pynccl.py:101\n"
    )
    _, proc = one_process(text)
    assert frame_texts(proc.threads[0]) == ["synchronize (streams.py:93)", "__init__ (pynccl.py:101)", "init (worker.py:10)"]


def test_horovod_stall_ops_on_one_line_and_missing_ranks():
    # Older logs put every stalled op on the warning's line; newer ones list missing ranks.
    text = ("WARNING: One or more tensors were submitted to be reduced ... Stalled ops: "
            "allreduce.conv1.weight [ready ranks: 1, 0, 3], allreduce.bn1.bias [ready ranks: 1, 0, 3], "
            "broadcast.step [missing ranks: 2]\n")
    report = read_text(text)
    assert sorted(p.rank for p in report.processes) == [0, 1, 3]
    assert {p.threads[0].frames[0].function for p in report.processes} == {"horovod:allreduce"}
    assert {p.threads[0].frames[0].file for p in report.processes} == {"conv1.weight"}


@pytest.mark.parametrize(
    ("name", "missing"),
    [
        # Keras tensor names with "/" and no op prefix, only "[missing ranks: ...]" lines
        ("horovod_457_missing_ranks_metric_average", (0, 1, 3, 4)),
        # TensorFlow op names ("HorovodBroadcast_..."), "Stalled ops:" on its own line
        ("horovod_534_broadcast_missing_rank0", (0,)),
    ],
)
def test_horovod_missing_ranks_lines_name_who_never_submitted(name, missing):
    report = read_text((PASTED / f"{name}.txt").read_text())
    assert report.horovod_missing is not None and report.horovod_missing[1] == missing
    assert any("never submitted" in n for n in report.notes())
    assert pasted_verdict(name) == "nccl-collective-wait"


def test_horovod_ready_ranks_with_tensorflow_op_names_on_one_line():
    # horovod#134: every stalled op on the warning's own line, names like
    # "v0/tower_0/HorovodAllreduce_..._0 [ready ranks: 2]".
    report = read_text((PASTED / "horovod_134_one_line_ready_rank_tf_names.txt").read_text())
    assert sorted(p.rank for p in report.processes) == [2, 3]
    assert {p.threads[0].frames[0].function for p in report.processes} == {"horovod:allreduce"}


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


@pytest.mark.parametrize(("text", "family"), [
    # torch's store-based barrier, behind any logger's prefix
    ("2031-01-02 03:04:05 | INFO | torch.distributed.distributed_c10d | Waiting in store based barrier to initialize "
     "process group for rank: 3, key: store_based_barrier_key:1 (world_size=8, worker_count=5, timeout=0:30:00)\n", "store-wait"),
    ("RuntimeError: Timed out initializing process group in store based barrier on rank: 1, for key: "
     "store_based_barrier_key:7 (world_size=16, worker_count=12, timeout=0:30:00)\n", "store-wait"),
    # the store's client never reaching the master
    ("[E101 10:00:00.000 socket.cpp:1000] [c10d] The client socket has timed out after 900000ms while trying to connect "
     "to (10.1.2.3, 29500).\n", "store-wait"),
    # rank 0's NCCL unique id never arriving through the store
    ("torch.distributed.DistBackendError: [2] is setting up NCCL communicator and retrieving ncclUniqueId from [0] via "
     "c10d key-value store by key '0', but store->get('0') got error: Socket Timeout\n", "nccl-comm-init"),
    # filelock's retry loop and huggingface_hub's progress line
    ("2031-01-02 03:04:05,678 - filelock - DEBUG - Lock 140000000000 not acquired on /data/cache/x.lock, waiting 0.05 "
     "seconds\n", "file-lock-wait"),
    ("Still waiting to acquire lock on /data/hf/.locks/models--a--b/abc.lock (elapsed: 30.0 seconds)\n", "file-lock-wait"),
    ("RuntimeError: DataLoader timed out after 120 seconds\n", "dataloader-wait"),
])
def test_a_librarys_wait_message_with_no_stack_names_the_wait(tmp_path, text, family):
    """A paste of only the lines a library logs while it waits: that wait, as its family."""
    assert text_verdict(tmp_path, text * 2) == family
    assert any("known only from the messages" in n for n in read_text(text).notes())


def test_a_wait_message_next_to_a_stack_leaves_the_stack_to_decide():
    text = ("Waiting in store based barrier to initialize process group for rank: 0, key: store_based_barrier_key:1 "
            "(world_size=2, worker_count=1, timeout=0:30:00)\n"
            'Thread 7 (idle): "MainThread"\n    wait (threading.py:320)\n    main (train.py:9)\n')
    (proc,) = read_text(text).processes
    assert frame_texts(proc.threads[0])[0].startswith("wait")


def test_a_wait_message_names_the_wait_of_a_stack_cut_above_it(tmp_path):
    """A Ctrl-C traceback cut in the program's own frames, under the lines a library
    logged while it waited: the logged wait goes on top of the main thread, and says so."""
    text = ("still waiting to acquire lock on /data/hub/.locks/m/abc.lock (elapsed: 20.0 seconds)\n"
            "^CTraceback (most recent call last):\n"
            '  File "/opt/app/cli.py", line 8, in <module>\n'
            "    sys.exit(main())\n"
            '  File "/opt/app/download.py", line 40, in run\n'
            "    self._download()\n"
            "KeyboardInterrupt\n")
    report, proc = one_process(text)
    assert frame_texts(proc.threads[0])[0].startswith("acquire")
    assert any("the paste's log says what it waited on" in n for n in report.notes())
    assert text_verdict(tmp_path, text) == "file-lock-wait"


def test_the_nccl_watchdogs_process_down_line_names_the_collective_of_a_cut_traceback(tmp_path):
    """ProcessGroupNCCL's "taking the entire process down" over a rank's traceback cut in
    the training step (the WorkNCCL line itself cut from the paste): that rank waited in a
    collective that timed out, not in "no known call"."""
    text = ("[rank1]:[E1002 18:16:41.516 ProcessGroupNCCL.cpp:698] [Rank 1] To avoid data inconsistency, we are "
            "taking the entire process down.\n"
            "[rank1]: Traceback (most recent call last):\n"
            '[rank1]:   File "/opt/train.py", line 90, in <module>\n'
            "[rank1]:     main()\n"
            '[rank1]:   File "/opt/train.py", line 70, in main\n'
            "[rank1]:     engine.backward(loss)\n"
            '[rank1]:   File "/opt/venv/lib/python3.10/site-packages/trainlib/engine.py", line 23, in backward\n'
            "[rank1]:     self._reduce_grads()\n")
    assert text_verdict(tmp_path, text) == "nccl-collective-wait"


def test_a_watchdog_line_with_its_sequence_number_left_out_is_still_a_rank_in_the_collective(tmp_path):
    """'[Rank 0] Watchdog caught ...:' then '  WorkNCCL(..., OpType=ALLREDUCE, ...)' on the
    next line: the second line was only read with its SeqNum, so the paste was refused."""
    text = ("[Rank 0] Watchdog caught collective operation timeout:\n"
            "  WorkNCCL(..., OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=1800000)\n"
            "  ran for 1800090 milliseconds before timing out.\n")
    assert text_verdict(tmp_path, text) == "nccl-collective-wait"


def test_function_trace_lines_without_a_caller_and_with_a_time_in_front_are_read():
    """Older vLLM's VLLM_TRACE_FUNCTION wrote 'TIME Call to f in F:N' (no 'from ...'): the
    last call not returned from is where the process is."""
    text = ("==> vllm_trace_frame_for_process_1113.log <==\n"
            "2024-04-15 13:59:04.732274 Call to init_device in /w/vllm/worker/worker.py:98\n"
            "2024-04-15 13:59:04.732280 Return from init_device in /w/vllm/worker/worker.py:104\n"
            "2024-04-15 13:59:04.981153 Call to _gather_ipc_meta in /w/vllm/custom_all_reduce.py:222\n")
    (proc,) = read_text(text).processes
    assert [f.function for f in proc.threads[0].frames] == ["_gather_ipc_meta"]
