"""The fake engine: vLLM's sleep/wake/load contract on CPU, strict, deterministic, able to wedge.

Lifecycle (``EngineState``)::

    NEW --start--> ASLEEP --wake_weights--> WEIGHTS_AWAKE --wake_kv--> AWAKE
                     ^                        | load_weights             | generate, load_weights
                     +--------- sleep --------+--------------------------+
    any --close--> CLOSED

Sleep is level 2: weights and KV cache are discarded, so after
``wake_weights`` the model holds garbage until ``load_weights``; generating
before that, loading while weights sleep, waking KV before weights, or
generating with a prefix cache left over from older weights (load while
awake without ``reset_prefix_cache``) all raise ``EngineStateError``.

Engine kwargs: vLLM's are accepted (``model``, ``seed``, ``enable_sleep_mode``
(required, as vLLM's sleep needs it), ``enforce_eager``,
``compilation_config``, ...). The fake adds, strictly checked:

* ``fake_model_config``: ``ToyConfig`` fields (the engine's packed model);
* ``fake_wedge_on_generate=K``: the K-th generate call (1-based) wedges;
* ``fake_wedge_at_seed=S``: a generate call with ``seed == S`` wedges;
* ``fake_generate_busy_s``: minimum CPU-busy time per generate (default 0.02),
  a stand-in for the scheduler loop.

A wedge happens ONLY when cuda graphs are on in the kwargs (not with
``enforce_eager=True`` or ``cudagraph_mode="NONE"``), inside
``fake_vllm/compilation/cuda_graph.py`` (see there).
"""

from __future__ import annotations

import enum
import hashlib
import os
import time
from typing import Any, Mapping

import torch

from hangwatch.generator.engines.toy_model import PackedToyModel, ToyConfig
from hangwatch.generator.errors import EngineStateError
from hangwatch.generator.fake_vllm.compilation.cuda_graph import CUDAGraphWrapper
from hangwatch.generator.fake_vllm.v1.worker.gpu_model_runner import GPUModelRunner
from hangwatch.generator.policy import cudagraphs_enabled_in
from hangwatch.generator.staging import StagedReader
from hangwatch.generator.weightsync import verify_loaded
from hangwatch.contract import simgpu

FAKE_KWARGS = {"fake_model_config", "fake_wedge_on_generate", "fake_wedge_at_seed", "fake_generate_busy_s"}
_CUDAGRAPH_MODES = {"NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE"}


class EngineState(enum.Enum):
    NEW = "new"
    ASLEEP = "asleep"
    WEIGHTS_AWAKE = "weights_awake"
    AWAKE = "awake"
    CLOSED = "closed"


S = EngineState
# (state, operation) -> next state. A pair not listed is misuse.
TRANSITIONS: dict[tuple[EngineState, str], EngineState] = {
    (S.NEW, "start"): S.ASLEEP,
    (S.ASLEEP, "wake_weights"): S.WEIGHTS_AWAKE,
    (S.ASLEEP, "sleep"): S.ASLEEP,
    (S.ASLEEP, "reset_prefix_cache"): S.ASLEEP,
    (S.WEIGHTS_AWAKE, "load_weights"): S.WEIGHTS_AWAKE,
    (S.WEIGHTS_AWAKE, "reset_prefix_cache"): S.WEIGHTS_AWAKE,
    (S.WEIGHTS_AWAKE, "wake_kv"): S.AWAKE,
    (S.WEIGHTS_AWAKE, "sleep"): S.ASLEEP,
    (S.AWAKE, "load_weights"): S.AWAKE,
    (S.AWAKE, "reset_prefix_cache"): S.AWAKE,
    (S.AWAKE, "generate"): S.AWAKE,
    (S.AWAKE, "sleep"): S.ASLEEP,
}

# Simulated GPU footprint per state (util %, MiB): what nvidia-smi would show.
_FOOTPRINT = {S.ASLEEP: (0, 600), S.WEIGHTS_AWAKE: (2, 16000), S.AWAKE: (3, 60000)}
_GENERATE_UTIL = (85, 60000)


