"""Replay on a sixth round of real pasted dumps (data/pasted/, held out): the frames a
thread is *in* decide over the loop it was called from (a DataLoader joining a worker
that never exits), a collective that is still creating its communicator, AOTAutograd's
compile, Inductor's runtime autotuning synchronize, NCCL's own background threads,
gdb frames wrapped in backticks, and Horovod's stall warning."""

from __future__ import annotations

import pytest

from diag_helpers import DATA
from hangwatch.diagnostics.replay import analyse
from hangwatch.diagnostics.signatures import load_signatures

pytestmark = pytest.mark.timeout(60)

PASTED = DATA / "pasted"
SIGS = load_signatures()


def _verdict(name: str) -> str:
    (incident,) = analyse([PASTED / f"{name}.txt"], SIGS)
    return incident.classification.signature_id or "unknown"


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        # _next_data -> _shutdown_workers -> join -> os.waitpid: a worker that never exits,
        # not a loader waiting for data
        ("pytorch_26072_ctrl_c_shutdown_workers_waitpid", "child-process-wait"),
        # [rank9]: C++ frames: allreduce -> getNCCLComm -> broadcastUniqueNCCLID
        ("pytorch_131781_rank_prefixed_cpp_frames_unique_id", "nccl-comm-init"),
        # a traceback cut inside AOTAutograd's aot_dispatch_autograd
        ("pytorch_118492_compile_forever_traceback_cut", "torch-compile-stall"),
        # Inductor's runtime autotuning (do_bench synchronizes), cut before the synchronize
        ("pytorch_133053_autotune_traceback_dev_shm_paths_cut", "cuda-synchronize-wait"),
        # only NCCL's proxy and IB async-event threads were pasted: nothing decides
        ("nccl_719_gdb_proxy_and_ib_helper_threads", "all-idle"),
    ],
)
def test_round6_real_dumps(name, expected):
    assert _verdict(name) == expected


def test_aot_autograd_runtime_wrappers_are_not_a_compile():
    # ms-swift#8506's rank runs the compiled graph through AOTAutograd's runtime wrappers
    # (runtime_wrapper, call_func_at_runtime_with_args, forward in aot_autograd.py): the
    # compile-time patterns must not claim it.
    assert _verdict("msswift_8506_header_glued_to_prose_symm_mem") != "torch-compile-stall"
