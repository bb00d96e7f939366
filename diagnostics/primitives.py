"""The table of blocking calls: which frame means a thread waits, and on what kind of thing.

A data table (``waits`` reads it; it may grow past the usual module length). Each row
names one blocking call as a stack shows it: a Python frame (``function`` in ``file``)
or a native one (``function`` in any library). ``category`` is the family a wait
belongs to; it is also the ``signature_id`` a dump gets when a primitive is its only
evidence, so families that an existing signature already names keep that id
(``lock-wait``, ``nccl-collective-wait``, ``cuda-synchronize-wait``, ...).

Rows are tried in order and the first match wins: put a library's own rows (filelock's
``acquire``) before the generic ones (any ``acquire``). ``level``:

* ``block``: the thread sleeps in it or right under it (a C call py-spy does not show);
* ``driver``: any frame of a GPU vendor's runtime library; a wait only in a thread the
  job called into it from (a thread the driver started itself, start_thread -> libcuda,
  is its event poller, not the job waiting on the device);
* ``call``: an API call that always has visible frames under it in a whole dump
  (``Process.join`` -> ``popen_fork.wait``). A stack that *ends* at such a frame was
  cut above the blocking frame (a Ctrl-C traceback, a truncated paste).

To add a primitive: add a row here (most specific first), and a test in
tests/diagnostics/test_waits.py that builds the smallest stack showing it. A new
``category`` also needs an entry in ``FAMILIES``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Family:
    """What a category means for the reader of a report."""

    title: str
    advice: str


#: Families whose id no built-in signature has (the others reuse the signature's own
#: title and advice, found by id).
FAMILIES: dict[str, Family] = {
    "file-lock-wait": Family(
        "Waiting for a file lock",
        "The process waits for a lock file that another process holds, or that a killed process left "
        "behind (filelock, fcntl.flock/lockf, a lock-file library), or a SQLite database another connection "
        "keeps locked (a long transaction; its busy handler retries until its timeout). Find the holder (lsof or fuser on the "
        "lock file, or the other ranks' stacks): a rank stuck while holding it, or several jobs sharing one "
        "cache directory. A stale lock from a killed run can be deleted; give each node or job its own "
        "cache directory (HF_HOME, HF_DATASETS_CACHE, TORCH_EXTENSIONS_DIR) on local disk."),
    "subprocess-wait": Family(
        "Waiting for a child process (subprocess, multiprocessing, waitpid)",
        "The process waits for a child process to finish or answer (subprocess wait/communicate, "
        "os.waitpid, a multiprocessing Pool, the resource tracker's spawn). The child is the one to look "
        "at: dump it (py-spy dump --pid CHILD). A child forked while another thread held a lock can "
        "deadlock on it: prefer the spawn or forkserver start method."),
    "queue-wait": Family(
        "Waiting on a queue or pipe for a message",
        "The thread waits for an item on a queue or a message on a pipe (queue.Queue, multiprocessing "
        "queues and connections, a manager proxy) that never arrives: the producer (another thread or "
        "process) is stuck or died. Dump the producer; give the get a timeout so a lost producer raises."),
    "socket-read": Family(
        "Waiting on a socket, an HTTP response or a file descriptor",
        "The thread waits for network data (a socket, an HTTP or gRPC response, ZMQ, select/poll on "
        "descriptors). The peer is slow, stuck or gone, or a firewall drops the packets silently. Set a "
        "timeout on the client (requests' timeout=, socket.settimeout), and check the server's side."),
    "event-wait": Family(
        "Waiting on an event or condition that is never set",
        "The thread waits on a threading.Event, Condition or Barrier (or a native condition variable) "
        "that nobody signals. The thread that should set it is the culprit: look for it in the other "
        "stacks (often blocked in I/O, the GPU or a collective, or already dead)."),
    "future-wait": Family(
        "Waiting for a future's result (concurrent.futures)",
        "The thread waits for the result of work it handed to an executor. The worker running it is "
        "stuck, or the work was never started (a dead pool): look at the executor's worker threads or "
        "processes, and give result() a timeout."),
    "thread-join": Family(
        "Waiting for a thread to finish (Thread.join)",
        "The thread joins another thread that never ends. Find the joined thread in the same dump and "
        "see where it waits; at interpreter exit this is a non-daemon thread still running."),
    "asyncio-blocked": Family(
        "An asyncio event loop waiting (nothing ready to run)",
        "The event loop has no ready task: every task awaits something that never completes (a future "
        "never resolved, a lost callback, tasks awaiting each other). Dump the tasks "
        "(asyncio.all_tasks(), or python -X dev with asyncio debug) to see what each awaits."),
    "sleep": Family(
        "Sleeping (time.sleep or a native sleep)",
        "The thread sleeps, usually in a retry or polling loop that waits for a condition that never "
        "comes true (a file, a port, a flag): the condition it polls for is the thing to look at."),
    "store-wait": Family(
        "Waiting on the distributed key-value store (rendezvous, store get/wait/barrier)",
        "A rank waits for a key that another rank should set in the c10d store (rendezvous, a store "
        "barrier, a unique id): that rank never arrived, crashed, or cannot reach MASTER_ADDR:MASTER_PORT."),
    "gil-deadlock": Family(
        "Waiting to take the GIL (a GIL deadlock when its holder waits on this thread)",
        "The thread waits to take the GIL (take_gil, PyEval_RestoreThread, PyGILState_Ensure, pybind11's "
        "gil_scoped_acquire) after native code or a lock wait released it. Whoever holds the GIL does not "
        "give it back: a thread that holds the GIL while it waits on a lock or a native mutex this thread "
        "holds is a lock-order inversion. Release the GIL before blocking in native code (pybind11's "
        "gil_scoped_release, Py_BEGIN_ALLOW_THREADS) and never take a native lock while holding the GIL "
        "that another thread may hold while taking the GIL."),
    "tokenizer-wait": Family(
        "Inside a fast tokenizer call",
        "The thread is inside a Rust fast tokenizer: its thread pool can deadlock after a fork. Set "
        "TOKENIZERS_PARALLELISM=false or create the tokenizer after forking."),
    "kernel-wait": Family(
        "Blocked inside the kernel (uninterruptible sleep: a driver, a filesystem, memory)",
        "The task sleeps in a kernel call (state D in ps): no signal reaches it until the call returns, "
        "SIGKILL included, so killing the job leaves it behind. Where it waits says what to look at: a GPU "
        "driver's module ([nvidia], [amdgpu]: dmesg shows the driver's errors, NVRM Xid lines; the GPU may "
        "need a reset or the node a reboot), a network or FUSE filesystem (NFS, Lustre, a FUSE daemon: the "
        "server or the mount), disk I/O, or memory reclaim (the node is out of memory). dmesg's hung-task "
        "reports and cat /proc/PID/stack (as root) show the kernel's stack."),
}


@dataclass(frozen=True)
class Primitive:
    """One blocking call. ``file`` None: any file (native frames: any library)."""

    category: str
    what: str  # "a file lock": what the thread waits on
    label: str  # how the call is named in a report: "filelock `_acquire` -> `fcntl.flock`"
    function: re.Pattern[str]
    file: re.Pattern[str] | None
    native: bool  # True: native frames only; False: Python frames only
    level: str = "block"


def _py(category: str, what: str, label: str, function: str, file: str | None, level: str = "block") -> Primitive:
    return Primitive(category, what, label, re.compile(function), re.compile(file) if file else None, False, level)


def _c(category: str, what: str, label: str, function: str) -> Primitive:
    return Primitive(category, what, label, re.compile(function), None, True)


def _lib(category: str, what: str, label: str, function: str, lib: str) -> Primitive:
    """A native frame of one library (any function, its symbol often missing: ``?``)."""
    return Primitive(category, what, label, re.compile(function), re.compile(lib), True, "driver")


def _kernel(category: str, what: str, label: str, function: str, module: str = r"[\w-]+") -> Primitive:
    """A frame of the Linux kernel (``[kernel]``) or of one of its modules (``[nvidia]``)."""
    return Primitive(category, what, label, re.compile(function), re.compile(rf"^\[(?:{module})\]$"), True)


def _src(category: str, what: str, label: str, function: str) -> Primitive:
    """A call named by a traceback's innermost source line (see pastes.tracebacks.source_call)."""
    return Primitive(category, what, label, re.compile(function), re.compile(r"^<call>$"), True, "block")


