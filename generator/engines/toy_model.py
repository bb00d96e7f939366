"""A tiny decoder in two layouts: the trainer's (HF names) and the engine's (vLLM-packed).

``ToyPolicy`` uses Llama-style names with separate ``q_proj``/``k_proj``/
``v_proj`` and ``gate_proj``/``up_proj`` and an ``lm_head`` tied to the
embedding. ``PackedToyModel`` computes the same function with vLLM's layout:
``qkv_proj`` and ``gate_up_proj`` packed along dim 0, the tie kept, and a
``load_weights(iterable) -> set[str]`` that behaves like vLLM's (packs the
pieces, skips ``lm_head.weight`` when tied, returns the names it filled).
K and V are narrower than Q so that slice offsets matter.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Iterable, Mapping

import torch
from torch import nn
from torch.nn import functional as F


@dataclass(frozen=True)
class ToyConfig:
    vocab: int = 64
    hidden: int = 32
    kv: int = 16
    intermediate: int = 64
    layers: int = 2

    def to_json(self) -> dict[str, int]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "ToyConfig":
        unknown = set(data) - set(cls.__dataclass_fields__)
        if unknown:
            raise ValueError(f"unknown ToyConfig keys: {sorted(unknown)}")
        return cls(**{k: int(v) for k, v in data.items()})


def _rms(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * weight


def _mix(x: torch.Tensor) -> torch.Tensor:
    # A causal running mean stands in for attention: position t sees 0..t.
    steps = torch.arange(1, x.shape[-2] + 1, dtype=x.dtype, device=x.device).unsqueeze(-1)
    return x.cumsum(-2) / steps


class _Attn(nn.Module):
    def __init__(self, c: ToyConfig):
        super().__init__()
        self.q_proj = nn.Linear(c.hidden, c.hidden, bias=False)
        self.k_proj = nn.Linear(c.hidden, c.kv, bias=False)
        self.v_proj = nn.Linear(c.hidden, c.kv, bias=False)
        self.o_proj = nn.Linear(c.hidden, c.hidden, bias=False)


class _Mlp(nn.Module):
    def __init__(self, c: ToyConfig):
        super().__init__()
        self.gate_proj = nn.Linear(c.hidden, c.intermediate, bias=False)
        self.up_proj = nn.Linear(c.hidden, c.intermediate, bias=False)
        self.down_proj = nn.Linear(c.intermediate, c.hidden, bias=False)


class _Layer(nn.Module):
    def __init__(self, c: ToyConfig):
        super().__init__()
        self.self_attn = _Attn(c)
        self.mlp = _Mlp(c)


class _Body(nn.Module):
    def __init__(self, c: ToyConfig, layer: type[nn.Module]):
        super().__init__()
        self.embed_tokens = nn.Embedding(c.vocab, c.hidden)
        self.layers = nn.ModuleList(layer(c) for _ in range(c.layers))
        self.norm = nn.Parameter(torch.ones(c.hidden))


def _block(x: torch.Tensor, q, k, v, o, gate, up, down) -> torch.Tensor:
    attn = q * torch.sigmoid(torch.cat([k, v], dim=-1))
    x = x + o(_mix(attn))
    return x + down(F.silu(gate) * up)


class ToyPolicy(nn.Module):
    """The trainer's model (HF layout)."""

    def __init__(self, config: ToyConfig):
        super().__init__()
        self.config = config
        self.model = _Body(config, _Layer)
        self.lm_head = nn.Linear(config.hidden, config.vocab, bias=False)
        self.lm_head.weight = self.model.embed_tokens.weight  # tied, as in many small LMs

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.model.embed_tokens(ids)
        for layer in self.model.layers:
            a, m = layer.self_attn, layer.mlp
            x = _block(x, a.q_proj(x), a.k_proj(x), a.v_proj(x), a.o_proj,
                       m.gate_proj(x), m.up_proj(x), m.down_proj)
        return self.lm_head(_rms(x, self.model.norm)) / self.config.hidden ** 0.5


class _PackedAttn(nn.Module):
    def __init__(self, c: ToyConfig):
        super().__init__()
        self.qkv_proj = nn.Linear(c.hidden, c.hidden + 2 * c.kv, bias=False)
        self.o_proj = nn.Linear(c.hidden, c.hidden, bias=False)


class _PackedMlp(nn.Module):
    def __init__(self, c: ToyConfig):
        super().__init__()
        self.gate_up_proj = nn.Linear(c.hidden, 2 * c.intermediate, bias=False)
        self.down_proj = nn.Linear(c.intermediate, c.hidden, bias=False)


class _PackedLayer(nn.Module):
    def __init__(self, c: ToyConfig):
        super().__init__()
        self.self_attn = _PackedAttn(c)
        self.mlp = _PackedMlp(c)


_PIECES = {"q_proj": ("qkv_proj", 0), "k_proj": ("qkv_proj", 1), "v_proj": ("qkv_proj", 2),
           "gate_proj": ("gate_up_proj", 0), "up_proj": ("gate_up_proj", 1)}


class PackedToyModel(nn.Module):
    """The engine's model (vLLM layout), starting from dummy weights like ``load_format="dummy"``."""

    def __init__(self, config: ToyConfig):
        super().__init__()
        self.config = config
        self.model = _Body(config, _PackedLayer)
        self.lm_head = nn.Linear(config.hidden, config.vocab, bias=False)
        self.lm_head.weight = self.model.embed_tokens.weight
        self.requires_grad_(False)

    def _piece_rows(self, packed: str, index: int) -> tuple[int, int]:
        c = self.config
        sizes = (c.hidden, c.kv, c.kv) if packed == "qkv_proj" else (c.intermediate, c.intermediate)
        return sum(sizes[:index]), sizes[index]

    @torch.no_grad()
    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        params = dict(self.named_parameters())
        loaded: set[str] = set()
        for name, tensor in weights:
            if name == "lm_head.weight":
                continue  # tied to embed_tokens, as vLLM skips it
            parts = name.split(".")
            if len(parts) >= 2 and parts[-2] in _PIECES:
                packed, index = _PIECES[parts[-2]]
                target = ".".join(parts[:-2] + [packed, parts[-1]])
                offset, rows = self._piece_rows(packed, index)
                params[target].narrow(0, offset, rows).copy_(tensor)
                loaded.add(target)
            elif name in params:
                params[name].copy_(tensor)
                loaded.add(name)
            else:
                raise KeyError(f"load_weights: no parameter for {name!r}")
        return loaded

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        c = self.config
        x = self.model.embed_tokens(ids)
        for layer in self.model.layers:
            q, k, v = layer.self_attn.qkv_proj(x).split([c.hidden, c.kv, c.kv], dim=-1)
            gate, up = layer.mlp.gate_up_proj(x).split([c.intermediate, c.intermediate], dim=-1)
            x = _block(x, q, k, v, layer.self_attn.o_proj, gate, up, layer.mlp.down_proj)
        return self.lm_head(_rms(x, self.model.norm)) / self.config.hidden ** 0.5
