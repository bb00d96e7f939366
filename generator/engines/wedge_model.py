"""A real wedge in the real engine, for testing hangwatch against vLLM itself (vLLM's CPU build).

``WedgeLlamaForCausalLM`` is vLLM's own Llama, whose ``forward`` blocks for good, idle, on a
step whose batch holds the token ``hangwatch_wedge_token_id`` (a field of the model's
``config.json``; the architecture name is registered by ``engines/vllm_plugin.py``), while
the graph policy the engine was started with is on. That policy comes from the engine's
own process environment, ``HANGWATCH_ENGINE_CUDAGRAPHS`` (``on``/``off``), which
``VLLMEngine.start`` sets from the engine kwargs before ``LLM()``, so that vLLM's spawned
engine-core and worker processes inherit it: on CPU the applied cuda-graph mode reads
NONE either way, so the model cannot tell the policies apart from vLLM's config. A
trainer puts the token in its prompts from the chosen step on; restarted with graphs
off, the same batch runs.

The block is where a wedged cuda-graph replay leaves the host thread: waiting on the device
with no deadline, CPU idle, SIGTERM blocked for the thread (only SIGKILL ends it).
"""

from __future__ import annotations

import os
import signal
import sys
import time
from typing import Any

from vllm.model_executor.models.llama import LlamaForCausalLM

from hangwatch.generator.engines.vllm_engine import ENGINE_POLICY_ENV as POLICY_ENV


class WedgeLlamaForCausalLM(LlamaForCausalLM):
    def __init__(self, *, vllm_config: Any, prefix: str = "", **kwargs: Any):
        super().__init__(vllm_config=vllm_config, prefix=prefix, **kwargs)
        token = getattr(vllm_config.model_config.hf_config, "hangwatch_wedge_token_id", None)
        self._wedge_token = None if token is None else int(token)
        self._graphs_on = os.environ.get(POLICY_ENV, "on") != "off"

    def forward(self, input_ids: Any, positions: Any, *args: Any, **kwargs: Any) -> Any:
        if (self._graphs_on and self._wedge_token is not None and input_ids is not None
                and bool((input_ids == self._wedge_token).any())):
            cuda_graph_replay_synchronize()
        return super().forward(input_ids, positions, *args, **kwargs)


def cuda_graph_replay_synchronize() -> None:
    """Never returns: the host thread of a graph replay that never completes."""
    print(f"hangwatch wedge model (pid {os.getpid()}): forward wedged (graph policy on); SIGTERM blocked",
          file=sys.stderr, flush=True)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
    while True:
        time.sleep(3600)