#: The standard library's own C calls that block, as a source line names them (no frame of
#: theirs shows in a traceback): inside a client API cut above its own frames, such a call
#: on the source line is the wait (``time.sleep(60)`` in a patched ``requests.get``).
LEAF_CALL = re.compile(r"^(time|os|fcntl|select|signal)\.\w+$")


_CONN = r"(^|/)multiprocess(ing)?/"

#: Every blocking call hangwatch knows, most specific first (see the module docstring).
PRIMITIVES: tuple[Primitive, ...] = (
    # --- the Linux kernel (pastes.kernel: /proc/PID/stack, hung-task reports) ----------------
    # (first: their names are the kernel's, and a user-space row of the same name is not them)
    _kernel("kernel-wait", "the GPU driver (in the kernel)", "a GPU driver module's call", r"",
            r"nvidia|nvidia_uvm|nvidia_drm|nvidia_modeset|nvidia_peermem|nv_peer_mem|gdrdrv|amdgpu|amdkfd|i915|xe|nouveau|habanalabs"),
    _kernel("kernel-wait", "a network or FUSE filesystem (in the kernel)", "a network filesystem's call",
            r"^(rpc_wait_bit_killable|__rpc_execute|rpc_execute|nfs\w*|fuse_\w*|request_wait_answer|ll_\w+|cl_\w+|osc_\w+|ptlrpc_\w+|ceph_\w+|cifs_\w+|smb2_\w+)$"),
    _kernel("kernel-wait", "a network or FUSE filesystem (in the kernel)", "a network filesystem's call", r"",
            r"nfs|nfsv3|nfsv4|sunrpc|fuse|lustre|lnet|ptlrpc|osc|mdc|lov|ceph|libceph|cifs|gpfs|mmfs26|mmfslinux|beegfs|wekafsio"),
    _kernel("kernel-wait", "memory reclaim (in the kernel)", "the kernel reclaiming memory",
            r"^(__alloc_pages_slowpath|__alloc_pages_direct_\w+|throttle_direct_reclaim|try_to_free_pages|shrink_\w+|"
            r"compact_zone\w*|try_to_compact_pages|out_of_memory|mem_cgroup_\w*(reclaim|oom)\w*)$"),
    _kernel("kernel-wait", "disk I/O (in the kernel)", "`io_schedule`",
            r"^(io_schedule\w*|wait_on_page_bit\w*|folio_wait_bit\w*|__folio_lock\w*|__lock_page\w*|wait_on_buffer|"
            r"__wait_on_buffer|blk_mq_get_tag|jbd2_log_wait_commit|jbd2_journal_\w*wait\w*|blkdev_issue_flush|submit_bio_wait)$"),
    _kernel("socket-read", "descriptors (select/poll/epoll in the kernel)", "`epoll_wait`/`poll`/`select` (kernel)",
            r"^(ep_poll|do_epoll_wait|__x64_sys_epoll_\w+|do_sys_poll|do_select|core_sys_select|poll_schedule_timeout\w*)$"),
    _kernel("socket-read", "a socket (in the kernel)", "a socket read (kernel)",
            r"^(sk_wait_data|tcp_recvmsg\w*|inet_csk_accept|inet_accept|unix_stream_read_generic|unix_stream_data_wait|"
            r"__skb_wait_for_more_packets|__skb_recv_datagram|sock_recvmsg|__sys_recvfrom|__sys_accept4|inet_stream_connect|"
            r"__inet_stream_connect|inet_wait_for_connect)$"),
    _kernel("queue-wait", "a pipe (in the kernel)", "a pipe read (kernel)", r"^(pipe_read|pipe_wait\w*|pipe_write)$"),
    _kernel("subprocess-wait", "a child process (in the kernel)", "`wait4` (kernel)", r"^(do_wait|kernel_wait4|__do_sys_wait4|__x64_sys_wait4|__do_sys_waitid|kernel_waitid)$"),
    _kernel("sleep", "a sleep (in the kernel)", "`nanosleep` (kernel)", r"^(do_nanosleep|hrtimer_nanosleep|__x64_sys_nanosleep|common_nsleep|__x64_sys_clock_nanosleep)$"),
    _kernel("lock-wait", "a futex (a user-space lock, condition or event; the kernel's stack shows no more)", "`futex_wait` (kernel)",
            r"^(futex_wait\w*|do_futex|__x64_sys_futex|__se_sys_futex)$"),
    _kernel("kernel-wait", "a kernel lock or completion", "a kernel lock (rwsem, mutex, completion)",
            r"^(rwsem_down_(read|write)_slowpath|down_(read|write)(_killable|_interruptible)?|__down\w*|__mutex_lock\w*|"
            r"mutex_lock(_killable|_interruptible)?|wait_for_completion\w*|__wait_for_common|schedule_preempt_disabled|"
            r"percpu_down_\w+|__synchronize_srcu|synchronize_rcu\w*|flush_work|__flush_work|flush_workqueue|wait_woken)$"),
    # Any other sleep of a task in the kernel (a hung-task report's __schedule under a
    # module's own wait): the frames further out name whose call it is.
    _kernel("kernel-wait", "the kernel (a task asleep in a kernel call)", "`schedule` (kernel)",
            r"^(__schedule|schedule|schedule_timeout\w*|io_schedule_timeout|freezer_\w+|__refrigerator)$"),
    # --- file locks ---------------------------------------------------------------------
    _py("file-lock-wait", "a file lock", "filelock `_acquire` -> `fcntl.flock`", r"^(UnixFileLock\.)?_acquire$", r"(^|/)filelock/_unix\.py$"),
    _py("file-lock-wait", "a file lock", "filelock `_acquire` -> `msvcrt.locking`", r"^(WindowsFileLock\.)?_acquire$", r"(^|/)filelock/_windows\.py$"),
    _py("file-lock-wait", "a file lock", "filelock `_acquire` (a lock file created exclusively)", r"_acquire$", r"(^|/)filelock/_soft\.py$"),
    _py("file-lock-wait", "a file lock", "filelock `acquire`", r"^(\w+\.)?(acquire|__enter__|_poll_until_acquired)$", r"(^|/)filelock/"),
    # A vendored or home-grown file-lock module (datasets/utils/filelock.py, a lockfile.py):
    # its acquire loop waits on a lock file whatever the package.
    _py("file-lock-wait", "a file lock", "a file-lock module's `acquire`",
        r"^(\w+\.)?(acquire|_acquire|__enter__|lock|_lock|_do_acquire|_poll_until_acquired|wait)$",
        r"(^|/)(\w*(file_?lock|lock_?file|flock)\w*\.py|(filelock|lockfile|pidlockfile)/\w+\.py)$"),
    _py("file-lock-wait", "a file lock", "huggingface_hub `WeakFileLock`", r"WeakFileLock", None),
    _py("file-lock-wait", "a build lock file", "torch `FileBaton.wait`", r"^(FileBaton\.)?wait$", r"torch/utils/file_baton\.py$"),
    _py("file-lock-wait", "a file lock", "portalocker `lock`", r"^(\w+\.)?(lock|acquire|_acquire)$", r"(^|/)portalocker/"),
    _py("file-lock-wait", "a file lock", "fasteners `acquire`", r"^(\w+\.)?(acquire|_do_acquire|_acquire)$", r"(^|/)fasteners/"),
    _py("file-lock-wait", "a file lock", "oslo.concurrency `lock`", r"^(\w+\.)?(acquire|lock|_do_open)$", r"(^|/)oslo_concurrency/"),
    _c("file-lock-wait", "a file lock", "`flock`", r"^(__)?(flock|lockf|lockf64|fcntl|fcntl64|__fcntl64_nocancel|__libc_fcntl64)$"),
    # --- the import system ----------------------------------------------------------------
    _py("import-lock", "a module's import lock", "importlib `_ModuleLock.acquire`",
        r"^(_ModuleLock\.)?acquire$|^_lock_unlock_module$|^(_ModuleLockManager\.)?__enter__$|^_get_module_lock$",
        r"importlib[./]_bootstrap"),
    # The interpreter's global import lock (Python 2's for every import; Python 3's around
    # fork and imp.acquire_lock), taken in C: a lock wait under it waits for that lock.
    _c("import-lock", "the interpreter's import lock", "`_PyImport_AcquireLock`",
       r"^(_PyImport_AcquireLock|_imp_acquire_lock|imp_acquire_lock|import_lock_acquire)$"),
    # A codec looked up for the first time imports its module (str.encode("latin-1") in a
    # thread): under Python 2's global import lock, or a module lock another thread holds.
    _py("import-lock", "a module's import lock", "`encodings.search_function` (a codec's import)", r"^search_function$",
        r"(^|/)encodings/__init__\.py$"),
    # --- torch.distributed, NCCL, the store ------------------------------------------------
    _py("store-wait", "the distributed store", "torch.distributed rendezvous",
        r"^(\w+\.)?(next_rendezvous|_rendezvous|rendezvous|_store_based_barrier|_exit_barrier|_barrier|barrier|store_get|_get_store|sync|synchronize|get_all|_try_wait_get|_wait)$",
        r"torch/distributed/(elastic/(rendezvous|utils/store|agent)|rendezvous\.py)"),
    # Creating the c10d store: a TCPStore client connecting to the master (or the master
    # waiting for its workers) until the rendezvous timeout.
    _py("store-wait", "the distributed store", "torch.distributed `_create_c10d_store`",
        r"^(\w+\.)?_create_c10d_store$", r"torch/distributed/rendezvous\.py$"),
    # The store-based barrier that init_process_group/new_group run on the store (not a collective).
    _py("store-wait", "the distributed store", "torch.distributed `_store_based_barrier`",
        r"^(\w+\.)?_store_based_barrier$", r"torch/distributed/distributed_c10d\.py$"),
    _py("nccl-collective-wait", "a collective", "torch.distributed collective",
        r"(^|[._])(all_reduce|all_gather|all_gather_into_tensor|reduce_scatter|reduce_scatter_tensor|broadcast|barrier|"
        r"all_to_all|all_to_all_single|monitored_barrier|all_gather_object|broadcast_object_list|gather|gather_object|scatter|"
        r"scatter_object_list|reduce|send|recv|isend|irecv|batch_isend_irecv|wait_tensor|_wait_tensor|wait)$",
        r"torch/distributed/(distributed_c10d|_functional_collectives|fsdp/|c10d_logger|_composable|tensor/)|deepspeed/comm/"),
    # DDP's cross-rank checks and broadcasts at construction (and of its buffers each step):
    # C++ collectives py-spy shows no frame of, under these Python helpers.
    _py("nccl-collective-wait", "a collective", "DDP's parameter check or broadcast",
        r"^(\w+\.)?(_verify_param_shape_across_processes|_sync_module_states|_sync_params_and_buffers|_broadcast_coalesced|"
        r"_distributed_broadcast_coalesced|_default_broadcast_coalesced|_sync_buffers|_sync_module_buffers)$",
        r"torch/(distributed/utils|nn/parallel/distributed)\.py$"),
    _c("nccl-comm-init", "NCCL communicator setup", "NCCL `ncclCommInitRank`",
       r"(^|::)p?nccl(CommInitRank|CommInitRankConfig|CommInitAll|CommSplit|GetUniqueId|CommInitRankScalable)"),
    _c("nccl-collective-wait", "a collective", "NCCL collective",
       r"(^|::)p?nccl(AllReduce|AllGather|ReduceScatter|Broadcast|Bcast|Reduce|Send|Recv|GroupEnd|AllToAll|Gather|Scatter)\b"),
    _c("nccl-collective-wait", "a collective", "c10d collective",
       r"^c10d::(ProcessGroup\w*|Backend\w*|Reducer)::_?(allreduce|allgather|reduce_scatter|broadcast|reduce|gather|scatter|alltoall|barrier|send|recv|finalize_backward)\w*$"),
    _c("nccl-collective-wait", "a collective", "c10d `Work::wait`", r"^c10d::(ProcessGroup\w*::)?Work\w*::(wait|synchronize)\w*$"),
    _c("store-wait", "the distributed store", "c10d `TCPStore`",
       r"^c10d::(TCPStore::(doGet|doWait|get|wait|TCPStore|waitForWorkers|check)|detail::(TCPClient|SocketImpl|SocketConnectOp)::\w+|tcputil::connect)"),
    # --- accelerators -------------------------------------------------------------------------
    _c("cuda-synchronize-wait", "the GPU", "a device synchronize",
       r"(^|::)(cuEventSynchronize|cuStreamSynchronize|cuCtxSynchronize|cudaEventSynchronize|cudaStreamSynchronize|"
       r"cudaDeviceSynchronize|hipEventSynchronize|hipStreamSynchronize|hipDeviceSynchronize|urEventWait|"
       r"zeEventHostSynchronize|zeCommandQueueSynchronize|aclrtSynchronize\w*|rt(Stream|Device|Event)Synchronize\w*)"),
    _c("cuda-synchronize-wait", "the GPU", "a copy to the host (`.item()`)",
       r"(^|::)_?local_scalar_dense|(^|::)(cudaMemcpy|cuMemcpyDtoH|cuMemcpy|hipMemcpy)\w*$"),
    # Inside a GPU vendor's runtime or driver library, with or without symbols: a thread
    # that stays there through a hang waits on the device (a synchronize, a copy, a queue
    # the device never drains). The job's own GPU code around it (ggml's HIP backend,
    # libtorch_cuda) is the caller.
    _lib("cuda-synchronize-wait", "the GPU", "the GPU runtime (driver library)", r"",
         r"(^|/)(libcuda\.so|libcudart\w*\.so|libamdhip64\.so|libhsa-runtime64\.so|libhsakmt\.so|libze_(loader|intel_gpu)\.so|"
         r"libur_adapter_level_zero\.so|libascendcl\.so|libruntime\.so|libmusa\.so|libmusart\.so|nvcuda\.dll|amdhip64\.dll)"),
    _py("cuda-synchronize-wait", "the GPU", "`torch.cuda.synchronize`", r"(^|\.)synchronize$",
        r"(torch/(cuda|xpu|npu|musa|mps)/|torch_npu/npu/|deepspeed/accelerator/)"),
    # JAX: a device-to-host copy (print, np.asarray, float() of an Array) or block_until_ready
    # waits for every computation queued before it on the device (GPU, TPU or XLA's CPU).
    _py("cuda-synchronize-wait", "the device (JAX)", "JAX `Array._value` / `block_until_ready`",
        r"^(\w+\.)?(_value|block_until_ready|_single_device_array_to_np_array\w*|__array__|copy_to_host_async|_check_if_deleted_and_block)$",
        r"(^|/)jax/_src/(array|api|basearray|dispatch)\.py$"),
    # (torch's own Event and Stream, or a frame named without its file: threading's and
    # multiprocessing's Event.wait, as py-spy names them on Python 3.11+, are no device's)
    _py("cuda-synchronize-wait", "the GPU", "`Event.synchronize`", r"^(Event|Stream)\.synchronize$|^(Event|Stream)\.wait$",
        r"(^|/)torch(_npu)?/|^\??$"),
    # --- Ray --------------------------------------------------------------------------------------
    _py("ray-get-wait", "a Ray task or actor", "`ray.get`", r"^(get|wait)$", r"ray/(_private/)?worker\.py$", level="call"),
    _py("ray-get-wait", "a Ray task or actor", "Ray `get_objects`", r"^(\w+\.)?(get_objects|wait_objects|get_with_failure_handling)$", r"(^|/)ray/"),
    _c("ray-get-wait", "a Ray task or actor", "Ray `CoreWorker::Get`", r"CoreWorker::(Get|Wait)\b"),
    # --- the DataLoader ---------------------------------------------------------------------
    # (_get_batch / _try_get_batch: the DataLoader iterator of torch 1.0 and 1.1)
    _py("dataloader-wait", "a DataLoader worker's batch", "DataLoader `_get_data`",
        r"^(\w+\.)?(_get_data|_try_get_data|_next_data|_get_batch|_try_get_batch)$", r"torch/utils/data/dataloader\.py$|(^|/)dataloader\.py$"),
    _py("dataloader-wait", "a DataLoader worker's batch", "the pin-memory thread", r"_pin_memory_loop", r"torch/utils/data/"),
    # torch 0.x: the iterator's __next__ read the workers' queue itself (data_queue.get())
    _py("dataloader-wait", "a DataLoader worker's batch", "DataLoader `__next__`", r"^(\w+\.)?(__next__|next)$",
        r"torch/utils/data/dataloader\.py$"),
    # --- tokenizers ------------------------------------------------------------------------------
    _py("tokenizer-wait", "a fast tokenizer", "tokenizers `encode_batch`",
        r"^(\w+\.)?(_batch_encode_plus|encode_batch|encode_batch_fast|_encode_plus)$", r"tokenization_utils_fast\.py$|(^|/)tokenizers/"),
    # --- HTTP and RPC clients --------------------------------------------------------------------
    # dbus-python's (and jeepney's) blocking method call: a D-Bus service's reply over its socket
    _py("socket-read", "a D-Bus service's reply", "D-Bus blocking call",
        r"^(\w+\.)?(__call__|call_blocking|send_message_with_reply_and_block|send_and_get_reply)$",
        r"(^|/)(dbus/(proxies|connection|bus|_dbus)|jeepney/io/(blocking|threading))\.py$", level="call"),
    _py("socket-read", "an HTTP response", "requests", r"^(\w+\.)?(request|get|post|put|send|head|delete|patch)$", r"(^|/)requests/(api|sessions|adapters)\.py$", level="call"),
    _py("socket-read", "an HTTP response", "urllib3 `urlopen`", r"^(\w+\.)?(urlopen|_make_request|getresponse|read|_raw_read|_fp_read|stream|read_chunked|_update_chunk_length)$", r"(^|/)urllib3/"),
    _py("socket-read", "an HTTP response", "httpx / httpcore", r"^(\w+\.)?(handle_request|_send_single_request|_receive_event|_receive_response_headers|read|send|request|_send_handling_auth)$", r"(^|/)(httpx|httpcore)/"),
    _py("socket-read", "an HTTP response", "aiohttp", r"^(\w+\.)?(read|readline|_wait|start|_request|send)$", r"(^|/)aiohttp/"),
    _py("socket-read", "an HTTP response", "http.client `getresponse`", r"^(\w+\.)?(getresponse|begin|_read_status|read|readinto|_safe_read|_readall_chunked|_read_next_chunk_size|_get_chunk_left|readline)$", r"(^|/)http/client\.py$"),
    _py("socket-read", "an HTTP response", "`urllib.request.urlopen`", r"^(\w+\.)?(urlopen|open|do_open|http_open|https_open)$", r"(^|/)urllib/request\.py$", level="call"),
    _py("socket-read", "an RPC response", "gRPC", r"^(\w+\.)?(_blocking|__call__|_next|__next__|result|_end_unary_response_blocking|_block|_wait_once|_wait_for_ready|channel_ready_future)$", r"(^|/)grpc/"),
    _py("socket-read", "an RPC response", "rpyc", r"^(\w+\.)?(wait|value|sync_request|async_request|serve|serve_all|_recv|recv|poll|poll_all)$", r"(^|/)rpyc/"),
    _py("socket-read", "an RPC response", "xmlrpc / Pyro", r"^(\w+\.)?(request|single_request|_invoke|__call__|getresponse|parse_response)$", r"(^|/)(xmlrpc/client\.py|Pyro[45]/)"),
    _py("socket-read", "a ZMQ socket", "zmq `recv`", r"^(\w+\.)?(recv|recv_multipart|recv_pyobj|recv_json|recv_string|poll|send|send_multipart)$", r"(^|/)zmq/"),
    _py("socket-read", "a Redis reply", "redis", r"^(\w+\.)?(read_response|_read_from_socket|readline|get_message|parse_response)$", r"(^|/)redis/"),
    # A database client waiting for its server's reply (a query blocked on a table lock
    # the server holds for another session, a server gone quiet).
    _py("socket-read", "a database server's reply", "psycopg `wait`", r"^(\w+\.)?(wait|wait_\w+|_wait_\w+)$", r"(^|/)psycopg(2|_pool|_c)?/"),
    # SQLAlchemy's dialect calls into the driver's C code (psycopg2, mysqlclient): the
    # statement waits for the server there (a table lock another session holds, a server gone).
    _py("socket-read", "a database server's reply", "SQLAlchemy `do_execute` (the driver's call)",
        r"^(\w+\.)?(do_execute|do_executemany|do_execute_no_params|do_commit|do_rollback|do_close|connect)$",
        r"(^|/)sqlalchemy/engine/default\.py$"),
    # Django's database layer calling the driver's cursor (its execute wrappers run the
    # statement; a row lock another session holds, a server gone quiet, wait there), except
    # on SQLite, a file on this machine: a busy wait for its lock.
    _py("file-lock-wait", "SQLite's database lock (a statement waiting while another holds it)", "Django's SQLite backend",
        r"^(\w+\.)?(execute|executemany)$", r"(^|/)django/db/backends/sqlite3/base\.py$"),
    _py("socket-read", "a database server's reply", "Django `cursor.execute` (the driver's call)",
        r"^(\w+\.)?(_execute|_executemany|execute|executemany)$", r"(^|/)django/db/backends/(utils|(?!sqlite3/)\w+/base)\.py$"),
    _py("socket-read", "a database server's reply", "psycopg2 `execute`", r"^(\w+\.)?(execute|executemany|execute_batch|execute_values|fetch\w*|wait_select)$",
        r"(^|/)psycopg2/(extras|extensions|__init__|pool)\.py$"),
    _py("socket-read", "a database server's reply", "PyMySQL `_read_packet`",
        r"^(\w+\.)?(_read_bytes|_read_packet|read_packet|_read_query_result|_read_ok_packet)$", r"(^|/)pymysql/connections\.py$"),
    _py("socket-read", "a database server's reply", "mysql.connector `recv`", r"^(\w+\.)?(recv|recv_plain|recv_compressed|_recv_chunk)$",
        r"(^|/)mysql/connector/network\.py$"),
    # paramiko's transport thread reads the SSH socket; its client waits for the server's reply.
    _py("socket-read", "an SSH server's reply", "paramiko `Packetizer.read_all`", r"^(\w+\.)?(read_all|read_message|_read_timeout)$",
        r"(^|/)(paramiko/)?packet\.py$"),
    _py("socket-read", "an SSH server's reply", "paramiko `wait_for_response`", r"^(\w+\.)?(wait_for_response|_wait_for_response)$",
        r"(^|/)(paramiko/)?auth_handler\.py$"),
    _py("socket-read", "an SSH channel", "paramiko `Channel.recv`", r"^(\w+\.)?(recv|recv_stderr|recv_exit_status|read|_read|readline)$",
        r"(^|/)paramiko/(channel|buffered_pipe|file)\.py$"),
    # Green threads: the hub of eventlet or gevent waits for I/O on every greenlet's behalf.
    _py("socket-read", "a socket (the green-thread hub's poll)", "eventlet hub `wait`",
        r"^(\w+\.)?(wait|trampoline|run|switch|_obsolete|block_on|recv|recv_into|read|connect)$", r"(^|/)eventlet/(hubs/|greenio/|green/socket)"),
    _py("socket-read", "a socket (the green-thread hub's poll)", "gevent hub `wait`",
        r"^(\w+\.)?(wait|_wait|wait_on_watcher|switch|run|recv|recv_into|read|connect|_wait_on_socket)$",
        r"(^|/)gevent/(hub|_hub_primitives|_socket3|_socketcommon|socket|_ssl3)\.py$"),
    # huggingface_hub's download calls (an HTTP GET, the Xet client's transfer in Rust).
    _py("socket-read", "an HTTP download", "huggingface_hub download", r"^(\w+\.)?(http_get|xet_get|_request_wrapper|get_hf_file_metadata)$",
        r"(^|/)huggingface_hub/file_download\.py$"),
    # --- the standard library: sockets and descriptors --------------------------------------------
    _py("socket-read", "a socket", "`socket`", r"^(\w+\.)?(readinto|recv|recv_into|recvfrom|accept|connect|create_connection|sendall|makefile|readline)$", r"(^|/)socket\.py$"),
    _py("socket-read", "a TLS socket", "`ssl`", r"^(\w+\.)?(read|recv|recv_into|do_handshake|write|sendall|accept|connect)$", r"(^|/)ssl\.py$"),
    _py("socket-read", "a TLS socket", "pyOpenSSL", r"^(\w+\.)?(recv|recv_into|read|do_handshake|send|sendall|_raise_ssl_error)$", r"(^|/)OpenSSL/SSL\.py$"),
    _py("socket-read", "a socket or pipe", "`selectors` select", r"^(\w+\.)?select$", r"(^|/)selectors\.py$"),
    _py("socket-read", "a socket request", "socketserver `serve_forever`", r"^(\w+\.)?(serve_forever|handle_request|_handle_request_noblock)$", r"(^|/)socketserver\.py$"),
    # --- the standard library: processes ------------------------------------------------------------
    _py("subprocess-wait", "a child process", "`subprocess.run`", r"^(\w+\.)?(run|call|check_call|check_output|getoutput|getstatusoutput)$", r"(^|/)subprocess\.py$", level="call"),
    _py("subprocess-wait", "a child process", "`Popen.wait` -> `os.waitpid`", r"^(\w+\.)?(wait|_wait|_try_wait|communicate|_communicate|_execute_child|__exit__)$", r"(^|/)subprocess\.py$"),
    _py("subprocess-wait", "a child process", "multiprocessing `Process.join`", r"^(\w+\.)?join$", _CONN + r"process\.py$", level="call"),
    _py("subprocess-wait", "a child process", "multiprocessing `popen_fork.wait` -> `os.waitpid`", r"^(\w+\.)?(wait|poll|_launch)$", _CONN + r"popen_(fork|forkserver|spawn_posix|spawn_win32)\.py$"),
    _py("subprocess-wait", "a multiprocessing Pool's workers", "multiprocessing `Pool`",
        r"^(\w+\.)?(map|starmap|apply|imap|imap_unordered|join|_terminate_pool|terminate|close|__exit__)$", _CONN + r"pool\.py$", level="call"),
    # A Pool task's result (apply_async().get(), imap's next()): the main thread waits for a
    # result, as for a future's; the workers that never deliver it are the ones to dump.
    _py("future-wait", "a Pool task's result", "multiprocessing `AsyncResult.get`", r"^(\w+\.)?(get|wait|next|__next__)$", _CONN + r"pool\.py$"),
    _py("subprocess-wait", "a child process", "multiprocessing resource tracker's spawn",
        r"^(\w+\.)?(ensure_running|_ensure_running_and_write|_check_alive|_send|register|unregister|spawnv_passfds|_launch)$",
        _CONN + r"(resource_tracker|util|forkserver|popen_spawn_posix)\.py$"),
    _py("subprocess-wait", "a child process", "torch.multiprocessing `spawn`", r"^(\w+\.)?(join|start_processes|spawn)$", r"torch/multiprocessing/spawn\.py$", level="call"),
    _py("subprocess-wait", "a child process", "concurrent.futures process pool", r"^(\w+\.)?(shutdown|join_executor_internals|_adjust_process_count)$", r"concurrent/futures/process\.py$"),
    _c("subprocess-wait", "a child process", "`waitpid`", r"^(__)?(waitpid|wait4|waitid|__wait4|__libc_wait|os_waitpid\w*)$"),
    # --- the standard library: queues and pipes -------------------------------------------------------
    # (a send blocks too: on a full pipe whose reader does not read, airflow#15112's scheduler
    # and its processor each writing to the other)
    _py("queue-wait", "a multiprocessing pipe", "multiprocessing `Connection.recv`/`send`",
        r"^(\w+\.)?(recv|recv_bytes|_recv_bytes|_recv|poll|_poll|wait|accept|_exhaustive_read|answer_challenge|deliver_challenge|"
        r"send|send_bytes|_send|_send_bytes)$", _CONN + r"connection\.py$"),
    _py("queue-wait", "a multiprocessing manager", "multiprocessing manager call", r"^(\w+\.)?(_callmethod|_connect|get)$", _CONN + r"managers\.py$"),
    _py("queue-wait", "a multiprocessing queue", "multiprocessing `Queue.get`", r"^(\w+\.)?(get|put|join|_recv_bytes|join_thread)$", _CONN + r"queues\.py$"),
    _py("lock-wait", "a multiprocessing lock", "multiprocessing `Lock.acquire`", r"^(\w+\.)?(acquire|__enter__)$", _CONN + r"synchronize\.py$"),
    _py("event-wait", "a multiprocessing event", "multiprocessing `Event.wait`", r"^(\w+\.)?(wait|wait_for)$", _CONN + r"synchronize\.py$"),
    # torch.multiprocessing's queue wrapper (torch 0.x: ConnectionWrapper.recv over recv_bytes)
    _py("queue-wait", "a multiprocessing pipe", "torch.multiprocessing queue `recv`", r"^(\w+\.)?(recv|send|get|put)$",
        r"torch/multiprocessing/queue\.py$"),
    _py("queue-wait", "a queue", "`queue.Queue.get`/`put`", r"^(\w+\.)?(get|put|join)$", r"(^|/)[Qq]ueue\.py$"),  # (Python 2: Queue.py)
    _py("queue-wait", "a thread pool's work queue", "concurrent.futures worker", r"^_worker$", r"concurrent/futures/thread\.py$"),
    # --- the standard library: futures and asyncio ------------------------------------------------------
    # (Executor.__exit__ is no row: it calls shutdown(wait=True), a join of the pool's threads
    # or processes, which the pool's own row under it names.)
    _py("future-wait", "a future's result", "concurrent.futures `result`", r"^(\w+\.)*(result|wait|as_completed|exception|result_iterator|_result_or_cancel)$",
        r"concurrent/futures/_base\.py$"),
    _py("thread-join", "the pool's threads", "concurrent.futures `shutdown`", r"^(\w+\.)?(shutdown|__exit__)$", r"concurrent/futures/thread\.py$"),
    _py("asyncio-blocked", "the asyncio event loop", "asyncio `run_until_complete`",
        r"^(\w+\.)?(_run_once|run_forever|run_until_complete|run|select|_poll|_run)$", r"(^|/)asyncio/(base_events|runners|windows_events|proactor_events|selector_events)\.py$"),
    _py("asyncio-blocked", "the asyncio event loop", "uvloop", r"^(\w+\.)?(run|run_forever|run_until_complete)$", r"(^|/)uvloop"),
    # --- the standard library: threads, locks, events --------------------------------------------------
    _py("thread-join", "a thread", "`Thread.join` -> `_wait_for_tstate_lock`", r"^(Thread\.)?(join|_wait_for_tstate_lock)$", r"(^|/)threading\.py$"),
    _py("thread-join", "the non-daemon threads at exit", "`threading._shutdown`", r"^_shutdown$", r"(^|/)threading\.py$"),
    # A chain written by name only ("_wait_for_tstate_lock -> join -> ..."): the name is threading's alone.
    _py("thread-join", "a thread", "`Thread.join` -> `_wait_for_tstate_lock`", r"^(Thread\.)?_wait_for_tstate_lock$", r"^\?$"),
    _py("event-wait", "an Event or Condition", "`threading` `wait`", r"^(Condition\.|Event\.|Barrier\.)?(wait|wait_for|_wait)$", r"(^|/)threading\.py$"),
    _py("lock-wait", "a lock", "`threading` `acquire`", r"^(\w+\.)?(acquire|__enter__)$", r"(^|/)threading\.py$"),
    _py("gil-deadlock", "the GIL", "waiting for the GIL", r"^<waiting for the GIL>$", None),
    # logging's module lock (taken by every logger's isEnabledFor cache, dictConfig, addHandler).
    _py("lock-wait", "logging's module lock", "logging `_acquireLock`", r"^(_acquireLock|_acquireModuleLock)$", None),
    # A lock class's own acquire (tqdm's, logging's Handler.acquire): the C lock under it is not shown.
    _py("lock-wait", "a lock", "`acquire`", r"^(\w+\.)?acquire$", None),
    # A lock wrapper's own `_acquire` (a profiler's or tracer's proxy around threading's lock)
    # in a module named for locks.
    _py("lock-wait", "a lock", "a lock wrapper's `_acquire`", r"^(\w+\.)?_acquire$", r"(^|/)_?\w*locks?\.py$"),
    # A library's own lock class entered with ``with`` (httpcore's _synchronization.py Lock,
    # a mutex.py, a locking.py): its __enter__ takes the lock in C (a frame py-spy does not show).
    _py("lock-wait", "a lock", "a lock class's `__enter__`", r"^(\w+\.)?(__enter__|acquire|_acquire|lock)$",
        r"(^|/)_?(\w*_)?(locks?|locking|mutex(es)?|synchroni[sz]ation|sync_primitives|semaphores?)\.py$"),
    # h5py's global lock ("phil"), taken by the wrapper around every h5py call: a thread idle
    # in the wrapper waits for it (a garbage collection closing an h5py object inside another
    # h5py call, or a thread holding it while it waits on this one).
    _py("lock-wait", "h5py's global lock (phil), or the HDF5 call under it", "h5py `with_phil`", r"(^|\.)with_phil(\.wrapper)?$", r"(^|/)(h5py/)?_objects(\.pyx)?$"),
    # --- the call on a Ctrl-C traceback's innermost source line ------------------------------------
    _src("file-lock-wait", "a file lock", "`fcntl.flock`", r"(^|\.)(flock|lockf)$"),
    _src("file-lock-wait", "a lock file", "a file lock's `wait`/`acquire`",
         r"(^|\.)\w*(baton|file_?lock|lock_?file)\w*\.(wait|acquire|_acquire|lock)$"),
    _src("sleep", "a sleep", "`time.sleep`", r"(^|\.)sleep$"),
    _src("subprocess-wait", "a child process", "`os.waitpid`",
         r"^os\.(waitpid|wait|wait3|wait4|waitid|system|popen|spawn\w{1,4})$|\.communicate$|^subprocess\.\w+$"),
    # A prompt nobody answers: a job started without a terminal (a remote code trust prompt,
    # a "continue? [y/N]") reads standard input forever.
    _src("socket-read", "standard input (a prompt nobody answers)", "`input()` / `sys.stdin.read`",
         r"^(input|raw_input|getpass(\.getpass)?)$|(^|\.)stdin\.(read|readline|readlines)$"),
    _src("ray-get-wait", "a Ray task or actor", "`ray.get`", r"^ray\.(get|wait)$"),
    _src("store-wait", "the distributed store", "a c10d store's constructor or call",
         r"(^|\.)(TCPStore|store\.(get|wait|set|add|compare_set|multi_get))$"),
    _src("nccl-collective-wait", "a collective", "torch.distributed collective",
         r"(^|\.)(all_reduce|all_gather|all_gather_into_tensor|reduce_scatter|reduce_scatter_tensor|broadcast|barrier|all_to_all|all_to_all_single|monitored_barrier)$"),
    _src("cuda-synchronize-wait", "the GPU", "`synchronize` / `.item()` / `.cpu()`", r"(^|\.)(synchronize|item|tolist|cpu)$"),
    _src("future-wait", "a future's result", "`Future.result`", r"\.result$"),
    _src("thread-join", "a thread or process", "`join`", r"\.join$"),
    _src("lock-wait", "a lock", "`acquire`", r"\.acquire$"),
    _src("event-wait", "an Event or Condition", "`wait`", r"\.(wait|wait_for)$"),
    # A socket object's own read (``sock.recv(n)``, ``self._sock.recv_into(buf)``) before a
    # pipe's or a queue's ``recv``/``get``.
    _src("socket-read", "a socket", "`socket.recv`", r"(^|\.)\w{0,40}sock\w{0,40}\.(recv|recv_into|recvfrom|accept|connect|read|readinto|sendall)$"),
    # An I/O loop's poll (pika's ioloop.poll(), a selector's select, a select.poll object kept
    # as ``self._poll``): a socket wait, not a queue's.
    _src("socket-read", "a socket (an I/O loop's poll)", "an I/O loop's `poll`",
         r"(^|\.)(\w{0,30}(ioloop|io_loop|event_loop|selector|poller|epoll|reactor)\w{0,10}|_?poll(_obj)?)\.(poll|select|run_once|wait)$"),
    _src("queue-wait", "a queue", "`get`", r"\.(get|get_nowait|recv|recv_bytes|poll)$"),
    _src("socket-read", "a socket or file read", "`read`/`recv`", r"\.(recv|recv_into|recvfrom|accept|connect|read|readline|readinto)$|(^|\.)(select|urlopen)$"),
    # --- native waits under all of the above -------------------------------------------------------------
    _c("thread-join", "a thread", "`pthread_join`", r"^_{0,3}pthread_(clock|timed)?join(_common|_np)?\w*$|^std::thread::join$"
       r"|^std::thread::(JoinHandle<\w+>|JoinInner<\w+>)::join$|^std::sys::\w+(::\w+){0,3}::[Tt]hread::join$"),
    # Taking the GIL: these frames stay on a stack only while the thread waits for it
    # (drop_gil: a forced switch waits until another thread took it).
    _c("gil-deadlock", "the GIL", "`take_gil`",
       r"^(take_gil|drop_gil|PyEval_RestoreThread|PyEval_AcquireThread|PyEval_AcquireLock|PyGILState_Ensure|PyCOND_TIMEDWAIT|PyCOND_WAIT|_PyEval_TakeGIL|_PyThreadState_Attach|tstate_wait_attach)$|gil_scoped_acquire::gil_scoped_acquire$"),
    # queue.SimpleQueue's get is C (_queue): its lock wait under it is the queue's
    _c("queue-wait", "a queue", "`SimpleQueue.get`", r"^_queue_SimpleQueue_get(_impl)?$"),
    _c("lock-wait", "a Python lock", "`PyThread_acquire_lock`", r"^(PyThread_acquire_lock(_timed)?|lock_PyThread_acquire_lock|acquire_timed|rlock_acquire|_PyMutex_LockTimed|_PyMutex_LockSlow|PyMutex_Lock|EnterNonRecursiveMutex)$"),
    _c("event-wait", "a condition variable", "`pthread_cond_wait`",
       r"^(__)?pthread_cond_(timed|clock)?wait\w*$|^std::condition_variable(_any)?::(wait|wait_for|wait_until|__wait_until_impl)\w*$|^___pthread_cond_\w*wait\w*$"),
    _c("lock-wait", "a mutex", "`pthread_mutex_lock`", r"^(__)?pthread_mutex_(timed|clock)?lock\w*$|^___pthread_mutex_lock$|^(__)?lll_lock_wait\w*$|^std::mutex::lock$"),
    # macOS: the kernel calls under pthread's condition variables, mutexes and os_unfair_lock
    _c("event-wait", "a condition variable", "`__psynch_cvwait`", r"^__psynch_cvwait$|^_pthread_cond_wait$"),
    _c("lock-wait", "a mutex", "`__psynch_mutexwait`", r"^__psynch_mutexwait$|^__ulock_wait2?$|^_pthread_mutex_firstfit_lock_wait$"),
    _c("sleep", "a sleep", "`__semwait_signal`", r"^__semwait_signal$"),
    _c("lock-wait", "a semaphore", "`sem_wait`", r"^(__new_|__old_)?sem_(timed|clock)?wait\w*$|^do_futex_wait\w*$|^__new_sem_wait_slow\w*$"),
    _c("socket-read", "a file descriptor", "`poll`/`epoll_wait`/`select`",
       r"^(__)?(poll|ppoll|epoll_wait|epoll_pwait2?|select|pselect6?|__select|___poll|__GI___poll|__GI_epoll_wait|kevent|WaitForMultipleObjects(Ex)?|GetQueuedCompletionStatus(Ex)?)$"),
    _c("socket-read", "a socket or pipe", "`read`/`recv`",
       r"^(__)?(libc_)?(read|recv|recvfrom|recvmsg|accept4?|connect)(_nocancel)?$|^__GI___libc_read$|^sock_(recv|recv_into|accept)\w*$"),
    _c("sleep", "a sleep", "`nanosleep`", r"^(__)?(nanosleep|clock_nanosleep|usleep|sleep|pysleep|time_sleep|__clock_nanosleep\w*|Sleep|SleepEx)$"),
    # SQLite's busy handler: a connection waiting for another's lock on the database file
    # (the sqlite3 module's timeout=, a busy_timeout), sleeping between retries until it ends.
    _c("file-lock-wait", "a SQLite database's lock (its busy handler retrying)", "SQLite busy handler",
       r"^(sqlite3InvokeBusyHandler|sqliteDefaultBusyCallback|btreeInvokeBusyHandler)$"),
    # Spin locks and read-write locks (glibc's, UCX's and other libraries' wrappers of them).
    _c("lock-wait", "a spin lock", "`pthread_spin_lock`", r"^(__)?pthread_spin_lock$|^\w*_spin(lock)?_lock\w*$|^_raw_spin_lock\w*$"),
    # abseil's (gRPC, Ray, TensorFlow, XLA): its SpinLock's slow path and the delay it spins in,
    # and its Mutex (a futex under it names nothing alone).
    _c("lock-wait", "a spin lock (abseil)", "absl `SpinLock`",
       r"(^|::)(SpinLock::(Lock|SlowLock|LockSlow)|SpinLockWait|SpinLockDelay)$|^AbslInternalSpinLockDelay\w{0,40}$"),
    _c("lock-wait", "a mutex (abseil)", "absl `Mutex::Lock`", r"(^|::)Mutex::(Lock|LockSlow|LockSlowWithDeadline|ReaderLock|WriterLock)$"),
    _c("lock-wait", "a read-write lock", "`pthread_rwlock_*lock`",
       r"^(__)?pthread_rwlock_(timed|clock)?(rd|wr)lock\w*$|^std::shared_mutex::lock(_shared)?$"),
    # Windows: critical sections, SRW locks and kernel waits (WinDbg's `kb`, a minidump's stack).
    _c("lock-wait", "a critical section", "`EnterCriticalSection`",
       r"^(Rtl|Rtlp)?EnterCriticalSection\w*$|^RtlpWaitOnCriticalSection$|^RtlpEnterCriticalSectionContended$|^(Rtl)?AcquireSRWLock(Exclusive|Shared)$|^RtlpWaitOnAddress\w*$|^WaitOnAddress$"),
    _c("event-wait", "a kernel object (an event, a mutex, a thread)", "`WaitForSingleObject`",
       r"^(WaitForSingleObject(Ex)?|MsgWaitForMultipleObjects(Ex)?|(Nt|Zw)WaitForSingleObject|(Nt|Zw)WaitForMultipleObjects(32)?|(Nt|Zw)WaitForAlertByThreadId|SleepConditionVariable(CS|SRW)|RtlSleepConditionVariable(CS|SRW))$"),
    _c("sleep", "a sleep", "`NtDelayExecution`", r"^(Nt|Zw)DelayExecution$"),
    _c("lock-wait", "a futex (a lock or condition)", "`futex`", r"^(__)?(futex_wait\w*|futex_abstimed_wait\w*|futex)$|^__futex_abstimed_wait_common\w*$|^futex_wait_cancelable$"),
)
