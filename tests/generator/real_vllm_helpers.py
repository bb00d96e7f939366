"""Shared by the real-engine tier (``pytest -m real_vllm``, run in ``.venv-vllm``): a tiny Llama and
its tokenizer, built locally at test time (nothing comes from a hub), and the tier's skip reason.

The model is the smallest the CPU attention backend accepts (head_dim 64: 16 is refused with
``Unsupported CPU attention configuration``); the tokenizer is a WordLevel one over a few words,
so that prompts are plain text and completions decode to words.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

WORDS = ("wedge the cat dog sat ran on a mat log red blue big small fast slow and then it was "
         "one two three four five six seven eight nine ten up down left right").split()
SPECIAL = ["<unk>", "<s>", "</s>"]
VOCAB = SPECIAL + WORDS + [f"w{i}" for i in range(128 - len(SPECIAL) - len(WORDS))]
CONFIG = {"hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2, "num_attention_heads": 2,
          "num_key_value_heads": 2, "head_dim": 64, "max_position_embeddings": 512, "vocab_size": len(VOCAB),
          "rms_norm_eps": 1e-5, "tie_word_embeddings": False, "bos_token_id": 1, "eos_token_id": 2}
#: The engine kwargs every real test starts with: CPU-sized, graphs as the test's policy says.
ENGINE_KWARGS: dict[str, Any] = {"dtype": "float32", "max_model_len": 256, "seed": 0, "max_num_seqs": 8,
                                 "kv_cache_memory_bytes": 64 << 20}


def real_vllm_missing() -> str | None:
    """Why the real tier cannot run in this interpreter, or None."""
    if importlib.util.find_spec("vllm") is None:
        return ("vLLM is not installed in this interpreter: the real-engine tier runs in .venv-vllm "
                "(scripts/setup.sh --real-vllm; .venv-vllm/bin/python -m pytest -m real_vllm)")
    return None


def write_tokenizer(directory: Path) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.WordLevel({w: i for i, w in enumerate(VOCAB)}, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="<unk>", bos_token="<s>", eos_token="</s>")
    fast.save_pretrained(str(directory))


def build_model(directory: Path, seed: int = 0, architecture: str = "LlamaForCausalLM",
                extra: dict[str, Any] | None = None) -> Path:
    """A tiny Llama (random weights under ``seed``) and its tokenizer in ``directory``; with
    ``architecture=WEDGE_ARCHITECTURE`` the wedge model, triggered by the word ``wedge``."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    directory.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(LlamaConfig(**CONFIG))
    model.save_pretrained(str(directory), safe_serialization=True)
    write_tokenizer(directory)
    if architecture != "LlamaForCausalLM" or extra:
        path = directory / "config.json"
        config = json.loads(path.read_text())
        config["architectures"] = [architecture]
        config.update(extra or {})
        path.write_text(json.dumps(config, indent=2))
    return directory


def build_wedge_model(directory: Path, seed: int = 0) -> Path:
    """The tiny Llama as vLLM's wedge model (``generator/engines/wedge_model.py``): its forward blocks on
    a batch holding the token of ``wedge`` while the engine's graph policy is on."""
    return build_model(directory, seed, architecture="HangwatchWedgeLlamaForCausalLM",
                       extra={"hangwatch_wedge_token_id": VOCAB.index("wedge")})


def trainer_model(seed: int = 0) -> Any:
    """The trainer's copy: the same tiny Llama in transformers, float32."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    return LlamaForCausalLM(LlamaConfig(**CONFIG))
