"""Fake ``vllm/compilation/cuda_graph.py``: graph replay that can wedge.

A wedged replay reproduces what the host sees when a captured graph never
completes: the GPU reads 100 % busy, the waiting thread sleeps in a
synchronize call with no deadline (CPU ~0), and SIGTERM does nothing because
the Python-level handler can never run on that thread; only SIGKILL ends it.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any, Callable

from hangwatch.contract import simgpu


class CUDAGraphWrapper:
    """Wraps a runnable like vLLM's; ``arm_wedge()`` makes the next replay never finish."""

    def __init__(self, runnable: Callable[..., Any], *, wedged_mem_mib: float = 40000.0):
        self.runnable = runnable
        self._armed = False
        self._wedged_mem_mib = wedged_mem_mib

    def arm_wedge(self) -> None:
        self._armed = True

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.replay(*args, **kwargs)

    def replay(self, *args: Any, **kwargs: Any) -> Any:
        if self._armed:
            _event_synchronize(self._wedged_mem_mib)
        return self.runnable(*args, **kwargs)


def _event_synchronize(mem_mib: float) -> None:
    """Block forever, idle, with SIGTERM blocked for this thread (like cuEventSynchronize)."""
    simgpu.hold(100, mem_mib, pid=os.getpid())
    print(f"fake engine (pid {os.getpid()}): cuda graph replay wedged; SIGTERM blocked, "
          f"sim GPU held at 100 %", flush=True)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
    while True:
        time.sleep(3600)
