"""Waits named from the words of a frame's name when no blocking call is shown: a cut
traceback's library wrapper, a C++ library's mutex, a network client's frame. The
guess is marked as one, and it never replaces a wait the table shows."""

from __future__ import annotations

import json

import pytest

from hangwatch.cli.main import main
from hangwatch.diagnostics.named_waits import named_category
from hangwatch.diagnostics.stacks import Frame, ThreadDump
from hangwatch.diagnostics.waits import guessed_wait, wait_of

SITE = "/opt/venv/lib/python3.11/site-packages/"
USER = Frame("main", "/home/u/run.py", 9)


def _thread(*frames: Frame) -> ThreadDump:
    return ThreadDump("1", "MainThread", tuple(frames) + (USER,))


@pytest.mark.parametrize(("frame", "category"), [
    (Frame("_read_from_socket", SITE + "kvclient/connection.py", 190), "socket-read"),
    (Frame("recv", SITE + "kvclient/_compat.py", 71), "socket-read"),
    (Frame("request", SITE + "urllib3/request.py", 78), "socket-read"),  # a network client's package
    (Frame("put_object", SITE + "botocore/client.py", 10), "socket-read"),
    # a device library's read (pyserial with no timeout, waiting for the device's next byte)
    (Frame("read", "C:\\Python37\\lib\\site-packages\\serial\\serialwin32.py", 290), "socket-read"),
    (Frame("acquire_lock", SITE + "jobs/lease.py", 3), "lock-wait"),
    (Frame("folly::SharedMutexImpl::lockExclusiveImpl", "/opt/lib/_native.so", None, native=True), "lock-wait"),
    (Frame("with_file_lock", SITE + "cache/store.py", 5), "file-lock-wait"),
    (Frame("wait_for_peer", SITE + "mesh/peer.py", 5), "event-wait"),
    (Frame("mesh::Peer::WaitForPeer", "/opt/venv/lib/mesh/_C.so", None, native=True), "event-wait"),
    (Frame("join_workers", SITE + "pool/runner.py", 5), "thread-join"),
    (Frame("allreduce_grads", SITE + "trainer/dist.py", 5), "nccl-collective-wait"),
    (Frame("_sync_all_reduce", SITE + "trainer/dist.py", 5), "nccl-collective-wait"),
    (Frame("synchronize_streams", SITE + "trainer/gpu.py", 5), "cuda-synchronize-wait"),
    (Frame("run_subprocess", SITE + "tools/shell.py", 5), "subprocess-wait"),
    (Frame("communicate", SITE + "tools/shell.py", 5), "subprocess-wait"),
    # pipeline parallelism's exchange with the next stage (Megatron), not Popen.communicate
    (Frame("_communicate", SITE + "megatron/core/pipeline_parallel/p2p_communication.py", 341), "nccl-collective-wait"),
    (Frame("recv_forward", "/workspace/pipe/schedule.py", 51), "nccl-collective-wait"),
    (Frame("synchronized", SITE + "utils/decorators.py", 5), "lock-wait"),
    (Frame("kern::Stream::synchronize", "/opt/venv/lib/kern/_C.so", None, native=True), "cuda-synchronize-wait"),
    (Frame("sleep_with_backoff", SITE + "tools/retry.py", 5), "sleep"),
    # a Python call that stops something waits for its threads (a consumer's close, a
    # manager's shutdown), cut above the join itself
    (Frame("close", SITE + "google/cloud/pubsub_v1/subscriber/_protocol/streaming_pull_manager.py", 5), "thread-join"),
    (Frame("stop", SITE + "rich/live.py", 5), "thread-join"),
    (Frame("shutdown_workers", SITE + "jobs/runner.py", 5), "thread-join"),
    (Frame("stop_channels", SITE + "jupyter_client/client.py", 5), "thread-join"),
    (Frame("Engine.shutdown", "/srv/app/engine.py", 88), "thread-join"),  # py-spy's qualified names (3.11+)
])
def test_the_words_of_a_frame_name_its_wait(frame, category):
    w = guessed_wait(_thread(frame))
    assert w is not None and w.category == category and w.by_name
    assert "no blocking call is shown" in w.describe("MainThread")


@pytest.mark.parametrize("function", ["forward", "select_action", "transformer_block", "handle_event", "critical",
                                      "compute_loss", "build_vocab", "block_forever", "join", "_join_multi",
                                      "_broadcast_shape", "broadcast_tensors", "sem_seg_postprocess", "is_locked",
                                      "non_blocking_copy", "read_block_file", "install_to_all_hosts"])
def test_names_that_say_nothing_of_a_wait_name_none(function):
    assert named_category(Frame(function, SITE + "model/net.py", 1)) is None


def test_closing_an_io_object_or_a_native_handle_is_no_thread_join():
    """An I/O object's ``close`` flushes to its file or server (hdfs_native's close waits on
    the NameNode); a native library's ``close`` likewise: neither is guessed a join."""
    assert named_category(Frame("close", SITE + "hdfs_native/__init__.py", 120)) is None
    assert named_category(Frame("close", SITE + "pypaimon/filesystem/hdfs_native_file_io.py", 91)) is None
    assert named_category(Frame("Writer::close", "/opt/lib/libarrow.so", None, native=True)) is None
    # a network client's close waits on its server, as any of its frames does
    assert named_category(Frame("close", SITE + "urllib3/connectionpool.py", 1))[0] == "socket-read"
    # a name where the verb is no call that stops a thing with threads
    for name in ("stop_words", "maybe_stop", "stop_profiler", "close_figure"):
        assert named_category(Frame(name, SITE + "nlp/text.py", 1)) is None


