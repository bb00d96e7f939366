"""Replay on faulthandler and pytest-timeout dumps from real reports (data/pasted/):
library background threads never decide, and a lock wrapper's acquire is a lock wait."""

from __future__ import annotations

import pytest

from diag_helpers import DATA
from hangwatch.diagnostics.replay import analyse
from hangwatch.diagnostics.signatures import load_signatures

PASTED = DATA / "pasted"


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        # the tqdm monitor and pyzmq's gc thread: helpers only, 'idle, no signature'
        ("pytorch_193951_vllm_cpu_shard_stack_of_banners", "all-idle"),
        # 60+ threads blocked in tqdm/std.py acquire: the Python frame of a lock wrapper
        ("crystal_blog_sigabrt_faulthandler_tqdm_lock_deadlock", "lock-wait"),
    ],
)
def test_signature_on_real_faulthandler_pastes(name, expected):
    (incident,) = analyse([PASTED / f"{name}.txt"], load_signatures())
    assert (incident.classification.signature_id or "unknown") == expected


def test_queue_feeder_threads_never_decide():
    (incident,) = analyse([PASTED / "yolov5_12655_fatal_aborted_windows_paths.txt"], load_signatures())
    assert incident.classification.thread_ident == "0x00004350"  # the cut one, not a feeder
