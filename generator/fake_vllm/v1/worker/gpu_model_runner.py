"""Fake ``vllm/v1/worker/gpu_model_runner.py``: the host-side wait on a step's output."""

from __future__ import annotations

from typing import Any, Callable


class AsyncModelRunnerOutput:
    """A step's output that is only materialised by waiting for the device (``get_output``)."""

    def __init__(self, runnable: Callable[..., Any], inputs: Any):
        self._runnable = runnable
        self._inputs = inputs

    def get_output(self) -> Any:
        return self._sync_output()

    def _sync_output(self) -> Any:
        # In vLLM this is the copy-event synchronize that waits for the graph
        # replay; here the replay itself runs (and wedges) at this point.
        return self._runnable(self._inputs)


class GPUModelRunner:
    def __init__(self, runnable: Callable[..., Any], compilation_config: Any = None):
        self.runnable = runnable
        self.compilation_config = compilation_config  # the worker's resolved copy, as in vLLM

    def execute_model(self, inputs: Any) -> AsyncModelRunnerOutput:
        return AsyncModelRunnerOutput(self.runnable, inputs)