def test_a_signal_handler_on_top_of_the_stack_is_not_what_the_thread_waited_on():
    """A program's own SIGINT handler dumped the stack: the handler's frame sits on the
    frame the signal interrupted (an SSL handshake's read), which is the wait."""
    handler = Frame("close_sig_handler", "/home/u/chat.py", 845)
    w = guessed_wait(_thread(handler, Frame("do_handshake", "/usr/lib/python2.7/ssl.py", 305),
                             Frame("decorateSocket", SITE + "SimpleWebSocketServer/SimpleWebSocketServer.py", 600)))
    assert w is not None and w.category == "socket-read"


def test_a_network_clients_frame_counts_in_py_spys_short_paths_too():
    """py-spy prints an installed library's file relative to site-packages
    ("urllib3/connectionpool.py"): still the network client's frame. Said nothing before."""
    assert named_category(Frame("_make_request", "urllib3/connectionpool.py", 537))[0] == "socket-read"
    assert named_category(Frame("_make_request", "/home/u/urllib3/connectionpool.py", 537)) is None  # a program's own copy


def test_a_network_clients_package_is_read_only_when_installed():
    """A program's own http.py is no network client; urllib3's frames are."""
    assert named_category(Frame("parse_headers", "/app/server/http.py", 3)) is None
    # an installed library's module named for a protocol reads from the network
    assert named_category(Frame("read", SITE + "fsspec/implementations/http.py", 598))[0] == "socket-read"
    # ... in a function named for I/O: one that parses is not waiting on the network
    assert named_category(Frame("parse_options_header", SITE + "werkzeug/http.py", 400)) is None
    assert named_category(Frame("_InternalParse", SITE + "google/protobuf/internal/python_message.py", 3)) is None
    assert named_category(Frame("parse_headers", SITE + "urllib3/response.py", 3))[0] == "socket-read"


def test_a_bare_wait_gives_way_to_what_its_caller_says_is_waited_for():
    """torch's op ``wait`` innermost, ZeRO-3's all-gather handle calling it: "wait" alone
    says least, the caller's words name the collective."""
    t = ThreadDump("1", "MainThread", (Frame("wait", "torch/_ops.py", 1123),
                                      Frame("AllGatherCoalescedHandle.wait", "deepspeed/runtime/zero/partition_parameters.py", 744),
                                      Frame("fetch_sub_module", "deepspeed/runtime/zero/partitioned_param_coordinator.py", 363)))
    w = guessed_wait(t)
    assert w.category == "nccl-collective-wait" and w.frames[0].function == "AllGatherCoalescedHandle.wait"
    # with nothing more specific further out, the wait stays an event's
    alone = ThreadDump("1", "MainThread", (Frame("wait", "torch/_ops.py", 1123), Frame("step", SITE + "m/b.py", 2)))
    assert guessed_wait(alone).category == "event-wait"


def test_a_thread_seen_running_is_not_guessed_to_wait():
    running = ThreadDump("1", "MainThread", (Frame("_read_from_socket", SITE + "kv/conn.py", 1), USER), active=True)
    assert guessed_wait(running) is None


def test_a_wait_the_table_shows_is_never_replaced_by_a_guess():
    shown = _thread(Frame("acquire", "/usr/lib/python3.11/threading.py", 1), Frame("download_file", SITE + "hub/io.py", 3))
    w = guessed_wait(shown)
    assert w == wait_of(shown.__class__("1", "MainThread", shown.frames)) and not w.by_name


def test_only_the_innermost_own_frames_are_read():
    """A word further out is the program's plan, not where it stopped."""
    t = ThreadDump("1", "MainThread", (Frame("crunch", SITE + "m/a.py", 1), Frame("step", SITE + "m/b.py", 2),
                                      Frame("download_all", SITE + "m/c.py", 3)))
    assert guessed_wait(t) is None


def test_replay_says_the_family_is_a_guess(tmp_path, capsys):
    """A Ctrl-C traceback cut in a client library's wrapper: replay names the family,
    says it is guessed from a name, and --json carries ``by_name``."""
    dump = tmp_path / "cut.txt"
    dump.write_text(
        "Traceback (most recent call last):\n"
        '  File "/app/worker.py", line 12, in <module>\n'
        "    item = client.pop_job()\n"
        f'  File "{SITE}kvclient/client.py", line 80, in pop_job\n'
        "    return self._read_from_socket()\n"
        "KeyboardInterrupt\n")
    assert main(["replay", str(dump)]) == 0
    out = capsys.readouterr().out
    assert "socket-read" in out and "guessed from the name" in out
    assert main(["replay", "--json", str(dump)]) == 0
    data = json.loads(capsys.readouterr().out)
    waits = data["incidents"][0]["waits_on"] if "incidents" in data else data["waits_on"]
    assert waits[0]["category"] == "socket-read" and waits[0]["by_name"] is True


def test_a_module_named_for_its_wait_names_a_helper_that_says_nothing():
    """vLLM's ``_gather_ipc_meta`` in custom_all_reduce.py: the module's name says the
    collective the function's does not; a module named for what it parses does not."""
    w = guessed_wait(_thread(Frame("_gather_ipc_meta", SITE + "vllm/distributed/custom_all_reduce.py", 222)))
    assert w is not None and w.category == "nccl-collective-wait" and w.by_name
    assert "the module of" in w.describe("MainThread")
    assert named_category(Frame("_poll_once", SITE + "jobs/file_lock.py", 3))[0] == "file-lock-wait"
    assert named_category(Frame("parse_headers", "/app/server/http.py", 3)) is None