class FakeEngine:
    def __init__(self, kwargs: Mapping[str, Any]):
        unknown = {k for k in kwargs if k.startswith("fake_")} - FAKE_KWARGS
        if unknown:
            raise ValueError(f"unknown fake engine kwargs {sorted(unknown)}; known: {sorted(FAKE_KWARGS)}")
        config = kwargs.get("compilation_config")
        if isinstance(config, Mapping) and "cudagraph_mode" in config:
            mode = str(config["cudagraph_mode"]).upper()
            if mode not in _CUDAGRAPH_MODES:  # vLLM rejects unknown modes too
                raise ValueError(f"unknown cudagraph_mode {config['cudagraph_mode']!r}")
        self.kwargs = dict(kwargs)
        self.cudagraphs = cudagraphs_enabled_in(kwargs)
        self.config = ToyConfig.from_json(kwargs.get("fake_model_config") or {})
        self.wedge_on_generate = kwargs.get("fake_wedge_on_generate")
        self.wedge_at_seed = kwargs.get("fake_wedge_at_seed")
        self.busy_s = float(kwargs.get("fake_generate_busy_s", 0.02))
        self.state = S.NEW
        self.weights_valid = False
        self.prefix_cache_stale = False
        self.generate_calls = 0
        self.model: PackedToyModel | None = None
        self.graph: CUDAGraphWrapper | None = None
        self.runner: GPUModelRunner | None = None

    # -- state machine -------------------------------------------------
    def _advance(self, op: str) -> None:
        try:
            self.state = TRANSITIONS[(self.state, op)]
        except KeyError:
            raise EngineStateError(f"{op} is illegal while the engine is {self.state.value}") from None
        util, mem = _FOOTPRINT.get(self.state, (0, 0))
        simgpu.hold(util, mem)

    def _check(self, op: str) -> None:
        if (self.state, op) not in TRANSITIONS:
            raise EngineStateError(f"{op} is illegal while the engine is {self.state.value}")

    # -- operations ------------------------------------------------------
    def start(self) -> dict[str, Any]:
        self._check("start")
        torch.manual_seed(int(self.kwargs.get("seed", 0)))
        torch.set_num_threads(1)  # a scheduler loop, not a compute server
        self.model = PackedToyModel(self.config)  # dummy weights, like load_format="dummy"
        forward = self.model.forward
        self.graph = CUDAGraphWrapper(forward) if self.cudagraphs else None
        self.runner = GPUModelRunner(self.graph if self.graph is not None else forward)
        self._advance("start")
        self.weights_valid = False
        return {"engine": "fake", "cudagraphs": self.cudagraphs, "pid": os.getpid()}

    def wake_weights(self) -> None:
        self._advance("wake_weights")

    def load_weights(self, path: str, manifest: Mapping[str, Any]) -> dict[str, Any]:
        if self.state is S.ASLEEP:
            raise EngineStateError("load_weights while weights are asleep: call wake_weights first")
        self._check("load_weights")
        assert self.model is not None
        with StagedReader(path) as reader:
            loaded = self.model.load_weights(reader.items())
        self.prefix_cache_stale = self.state is S.AWAKE
        self.weights_valid = True
        self._advance("load_weights")
        return verify_loaded(self.model, manifest, loaded)

    def reset_prefix_cache(self) -> None:
        self._advance("reset_prefix_cache")
        self.prefix_cache_stale = False

    def wake_kv(self) -> None:
        self._advance("wake_kv")

    def sleep(self) -> None:
        self._advance("sleep")
        self.weights_valid = False  # level 2 discards the weights
        self.prefix_cache_stale = False

    def close(self) -> None:
        self.state = S.CLOSED
        simgpu.release()

    def generate(self, prompts: list[str], n: int, seed: int, sampling: Mapping[str, Any]) -> list[list[dict[str, Any]]]:
        self._check("generate")
        if not self.weights_valid:
            raise EngineStateError("generate with discarded weights: load_weights after wake_weights")
        if self.prefix_cache_stale:
            raise EngineStateError("generate with a stale prefix cache: reset_prefix_cache after load_weights")
        assert self.runner is not None
        self.generate_calls += 1
        if self.graph is not None and (self.generate_calls == self.wedge_on_generate or seed == self.wedge_at_seed):
            self.graph.arm_wedge()
        simgpu.hold(*_GENERATE_UTIL)
        started = time.monotonic()
        try:
            outputs = [self._complete(prompt, n, seed, sampling) for prompt in prompts]
            while time.monotonic() - started < self.busy_s:
                self.runner.execute_model(torch.zeros(1, 4, dtype=torch.long)).get_output()
        finally:
            simgpu.hold(*_FOOTPRINT[S.AWAKE])
        return outputs

    @torch.no_grad()
    def _complete(self, prompt: str, n: int, seed: int, sampling: Mapping[str, Any]) -> list[dict[str, Any]]:
        assert self.runner is not None
        vocab = self.config.vocab
        prompt_ids = [b % vocab for b in prompt.encode()] or [0]
        max_tokens = int(sampling.get("max_tokens", 8))
        temperature = float(sampling.get("temperature", 1.0))
        stops = sampling.get("stop") or []
        stops = [stops] if isinstance(stops, str) else list(stops)
        completions = []
        for index in range(n):
            key = hashlib.blake2b(f"{seed}|{index}|{prompt}".encode(), digest_size=8).digest()
            rng = torch.Generator().manual_seed(int.from_bytes(key, "little") & ((1 << 62) - 1))
            tokens: list[int] = []
            for _ in range(max_tokens):
                ids = torch.tensor([prompt_ids + tokens])
                logits = self.runner.execute_model(ids).get_output()[0, -1]
                if temperature <= 0:
                    token = int(logits.argmax())
                else:
                    token = int(torch.multinomial(torch.softmax(logits / temperature, -1), 1, generator=rng))
                tokens.append(token)
            text = "".join(chr(ord("a") + t % 26) for t in tokens)
            for stop in stops:
                if stop and stop in text:
                    text = text[: text.index(stop)]
            completions.append({"index": index, "text": text, "token_ids": tokens})
        # vLLM does not promise index order; neither do we (the worker sorts and checks).
        return completions[::-1]
